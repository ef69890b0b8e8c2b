"""A heartbeat from every run worker, so the daemon's run monitoring sees a dead one in minutes.

Dagster's run monitoring (the daemon's MONITORING loop) asks the run launcher whether a
STARTED run's worker is alive (``check_run_worker_health``), but the default launcher
cannot tell: a run whose worker dies with its code server (an OOM-killed container, a
lost machine), or one started in-process by `tracelake run` and killed -9, stayed STARTED
until ``max_runtime_seconds`` (26 hours) or forever without a daemon. Here:

- every run worker beats: the executor of every job (``executor``, set on the
  Definitions) and the CLI's in-process runs (``beating``) write the time into the
  instance's key-value storage every ``heartbeat_seconds``, from a thread, while the run
  executes; nothing else is written, and only when the instance's launcher reads it;
- ``HeartbeatRunLauncher`` is the default launcher plus the health check the monitoring
  loop calls every ``run_monitoring.poll_interval_seconds``: a run whose last beat is older
  than ``stale_after_seconds`` has lost its worker and is marked failed (``run_retries``
  then launches it again); a run that never beat (started by something that does not
  beat) is left to ``max_runtime_seconds``.

A healthy run, however long (a Message Batch polled for hours), keeps beating. Both
instance files configure it (``run_launcher`` in dagster.yaml and deploy/dagster.yaml).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dagster as dg
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus
from dagster._serdes import ConfigurableClassData

KEY_PREFIX = "tracelake/heartbeat/"


def _key(run_id: str) -> str:
    return KEY_PREFIX + run_id


class HeartbeatRunLauncher(dg.DefaultRunLauncher):
    """The default run launcher, with a run worker health check read from heartbeats."""

    def __init__(
        self,
        inst_data: ConfigurableClassData | None = None,
        heartbeat_seconds: int = 30,
        stale_after_seconds: int = 300,
    ):
        if stale_after_seconds < 3 * heartbeat_seconds:
            raise ValueError("stale_after_seconds must allow at least three missed heartbeats (3 x heartbeat_seconds)")
        self.heartbeat_seconds = heartbeat_seconds
        self.stale_after_seconds = stale_after_seconds
        super().__init__(inst_data=inst_data)

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {
            "heartbeat_seconds": dg.Field(dg.IntSource, is_required=False, default_value=30),
            "stale_after_seconds": dg.Field(dg.IntSource, is_required=False, default_value=300),
        }

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]):
        return cls(inst_data=inst_data, **config_value)

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        last = self._instance.run_storage.get_cursor_values({_key(run.run_id)}).get(_key(run.run_id))
        if not last:  # started by something that does not beat: only max_runtime_seconds applies
            return CheckRunHealthResult(WorkerStatus.RUNNING, "no heartbeat recorded for this run")
        silent = time.time() - float(last)
        if silent > self.stale_after_seconds:
            return CheckRunHealthResult(
                WorkerStatus.FAILED,
                f"no heartbeat from the run worker for {silent:.0f} s (it beats every {self.heartbeat_seconds} s): "
                "it was killed, ran out of memory or lost its machine",
            )
        return CheckRunHealthResult(WorkerStatus.RUNNING)


@contextmanager
def beating(instance: dg.DagsterInstance, run_id: str) -> Iterator[None]:
    """While the block runs, record a heartbeat for ``run_id`` every ``heartbeat_seconds``
    (a daemon thread: it dies with the process, which is the point). Nothing when the
    instance's launcher does not read heartbeats."""
    launcher = instance.run_launcher
    if not isinstance(launcher, HeartbeatRunLauncher):
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while True:
            try:
                instance.run_storage.set_cursor_values({_key(run_id): repr(time.time())})
            except Exception:  # noqa: BLE001 (a missed beat is retried at the next; a lasting outage fails the run)
                pass
            if stop.wait(launcher.heartbeat_seconds):
                return

    thread = threading.Thread(target=beat, name=f"tracelake-heartbeat-{run_id[:8]}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def execute_in_process(job: dg.JobDefinition, instance: dg.DagsterInstance, **kwargs: Any):
    """``job.execute_in_process`` with a heartbeat (which the in-process executor it forces has not)."""
    run_id = kwargs.pop("run_id", None) or str(uuid.uuid4())
    with beating(instance, run_id):
        return job.execute_in_process(instance=instance, run_id=run_id, **kwargs)


class _BeatingExecutor(dg.Executor):
    def __init__(self, inner: dg.Executor):
        self._inner = inner

    def execute(self, plan_context, execution_plan):
        with beating(plan_context.instance, plan_context.run_id):
            yield from self._inner.execute(plan_context, execution_plan)

    @property
    def retries(self):
        return self._inner.retries

    @property
    def step_dependency_config(self):
        return self._inner.step_dependency_config


def _beating_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
    return _BeatingExecutor(dg.multi_or_in_process_executor.executor_creation_fn(init_context))


def executor_for(steps: str = "multiprocess") -> dg.ExecutorDefinition:
    """Dagster's default executor (same name and run config: `execution: config: in_process: {}`
    still applies) whose run worker beats while it orchestrates the run's steps. ``steps`` is the
    default when a run's config says nothing (``TRACELAKE_RUN_STEPS``): ``multiprocess``, a process
    per step (Dagster's default), or ``in_process``, the run's steps in its own process (a run
    starts in seconds instead of a process start per step: for a laptop's ``dagster dev``)."""
    if steps not in ("multiprocess", "in_process"):
        raise ValueError(f"TRACELAKE_RUN_STEPS={steps!r}: expected multiprocess or in_process")
    schema = dg.multi_or_in_process_executor.config_schema.as_field().config_type
    return dg.ExecutorDefinition(
        name=dg.multi_or_in_process_executor.name,
        config_schema=dg.Field(schema, default_value={steps: {}}),
        requirements=dg.multi_or_in_process_executor.get_requirements,
        executor_creation_fn=_beating_executor,
        description="Dagster's multi_or_in_process_executor, with a run worker heartbeat (pipelines/run_heartbeat.py).",
    )


executor = executor_for()
