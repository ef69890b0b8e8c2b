"""`make ui` on fresh demo state starts no ingest by itself: the demo saves the source
sensor's cursor where Dagster's daemon looks for it (the `tracelake` code location's
sensor state in the instance), so the sensor's next evaluation requests nothing.

What is tested is that evaluation, with the cursor the daemon would read: not two
minutes of a running `dagster dev`."""

from datetime import UTC, datetime, timedelta

import dagster as dg
from dagster._core.definitions.selector import InstigatorSelector
from dagster._core.scheduler.instigation import InstigatorStatus

from pipelines.definitions import build
from pipelines.demo.sensor_cursor import sensor_state, settle_source_sensor
from pipelines.resources.object_store import ObjectStore
from pipelines.sensors import new_source_objects


def test_the_demo_saves_the_cursor_the_source_sensor_reads(tmp_path):
    yesterday = datetime.now(UTC).date() - timedelta(days=1)
    path = tmp_path / "source" / f"{yesterday:%Y/%m/%d}" / "support-000.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("{}\n")
    store = ObjectStore(uri=str(tmp_path / "source"))
    (tmp_path / "dagster").mkdir()
    defs = build()

    def requested(cursor: str | None = None) -> list[str]:
        """The load partitions (day x shard: one shard, ``all``) the sensor's evaluation asks for."""
        with dg.build_sensor_context(cursor=cursor, resources={"source": store}, definitions=defs) as context:
            return [str(r.partition_key) for r in new_source_objects(context)]

    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        # without a saved cursor, the sensor takes the demo's last day for new objects
        assert requested() == [f"{yesterday.isoformat()}|all"]
        assert sensor_state(instance, "new_source_objects") is None
        settle_source_sensor(instance, store)
        state = sensor_state(instance, "new_source_objects")
        assert state is not None and state.status == InstigatorStatus.DECLARED_IN_CODE
        # the selector `make ui`'s daemon looks the state up by: pyproject's code location, the sensor's name
        daemon = InstigatorSelector(
            location_name="tracelake", repository_name="__repository__", name="new_source_objects"
        )
        assert state.selector_id == daemon.get_id()
        cursor = state.instigator_data.cursor
        assert requested(cursor) == []  # the daemon's next tick: no run
        # a new object still starts a run
        (path.parent / "support-001.jsonl").write_text("{}\n")
        assert requested(cursor) == [f"{yesterday.isoformat()}|all"]
