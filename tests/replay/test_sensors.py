"""The candidate sensor syncs partitions from the registry and rejects bad slugs;
after a nightly run succeeds, one replay run per active synced candidate."""

from __future__ import annotations

import dagster as dg
import pytest

from assets.replay import CandidateFilesRejected, candidate_partitions_sync, nightly_replay
from pipelines.partitions import CANDIDATE_PARTITIONS, candidate_day_key
from pipelines.resources.candidates import CandidateRegistry

GOOD = "version: 1\nid: {slug}\ndescription: a candidate\nmodel: claude-sonnet-4-6-20261015\nactive: {active}\n"


def registry(tmp_path) -> CandidateRegistry:
    folder = tmp_path / "candidates"
    folder.mkdir()
    (folder / "prompt-v5.yaml").write_text(GOOD.format(slug="prompt-v5", active="true"))
    (folder / "parked.yaml").write_text(GOOD.format(slug="parked", active="false"))
    (folder / "Bad|Slug.yaml").write_text(GOOD.format(slug="Bad|Slug", active="true"))
    (folder / "typo.yaml").write_text("version: 1\nid: typo\ndescription: x\nmodle: m\n")
    return CandidateRegistry(uri=str(folder))


def test_sync_adds_valid_candidates_and_rejects_bad_slugs_with_a_clear_message(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    resources = {"candidate_registry": registry(tmp_path)}
    with dg.build_sensor_context(instance=instance, resources=resources) as context:
        result = candidate_partitions_sync(context)
    assert isinstance(result, dg.SensorResult)
    (request,) = result.dynamic_partitions_requests
    assert request.partitions_def_name == CANDIDATE_PARTITIONS
    assert sorted(request.partition_keys) == ["parked", "prompt-v5"]
    instance.add_dynamic_partitions(CANDIDATE_PARTITIONS, list(request.partition_keys))

    # nothing left to add: the rejected files fail the tick, which the UI shows with the file and reason
    with dg.build_sensor_context(instance=instance, resources=resources) as context:
        with pytest.raises(CandidateFilesRejected) as failed:
            candidate_partitions_sync(context)
    message = str(failed.value)
    assert "Bad|Slug.yaml" in message and "is not a slug" in message and "'|'" in message
    assert "typo.yaml" in message and "modle" in message
    assert set(instance.get_dynamic_partitions(CANDIDATE_PARTITIONS)) == {"parked", "prompt-v5"}


def test_a_partition_added_by_hand_is_removed_and_a_rejected_file_keeps_its_own(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    found = registry(tmp_path)
    (tmp_path / "candidates" / "Bad|Slug.yaml").unlink()
    # "Add a partition" in the UI's Materialize dialog; and typo.yaml, once valid, had its partition
    instance.add_dynamic_partitions(CANDIDATE_PARTITIONS, ["prompt-v5", "parked", "gpt-next", "typo"])
    with dg.build_sensor_context(instance=instance, resources={"candidate_registry": found}) as context:
        result = candidate_partitions_sync(context)
    assert isinstance(result, dg.SensorResult)
    (request,) = result.dynamic_partitions_requests
    assert isinstance(request, dg.DeleteDynamicPartitionsRequest) and list(request.partition_keys) == ["gpt-next"]


@dg.op
def nothing() -> None:
    pass


@dg.job(name="nightly")
def nightly_stand_in():
    nothing()


def test_nightly_success_requests_one_replay_run_per_active_candidate(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(CANDIDATE_PARTITIONS, ["prompt-v5", "parked"])
    run = nightly_stand_in.execute_in_process(instance=instance, tags={"dagster/partition": "2026-11-20"})
    event = next(
        e
        for e in instance.all_logs(run.run_id)
        if e.dagster_event and e.dagster_event.event_type_value in ("PIPELINE_SUCCESS", "RUN_SUCCESS")
    )
    context = dg.build_run_status_sensor_context(
        sensor_name="nightly_replay",
        dagster_event=event.dagster_event,
        dagster_instance=instance,
        dagster_run=run.dagster_run,
        resources={"candidate_registry": registry(tmp_path)},
    )
    requests = nightly_replay(context)
    assert [r.partition_key for r in requests] == [candidate_day_key("prompt-v5", "2026-11-20")]
    assert requests[0].run_key == "replay-prompt-v5-2026-11-20"


def test_a_run_of_a_candidate_with_no_file_fails_once_and_is_not_retried(tmp_path):
    from assets.replay import NO_RETRY_TAG, replays
    from tests.environments import local_settings

    (tmp_path / "candidates").mkdir()
    settings = local_settings(tmp_path, candidates_uri=str(tmp_path / "candidates"))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(CANDIDATE_PARTITIONS, ["gpt-next"])  # "Add a partition" in the UI
    result = dg.materialize(
        [replays],
        resources=settings.resources(),
        partition_key=candidate_day_key("gpt-next", "2026-11-20"),
        instance=instance,
        raise_on_error=False,
    )
    assert not result.success
    run = instance.get_run_by_id(result.run_id)
    assert run.tags[NO_RETRY_TAG] == "false"  # the run-retry daemon leaves a step failure with this tag alone
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = failure.step_failure_data.error.message
    assert "no candidate 'gpt-next' in the registry" in message and "Not retried" in message
