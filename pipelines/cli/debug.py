"""`tracelake find | show | diff | siblings | ablate | replay | promote`: debugging one bad trace.

A thin shell over pipelines/debug: each command reads through the warehouse
the settings build, calls one core function and prints its result.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from pipelines.cli.app import app, console, out


def _warehouse():
    from pipelines.settings import Settings

    return Settings.from_env().warehouse()


def _time(value: str, option: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not a time; use ISO 8601, e.g. 2026-11-29T14:32", param_hint=option
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _fail(message: str, code: int = 1) -> None:
    console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _call_or_fail(warehouse, call_id: str) -> dict:
    from pipelines.debug.tables import read_call

    call = read_call(warehouse, call_id)
    if call is None:
        _fail(f"no call {call_id!r} in {warehouse.uri}; `tracelake find` or `tracelake show TRACE_ID` lists call ids")
    return call


def _stored_form(raw: str) -> str | None:
    """A personal user id (an email, a phone) as ingest stored it: its keyed pseudonym."""
    from pipelines.redact import KeyRing, MissingKey, stored_id
    from pipelines.redact.identifiers import personal_entity

    if personal_entity(raw) is None:
        return raw
    try:
        keys = KeyRing.from_env()
    except MissingKey as e:
        _fail(f"{e} (the key ingest used, to find the pseudonym of a personal user id)", 2)
    return stored_id(raw, keys)


@app.command("find")
def find_command(
    user_id: str = typer.Option(..., "--user-id", help="The user's id as the application logged it"),
    start: str = typer.Option(..., "--from", help="Start time, ISO 8601 (UTC unless it says otherwise)"),
    end: str = typer.Option(..., "--to", help="End time, ISO 8601 (exclusive)"),
    service: str = typer.Option(None, "--service", help="Only this service (route)"),
) -> None:
    """The traces of one user in a time window, newest first, one line each."""
    from pipelines.debug.find import find_traces, stored_user_ids

    first, last = _time(start, "--from"), _time(end, "--to")
    if last <= first:
        raise typer.BadParameter(f"--to {end} is not after --from {start}", param_hint="--to")
    found = find_traces(_warehouse(), stored_user_ids(user_id, _stored_form), first, last, service)
    if found.is_empty():
        console.print(
            f"no traces for that user between {first:%Y-%m-%d %H:%M} and {last:%Y-%m-%d %H:%M} UTC", soft_wrap=True
        )
        raise typer.Exit(0)
    # plain lines, one write: a busy user can have thousands of traces in a day
    lines = [
        f"{row['started_at']:%Y-%m-%d %H:%M:%S}  {row['trace_id']}  {row['service'] or '-':<16} "
        f"{row['template_version'] or '-':<6} {row['model'] or '-':<28} {row['outcome'] or '-':<10} "
        f"{row['feedback'] or '-'}"
        for row in found.iter_rows(named=True)
    ]
    typer.echo("\n".join(lines))
    console.print(f"{found.height} trace(s)", soft_wrap=True)


@app.command("show")
def show_command(
    trace_id: str = typer.Argument(..., metavar="TRACE_ID"),
    html: bool = typer.Option(False, "--html", help="Write a self-contained HTML report instead"),
    output: str = typer.Option(None, "-o", "--output", help="The HTML file to write (with --html)"),
) -> None:
    """A trace step by step: calls, tools, retrievals, state changes, and the judge's findings."""
    from pipelines.debug.tables import read_trace
    from pipelines.debug.timeline import build_timeline

    warehouse = _warehouse()
    record = read_trace(warehouse, trace_id)
    if record is None:
        _fail(f"no trace {trace_id!r} in {warehouse.uri}; `tracelake find --user-id ...` lists a user's traces")
    timeline = build_timeline(record)
    if html:
        from pipelines.debug.report_html import render_html

        target = Path(output or f"trace-{trace_id}.html")
        target.write_text(render_html(timeline), encoding="utf-8")
        console.print(
            f"wrote {target} ({target.stat().st_size} bytes, no script, no external requests)", soft_wrap=True
        )
        return
    from pipelines.debug.terminal import render_timeline

    for renderable in render_timeline(timeline):
        out.print(renderable, highlight=False, soft_wrap=True)


