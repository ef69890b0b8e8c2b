"""One hostile candidate file never stops the others, and nothing in it is obeyed.

In the registry beside the demo's two candidates: an id of ``[/]`` (rich markup),
a 1.2 KB YAML alias bomb in ``params`` (billions of strings once serialized), a
model name with ESC, NUL, CR/LF and U+202E, a template of 150,000 characters, a
1 MB file, YAML nested thousands deep, and params that try to replace the model.
Each is refused by the candidate schema with the key and the limit, printed as
text (the ``[/]`` shown, no ESC written to the terminal), never sent to the API;
`tracelake candidates` lists the rest, `tracelake run replay` replays them, the
partition sensor adds only them, and a run of a hostile candidate's partition
fails before it sends a request."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from typer.testing import CliRunner

from assets.replay import CandidateFilesRejected, candidate_partitions_sync, replay_summary, replays
from pipelines.cli import app
from pipelines.cli.app import console, out
from pipelines.partitions import CANDIDATE_PARTITIONS, candidate_day_key
from pipelines.replay.candidates import MAX_FILE_BYTES, MAX_TEMPLATE_CHARS, CandidateError, parse_candidate
from pipelines.replay.candidates import MODEL as MODEL_ID
from pipelines.resources.candidates import CandidateRegistry
from pipelines.simulator import simulated_llm
from tests.replay.conftest import DAY, cli_env

HEAD = "version: 1\nid: {slug}\ndescription: a hostile candidate\nmodes: [diff]\n"
MODEL = "model: claude-sonnet-4-6-20261015\n"


def _bomb() -> str:
    """Ten levels of nine aliases each: 9**10 strings once anything walks it, in ~1.2 KB."""
    lines = ["params:", "  max_tokens: 100", '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    names = "abcdefghij"
    for prev, name in zip(names, names[1:], strict=False):
        lines.append(f"  {name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return HEAD.format(slug="bomb") + MODEL + "\n".join(lines) + "\n"


# file name -> (its text, what the refusal must say)
HOSTILE = {
    "bracket.yaml": (HEAD.format(slug='"[/]"') + MODEL, "is not a slug"),
    "bomb.yaml": (_bomb(), "anchors and aliases"),
    "control-model.yaml": (
        HEAD.format(slug="control-model") + 'model: "claude\\e[2J\\0\\r\\n\\u202Esonnet"\n',
        "key model",
    ),
    "long-template.yaml": (
        HEAD.format(slug="long-template") + MODEL + f"template_source: {'x' * (MAX_TEMPLATE_CHARS + 50_000)}\n",
        f"at most {MAX_TEMPLATE_CHARS:,}",
    ),
    "huge-file.yaml": (
        HEAD.format(slug="huge-file") + MODEL + f"template_source: {'y' * 1_000_000}\n",
        f"at most {MAX_FILE_BYTES:,}",
    ),
    "deep.yaml": (HEAD.format(slug="deep") + MODEL + "params: " + "[" * 5000 + "]" * 5000 + "\n", "nests too deeply"),
    "model-by-params.yaml": (
        HEAD.format(slug="model-by-params") + MODEL + 'params: {model: "claude\\e[31m"}\n',
        "cannot be a param",
    ),
    "escape-description.yaml": (
        'version: 1\nid: escape-description\ndescription: "fine\\e]8;;http://x\\e\\\\"\n' + MODEL,
        "control or bidirectional-override character",
    ),
}
# valid, but its text is markup: shown as text, never styled or parsed
MARKUP = "version: 1\nid: markup-text\ndescription: '[/] [b]not bold[/b]'\nactive: false\n" + MODEL


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_each_hostile_file_is_refused_naming_the_file_and_the_limit(name):
    text, expected = HOSTILE[name]
    with pytest.raises(CandidateError) as refused:
        parse_candidate(text, f"registry/{name}")
    message = " ".join(str(refused.value).split())
    assert f"registry/{name}" in message and expected in message, message


@pytest.fixture(scope="module")
def hostile_registry(recorded_day):
    for name, (text, _) in HOSTILE.items():
        (recorded_day.registry / name).write_text(text)
    recorded_day.add_candidate("markup-text", MARKUP)
    recorded_day.add_candidate("sonnet-next")
    recorded_day.add_candidate("support-answer-v4")
    return recorded_day


@pytest.fixture
def env(hostile_registry, sim, tmp_path, monkeypatch):
    for shown_on in (console, out):  # wide enough that no cell wraps (pytest-xdist sets COLUMNS=80)
        monkeypatch.setattr(shown_on, "width", 250)
    return cli_env(hostile_registry, sim, tmp_path, monkeypatch)


def _sent_models(sim) -> set[str]:
    models = set()
    for received in sim.log:
        body = received.body or {}
        models |= {body.get("model")} | {(r.get("params") or {}).get("model") for r in body.get("requests") or []}
    return models - {None}


def test_candidates_lists_the_valid_ones_and_reports_each_hostile_file_as_text(env):
    result = CliRunner().invoke(app, ["candidates"], env=env)
    assert result.exit_code == 0, result.output
    output = result.output
    assert "\x1b" not in output and "\u202e" not in output and "\x00" not in output
    assert "sonnet-next" in output and "support-answer-v4" in output
    assert "[/] [b]not bold[/b]" in output  # the description, as written
    flat = " ".join(output.split())
    for name, (_, expected) in HOSTILE.items():
        assert f"{name}: " in flat and expected in flat, name
    assert "'[/]'" in flat  # the refused id, quoted as text


def test_run_replay_replays_every_valid_candidate_beside_the_hostile_ones(env, sim):
    result = CliRunner().invoke(app, ["run", "replay", "--date", DAY.isoformat()], env=env)
    assert result.exit_code == 0, result.output
    assert f"sonnet-next on {DAY}" in result.output and f"support-answer-v4 on {DAY}" in result.output
    flat = " ".join(result.output.split())
    for name in HOSTILE:
        assert f"skipped {env['TRACELAKE_CANDIDATES']}/{name}" in flat, name
    assert "\x1b" not in result.output
    sent = _sent_models(sim)
    assert "claude-sonnet-4-6-20261015" in sent  # sonnet-next's model was replayed
    assert all(MODEL_ID.match(m) for m in sent), sent  # nothing with a control character reached the API
    bodies = " ".join(str(r.body) for r in sim.log)
    assert "x" * 1000 not in bodies and "y" * 1000 not in bodies, "no oversized template was sent"


def test_the_partition_sensor_adds_only_valid_candidates(hostile_registry):
    instance = dg.DagsterInstance.ephemeral()
    resources = {"candidate_registry": CandidateRegistry(uri=str(hostile_registry.registry))}
    result = candidate_partitions_sync(dg.build_sensor_context(instance=instance, resources=resources))
    (request,) = result.dynamic_partitions_requests
    assert sorted(request.partition_keys) == ["markup-text", "sonnet-next", "support-answer-v4"]
    instance.add_dynamic_partitions(CANDIDATE_PARTITIONS, list(request.partition_keys))
    # the rejected files fail the next tick (the UI shows it): the message is printable text
    with pytest.raises(CandidateFilesRejected) as failed:
        candidate_partitions_sync(dg.build_sensor_context(instance=instance, resources=resources))
    message = str(failed.value)
    assert "\x1b" not in message and "\u202e" not in message and "\x00" not in message
    for name in HOSTILE:
        assert name in message, name


def _refused_run(recorded_day, sim, slug: str, text: str) -> str:
    """Run ``slug``'s partition (the candidate file ``text``): it must fail before anything reaches
    the API. The step failure's error, as text."""
    recorded_day.add_candidate(slug, text)
    sent = len(sim.log)
    resources = {**recorded_day.settings.resources(), "llm": simulated_llm(sim)}
    result = dg.materialize(
        [replays, replay_summary],
        resources=resources,
        partition_key=candidate_day_key(slug, DAY),
        instance=recorded_day.instance,
        raise_on_error=False,
    )
    assert not result.success
    assert len(sim.log) == sent, "nothing reached the API"
    return str(next(e for e in result.all_events if e.is_step_failure).event_specific_data.error)


def test_a_run_of_a_hostile_candidates_partition_fails_before_sending_anything(hostile_registry, sim):
    """The partition exists (added before the file turned hostile, or by hand): its run refuses the candidate."""
    error = _refused_run(hostile_registry, sim, "control-model", HOSTILE["control-model.yaml"][0])
    assert "key model" in error


def test_a_store_template_over_the_limit_is_refused_before_sending_anything(hostile_registry, sim):
    folder = Path(hostile_registry.settings.stores_uri) / "templates" / "support-answer"
    (folder / "huge.j2").write_text("You are support. " * 70_000)  # ~1.2 MB
    text = HEAD.format(slug="store-huge") + MODEL + "template: {id: support-answer, version: huge}\n"
    assert f"at most {MAX_TEMPLATE_CHARS:,}" in _refused_run(hostile_registry, sim, "store-huge", text)