@app.command("diff")
def diff_command(
    a: str = typer.Argument(..., metavar="A", help="A trace id or a call id"),
    b: str = typer.Argument(..., metavar="B", help="Another of the same kind"),
) -> None:
    """Two traces: the first step whose decisions differ. Two calls: their requests, block by block."""
    from pipelines.debug.diff import diff_calls, diff_traces
    from pipelines.debug.tables import read_call, read_trace
    from pipelines.debug.timeline import build_timeline

    warehouse = _warehouse()
    call_a, call_b = read_call(warehouse, a), read_call(warehouse, b)
    if call_a is not None and call_b is not None:
        table = Table("block", "A", "B", "tokens A", "tokens B", title="request blocks (canonical, sorted keys)")
        changed = diff_calls(call_a, call_b)
        for block in changed:
            status = {"same": "same", "changed": "[yellow]changed[/]", "only_a": "only A", "only_b": "only B"}
            table.add_row(
                block.block,
                status[block.status] if block.status != "only_b" else "-",
                status[block.status] if block.status != "only_a" else "-",
                str(block.tokens_a if block.tokens_a is not None else "-"),
                str(block.tokens_b if block.tokens_b is not None else "-"),
            )
        out.print(table)
        for block in changed:
            if block.lines:
                out.print(Text("\n".join(block.lines)), highlight=False, soft_wrap=True)
        return
    record_a, record_b = read_trace(warehouse, a), read_trace(warehouse, b)
    if record_a is None or record_b is None:
        missing = a if (record_a is None and call_a is None) else b
        _fail(f"{missing!r} is neither a call nor a trace in {warehouse.uri}; give two call ids or two trace ids")
    divergence = diff_traces(build_timeline(record_a), build_timeline(record_b))
    if divergence is None:
        out.print("the two traces make the same decisions at every step", soft_wrap=True)
        return
    sa, sb = divergence.step_a, divergence.step_b
    out.print(
        f"first divergence after {divergence.common_steps} identical step(s): "
        f"A step {sa.number if sa else '-'} ({sa.title if sa else 'ended'}) vs "
        f"B step {sb.number if sb else '-'} ({sb.title if sb else 'ended'})",
        highlight=False,
        soft_wrap=True,
    )
    for label, items in (("only A", divergence.only_a), ("only B", divergence.only_b)):
        for item in items:
            out.print(Text(f"  {label}: {item}"), highlight=False, soft_wrap=True)


@app.command("siblings")
def siblings_command(
    call_id: str = typer.Argument(..., metavar="CALL_ID"),
    limit: int = typer.Option(5, help="How many siblings to list"),
) -> None:
    """Known-good calls like this one, fewest differences first; the differences of the best one."""
    from pipelines.debug.siblings import find_siblings

    warehouse = _warehouse()
    bad = _call_or_fail(warehouse, call_id)
    found = find_siblings(warehouse, bad, limit=limit)
    if not found:
        _fail(
            f"no known-good sibling of {call_id[:16]}: no ok call of {bad.get('service')} "
            f"{bad.get('template_version') or '(no template version)'} with the same tools and input tokens "
            "within 20% in the 15 days around it"
        )
    table = Table(title=f"known-good siblings of {call_id[:16]}")
    table.add_column("call", overflow="fold")
    for name in ("day", "differences", "input tokens"):
        table.add_column(name)
    for s in found:
        table.add_row(s.call["call_id"], str(s.call["occurred_date"]), str(len(s.differences)), f"{s.token_delta:+.0%}")
    out.print(table)
    best = found[0]
    out.print(
        f"best sibling {best.call['call_id']}: {len(best.differences)} difference(s)", highlight=False, soft_wrap=True
    )
    for d in best.differences:
        out.print(Text(f"  {d.number:>2}. {d.label}"), highlight=False, soft_wrap=True)


def _llm_or_fail(settings):
    llm = settings.llm()
    if not llm.available():
        _fail(
            "no LLM configured: set ANTHROPIC_API_KEY, or TRACELAKE_LLM=simulator with TRACELAKE_LLM_URL "
            "(`tracelake simulate-llm` starts one)",
            code=2,
        )
    return llm


def _send(settings, requests, *, run_id: str, batch: bool, budget_usd: float | None, what: str):
    """Send through the LLM resource with a progress bar; prints what it cost."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from pipelines.debug.sampling import send
    from pipelines.llm.request import BudgetExceeded

    llm = _llm_or_fail(settings)
    warehouse = settings.warehouse()
    estimate = llm.estimate(requests, warehouse, batch=batch)
    console.print(
        f"LLM: {estimate.requests} of {len(requests)} request(s) to send, estimated at most ${estimate.usd:.4f}",
        soft_wrap=True,
    )
    with Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), console=console) as progress:
        task = progress.add_task(what, total=len(requests))
        try:
            sent = send(
                llm,
                warehouse,
                requests,
                run_id=run_id,
                batch=batch,
                budget_usd=budget_usd,
                progress=lambda done, total: progress.update(task, completed=done, total=total),
            )
        except BudgetExceeded as e:
            _fail(str(e), code=3)
    label = " (simulated: tracelake's simulator, not a model)" if sent.simulated else ""
    console.print(
        f"LLM: {sent.sent} request(s) sent, {sent.reused} found stored, ${sent.cost_usd:.4f}{label}", soft_wrap=True
    )
    return sent


def _on_served_models(settings, bodies: list[dict]) -> tuple[list[dict], str | None]:
    """The bodies on models the API serves today (a retired model -> its substitute), and a line saying so."""
    from pipelines.llm.lifecycle import UnmappedModel, serve

    lifecycle = settings.llm().lifecycle()
    served, moved = [], {}
    for body in bodies:
        try:
            new, retired = serve(lifecycle, body)
        except UnmappedModel as e:
            _fail(str(e), code=2)
        served.append(new)
        if retired:
            moved[retired] = new["model"]
    note = "; ".join(f"{old} is retired: sent on {new} (its substitute)" for old, new in sorted(moved.items()))
    return served, note or None


def _run_id(prefix: str) -> str:
    return f"{prefix}-{datetime.now(UTC):%Y%m%dT%H%M%S%f}"


@app.command("ablate")
def ablate_command(
    bad_id: str = typer.Argument(..., metavar="BAD", help="The bad call's id"),
    good_id: str = typer.Option(..., "--against", metavar="GOOD", help="A known-good sibling (`tracelake siblings`)"),
    n: int = typer.Option(10, "--n", min=1, max=200, help="Samples per variant, at the bad call's own settings"),
    neutral: bool = typer.Option(False, help="Reverse retrieved documents with a neutral passage, not the sibling's"),
    batch: bool = typer.Option(False, help="Send as Message Batches (cheaper, slower)"),
    budget_usd: float = typer.Option(None, "--budget-usd", help="Refuse to send above this estimated cost"),
) -> None:
    """Reverse one difference at a time (and introduce it into the good call): which one makes it fail?"""
    from pipelines.debug.ablation import ablation_rows, effects, outcomes, symptom_and_test, variants
    from pipelines.debug.sampling import sample_requests
    from pipelines.debug.siblings import differences
    from pipelines.settings import Settings

    settings = Settings.from_env()
    from pipelines.redact.keys import MissingKey
    from pipelines.replay.unlock import Seal, unlock_for_command

    warehouse = settings.warehouse()
    bad, good = _call_or_fail(warehouse, bad_id), _call_or_fail(warehouse, good_id)
    for call in (bad, good):
        if not call.get("request_json"):
            _fail(
                f"call {call['call_id']} has no frozen request to replay (capture_missing: {call['capture_missing']})"
            )
    run_id = _run_id("ablate")
    try:  # encrypt-mode calls are decrypted (in memory, logged) when the replay key is configured
        unlocks = unlock_for_command(
            warehouse, [bad, good], purpose="ablate", run_id=run_id, policy_path=settings.redaction_policy
        )
    except MissingKey as e:
        _fail(str(e))
    for unlock in unlocks.values():
        if unlock.error:
            _fail(unlock.error)
    plain = {i: u.call for i, u in unlocks.items() if u.call is not None}
    # what the decrypted variants produce, and names built from them, are sealed (plaintexts as tokens)
    seals = [u.seal for u in unlocks.values() if u.seal is not None]
    seal = Seal.joined(seals) if seals else None
    shown = seal or (lambda text: text)
    plain_bad, plain_good = plain.get(bad["call_id"], bad), plain.get(good["call_id"], good)
    found = differences(plain_bad, plain_good)
    if not found:
        _fail("the two calls' requests do not differ: nothing to ablate")
    symptom, failed = symptom_and_test(bad)
    planned = variants(plain_bad, plain_good, found, neutral=neutral)
    bodies, moved = _on_served_models(settings, [v.body for v in planned])
    planned = [dataclasses.replace(v, body=b) for v, b in zip(planned, bodies, strict=True)]
    if moved:
        console.print(moved, soft_wrap=True, markup=False)
    requests = sample_requests(
        (v.body for v in planned), n, purpose="ablation", mode="ablation", call_id=bad["call_id"], seal=seal
    )
    console.print(
        f"{len(found)} difference(s), {len(planned)} variants x {n} samples; failure = {symptom}", soft_wrap=True
    )
    sent = _send(settings, requests, run_id=run_id, batch=batch, budget_usd=budget_usd, what="ablating")
    results = outcomes(planned, sent.answers, failed)
    bad0, good0, ranked = effects(results)

    def rate(o) -> str:
        return f"{o.failures}/{o.samples} {o.failure_rate:.0%} [{o.ci_low:.0%}, {o.ci_high:.0%}]"

    table = Table(title=f"failure rate ({symptom}) per variant, Wilson 95% intervals")
    table.add_column("#", justify="right")
    table.add_column("difference", overflow="fold")
    table.add_column("bad, this reversed")
    table.add_column("good, this introduced")
    table.add_column("effect", justify="right")
    table.add_row("0", "as recorded", rate(bad0), rate(good0), "")
    for e in sorted(ranked, key=lambda e: e.difference_index):
        table.add_row(
            str(e.difference_index),
            shown(e.difference),
            rate(e.reversed_in_bad),
            rate(e.introduced_in_good),
            f"{e.effect:+.2f}",
        )
    out.print(table)
    top = ranked[0]
    if top.effect <= 0:
        out.print("cause: none found: no single difference changes the failure rate", highlight=False, soft_wrap=True)
    else:
        out.print(
            Text(
                f"cause: #{top.difference_index} {shown(top.difference)}: reversing it takes the failure rate from "
                f"{bad0.failure_rate:.0%} to {top.reversed_in_bad.failure_rate:.0%}; introducing it into the good "
                f"call takes it from {good0.failure_rate:.0%} to {top.introduced_in_good.failure_rate:.0%}"
            ),
            highlight=False,
            soft_wrap=True,
        )
    rows = [shown(r) for r in ablation_rows(bad, good, results, symptom, run_id=run_id, now=datetime.now(UTC))]
    merged = warehouse.merge("ablations", rows)
    console.print(f"ablations: {len(rows)} row(s) ({merged.inserted} new, version {merged.version})", soft_wrap=True)


def replay_one_call(call_id: str, pinned: bool, n: int) -> None:
    """`tracelake replay CALL_ID`: see pipelines/debug/replay_call.py."""
    from pipelines.debug.replay_call import compare_samples, plan_replay, sample_row
    from pipelines.debug.sampling import sample_requests
    from pipelines.debug.tables import latest_rot_check
    from pipelines.redact.keys import MissingKey
    from pipelines.replay.unlock import redaction_mode_of, unlock_for_command
    from pipelines.settings import Settings

    settings = Settings.from_env()
    warehouse = settings.warehouse()
    call = _call_or_fail(warehouse, call_id)
    run_id = _run_id("replay")
    try:  # an encrypt-mode call is decrypted (in memory, logged) when the replay key is configured
        unlock = unlock_for_command(
            warehouse, [call], purpose="replay", run_id=run_id, policy_path=settings.redaction_policy
        ).get(call_id)
    except MissingKey as e:
        _fail(str(e))
    plan = plan_replay(
        call,
        latest_rot_check(warehouse, call_id),
        pin=pinned,
        samples=n,
        redaction_mode=redaction_mode_of(warehouse, call) or settings.redaction_mode,
        unlock=unlock,
    )
    if unlock is not None and unlock.error:
        _fail(unlock.error)
    if plan.body is None:
        out.print(f"fidelity: {plan.fidelity.level} ({', '.join(plan.fidelity.reasons)})", highlight=False)
        _fail(f"call {call_id[:16]} cannot be replayed: its record lacks {', '.join(plan.fidelity.reasons)}")
    [body], moved = _on_served_models(settings, [plan.body])
    reasons = list(plan.fidelity.reasons) + (["model_substituted"] if moved else [])
    level = "approximate" if moved else plan.fidelity.level
    out.print(f"fidelity: {level}" + (f" ({', '.join(reasons)})" if reasons else ""), highlight=False, soft_wrap=True)
    if moved:
        out.print(moved, highlight=False, soft_wrap=True, markup=False)
    plan = dataclasses.replace(plan, body=body)
    requests = sample_requests(
        [plan.body],
        n,
        purpose="debug",
        mode=plan.mode,
        call_id=call_id,
        seal=plan.seal,
        cache_prefix=not plan.as_witnessed,
    )
    sent = _send(settings, requests, run_id=run_id, batch=False, budget_usd=None, what="replaying")
    answers = next(iter(sent.answers.values()), [])
    symptom, samples = compare_samples(call, answers)
    out.print(
        f"mode {plan.mode}, temperature {plan.body.get('temperature', 'default')}; recorded finish "
        f"{call.get('finish_reason')}; symptom {symptom}",
        highlight=False,
        soft_wrap=True,
    )
    table = Table("sample", "finish", "moved from the original", "shows the symptom", "answer")
    table.columns[-1].overflow = "fold"
    for s in samples:
        table.add_row(*sample_row(s))
    out.print(table)
    shown = sum(s.shows_symptom for s in samples)
    out.print(f"reproduced the symptom in {shown} of {len(samples)} sample(s)", highlight=False, soft_wrap=True)


@app.command("promote")
def promote_command(
    call_id: str = typer.Argument(..., metavar="CALL_ID"),
    dataset: str = typer.Option(..., "--dataset", help="The regression dataset (lowercase slug)"),
    note: str = typer.Option(..., "--note", help="What is wrong with this call, for whoever reads the case"),
) -> None:
    """Keep a reproduced bug as a regression case: frozen request, bad output, note, provenance."""
    import getpass

    from pipelines.debug.promote import case_row
    from pipelines.debug.replay_call import plan_replay
    from pipelines.debug.tables import latest_rot_check
    from pipelines.settings import Settings

    settings = Settings.from_env()
    warehouse = settings.warehouse()
    call = _call_or_fail(warehouse, call_id)
    fidelity = plan_replay(
        call, latest_rot_check(warehouse, call_id), pin=False, samples=1, redaction_mode=settings.redaction_mode
    ).fidelity
    try:
        row = case_row(
            call,
            dataset,
            note,
            replay_fidelity=fidelity.level,
            promoted_by=getpass.getuser(),
            now=datetime.now(UTC),
        )
    except ValueError as e:
        _fail(str(e), code=2)
    merged = warehouse.merge("regression_cases", [row])
    state = "new" if merged.inserted else ("updated" if merged.updated else "unchanged")
    out.print(
        f"case {row['case_id'][:16]} in dataset {dataset} ({state}): symptom {row['symptom']}, "
        f"replay fidelity {fidelity.level}, from {row['source_uri']} line {row['source_line']}",
        highlight=False,
        soft_wrap=True,
    )
