"""`tracelake investigate`: from a ticket ("user X, 14:32") to a cause in one command.

The protocol of `find`, `show`, `rot`, `replay --pinned`, `replay --n`, `siblings`, `ablate` and
`promote`, chained on the same cores (pipelines/debug/investigation.py says what each step decides):
every step prints as soon as it is done, a plan of every LLM request and its cost is printed before
anything is sent, and the same report is written as one self-contained HTML file.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import typer

from pipelines.cli.app import app, console, out
from pipelines.cli.debug import _call_or_fail, _fail, _on_served_models, _run_id, _send, _stored_form, _time

MAX_LISTED = 20  # traces listed in the find step (the chosen one always among them)


def _window(value: str) -> timedelta:
    match = re.fullmatch(r"(\d+)\s*([smh])", value.strip())
    if not match:
        raise typer.BadParameter(f"{value!r} is not a window; use 90s, 4m or 1h", param_hint="--window")
    return timedelta(seconds=int(match.group(1)) * {"s": 1, "m": 60, "h": 3600}[match.group(2)])


def _find(warehouse, user_id, at, window, trace_id, call_id):
    """(the trace record, the call, the find step's section)."""
    from pipelines.debug.find import COLUMNS, find_traces, stored_user_ids
    from pipelines.debug.investigation import pick_call, pick_trace, signals
    from pipelines.debug.investigation_report import Section, Table
    from pipelines.debug.tables import findings_by_trace, read_trace

    section = Section("find", "1. Find")
    if call_id:
        picked = _call_or_fail(warehouse, call_id)
        record = read_trace(warehouse, picked["trace_id"]) or {"calls": [picked]}
        section.lines.append(f"call {call_id} as given (trace {picked['trace_id']})")
        return record, picked, section
    if not trace_id:
        if not (user_id and at):
            raise typer.BadParameter("give --user-id with --at, or --trace-id, or --call-id")
        when, width = _time(at, "--at"), _window(window)
        found = find_traces(warehouse, stored_user_ids(user_id, _stored_form), when - width, when + width)
        if found.is_empty():
            _fail(
                f"no traces for that user between {when - width:%Y-%m-%d %H:%M:%S} and {when + width:%H:%M:%S} UTC; "
                "widen --window, or check the user id and that the day is ingested"
            )
        rows = found.to_dicts()
        counts = findings_by_trace(warehouse, [r["trace_id"] for r in rows])
        for row in rows:
            row["findings"] = counts.get(row["trace_id"], 0)
        best, why = pick_trace(rows, when)
        shown_rows = [r for r in rows[:MAX_LISTED]] + ([best] if best not in rows[:MAX_LISTED] else [])
        table = Table(
            "traces", f"traces of the user within {window} of {when:%Y-%m-%d %H:%M} UTC", [*COLUMNS[:-2], "signals"]
        )
        for row in shown_rows:
            table.rows.append(
                [
                    f"{row['started_at']:%H:%M:%S}",
                    *(str(row[c] or "-") for c in COLUMNS[1:-2]),
                    ", ".join(signals(row)) or "-",
                ]
            )
        table.chosen = shown_rows.index(best)
        section.tables.append(table)
        if len(rows) > len(shown_rows):
            section.lines.append(f"{len(rows)} traces in the window; the first {MAX_LISTED} listed")
        trace_id = best["trace_id"]
        section.lines.append(f"trace {trace_id}: {why}")
    record = read_trace(warehouse, trace_id)
    if record is None or not record.get("calls"):
        _fail(f"no trace {trace_id!r} with model calls in {warehouse.uri}; `tracelake find --user-id ...` lists traces")
    picked, why = pick_call(record)
    section.lines.append(f"call {picked['call_id']}: {why}")
    return record, _call_or_fail(warehouse, picked["call_id"]), section


def _rot_now(settings, warehouse, call) -> tuple[dict | None, str, str | None]:
    """(the rot check as a row, when it was made, why it is not from now)."""
    import polars as pl

    from pipelines.cli.rot import CheckUnavailable, check_now
    from pipelines.debug.tables import latest_rot_check
    from pipelines.rot.check import CALL_COLUMNS

    where = (pl.col("call_id") == call["call_id"]) & (pl.col("occurred_date") == call["occurred_date"])
    try:
        [check] = check_now(settings, warehouse, warehouse.read("calls", where, list(CALL_COLUMNS)))
    except CheckUnavailable as e:
        stored = latest_rot_check(warehouse, call["call_id"])
        when = f"stored, {stored['checked_at']:%Y-%m-%d %H:%M}" if stored else "none stored"
        return stored, when, f"could not check it now: {e}"
    row = {k: v for k, v in dataclasses.asdict(check).items() if k not in ("recorded_blocks", "rerendered_blocks")}
    return row, "now", None


def _freeze(settings, warehouse, call, n: int, run_id: str):
    """(the pinned and class-rate replay plans on served models, fidelity words, the freeze section)."""
    from pipelines.debug.investigation import capture_list, explain, rot_lines
    from pipelines.debug.investigation_report import Section, Table
    from pipelines.debug.replay_call import plan_replay

    section = Section("freeze", "2. Freeze")
    capture = Table("capture", "capture list", ["item", "recorded", "what it is"])
    capture.rows = [[c.item, "yes" if c.present else "MISSING", c.meaning] for c in capture_list(call)]
    section.tables.append(capture)
    rot, when, unavailable = _rot_now(settings, warehouse, call)
    section.lines += rot_lines(rot, when) + ([unavailable] if unavailable else [])
    from pipelines.redact.keys import MissingKey
    from pipelines.replay.unlock import redaction_mode_of, unlock_for_command

    try:  # an encrypt-mode call is decrypted (in memory, logged) when the replay key is configured
        unlock = unlock_for_command(
            warehouse, [call], purpose="replay", run_id=run_id, policy_path=settings.redaction_policy
        ).get(call["call_id"])
    except MissingKey as e:
        _fail(str(e))
    if unlock is not None and unlock.error:
        _fail(unlock.error)
    mode = redaction_mode_of(warehouse, call) or settings.redaction_mode
    pinned = plan_replay(call, rot, pin=True, samples=1, redaction_mode=mode, unlock=unlock)
    rate = plan_replay(call, rot, pin=False, samples=n, redaction_mode=mode, unlock=unlock)
    facts = {"rot": rot, "substituted": None, "dropped": {}, "reasons": list(rate.fidelity.reasons)}
    if rate.body is None:
        section.lines.append(f"fidelity: ineligible: the record lacks {', '.join(rate.fidelity.reasons)}")
        return None, None, rate, facts, section
    (pinned_body, rate_body), moved = _on_served_models(settings, [pinned.body, rate.body])
    if moved:
        facts["substituted"] = (rate.body["model"], rate_body["model"])
        facts["reasons"].append("model_substituted")
    translator = settings.llm().translator("investigate")
    facts["dropped"] = translator.wire(pinned_body, cache_prefix=False)[1]
    if facts["dropped"]:
        facts["reasons"].append("parameters_dropped")
    level = "approximate" if facts["reasons"] and rate.fidelity.level == "exact" else rate.fidelity.level
    facts["level"] = level
    section.lines.append(f"fidelity: {level}")
    for reason in facts["reasons"]:
        words = explain(
            reason,
            call=call,
            rot=rot,
            substituted=facts["substituted"],
            dropped=facts["dropped"],
            api_version=translator.api_version,
        )
        section.lines.append(f"  {words}")
    section.lines.append(f"replay path: {rate.path} ({level}): {rate.path_note}")
    return (
        dataclasses.replace(pinned, body=pinned_body),
        dataclasses.replace(rate, body=rate_body),
        rate,
        facts,
        section,
    )


def _compare(warehouse, call):
    from pipelines.debug.investigation_report import Section, Table
    from pipelines.debug.siblings import find_siblings

    section = Section("compare", "4. Compare")
    found = find_siblings(warehouse, call, limit=5) if call.get("request_json") else []
    if not found:
        section.lines.append(
            f"no known-good sibling: no ok call of {call.get('service')} {call.get('template_version') or ''} with the "
            "same tools and input tokens within 20% in the 15 days around it"
        )
        return None, section
    table = Table("siblings", "known-good siblings, best first", ["call", "day", "differences", "input tokens"])
    for s in found:
        table.rows.append(
            [s.call["call_id"], str(s.call["occurred_date"]), str(len(s.differences)), f"{s.token_delta:+.0%}"]
        )
    table.chosen = 0
    best = found[0]
    differences = Table(
        "differences", f"differences from the best sibling {best.call['call_id'][:16]}", ["#", "difference"]
    )
    differences.rows = [[str(d.number), d.label] for d in best.differences]
    section.tables += [table, differences]
    section.lines.append(f"best sibling {best.call['call_id']}: {len(best.differences)} difference(s)")
    return best, section


def _plan(settings, warehouse, requests, budget_usd, call_id):
    from pipelines.replay.plan import plan_requests

    llm = settings.llm()

    def answered(todo):
        found = llm.plan(todo, warehouse, batch=False)
        return found.stored, found.pending, found.resent

    return plan_requests(
        f"the investigation of call {call_id[:16]}",
        requests,
        answered=answered,
        translator=llm.translator("investigate"),
        lifecycle=llm.lifecycle(),
        budget_usd=llm.cap(budget_usd),
        backend=llm.backend,
        batch=False,
    )


@app.command("investigate")
def investigate_command(
    user_id: str = typer.Option(None, "--user-id", help="The user's id as the application logged it"),
    at: str = typer.Option(None, "--at", help="When the ticket says it happened, ISO 8601 (UTC unless it says)"),
    window: str = typer.Option("4m", "--window", help="How far either side of --at to look: 90s, 4m, 1h"),
    trace_id: str = typer.Option(None, "--trace-id", help="Investigate this trace (its worst call)"),
    call_id: str = typer.Option(None, "--call-id", help="Investigate this call"),
    n: int = typer.Option(10, "--n", min=2, max=200, help="Samples per replay and per ablation variant"),
    budget_usd: float = typer.Option(None, "--budget-usd", help="Send nothing if the plan could cost more"),
    plan_only: bool = typer.Option(False, "--plan", help="Stop after printing the plan: nothing is sent"),
    promote: str = typer.Option(None, "--promote", metavar="DATASET", help="Keep the call as a regression case"),
    note: str = typer.Option(None, "--note", help="The case's note with --promote (default: the conclusion)"),
    output: str = typer.Option(None, "-o", "--output", help="The HTML report (default investigation-CALL.html)"),
) -> None:
    """Find the bad call, freeze it, reproduce it, compare it with a good sibling, isolate the cause."""
    from pipelines.debug import investigation as inv
    from pipelines.debug.ablation import ablation_rows, outcomes, symptom_and_test, variants
    from pipelines.debug.investigation_report import (
        Report,
        Section,
        Table,
        render_conclusion,
        render_html,
        render_section,
    )
    from pipelines.debug.replay_call import compare_samples, plan_replay, sample_row
    from pipelines.debug.sampling import sample_requests
    from pipelines.settings import Settings

    settings = Settings.from_env()
    warehouse = settings.warehouse()
    record, call, found = _find(warehouse, user_id, at, window, trace_id, call_id)
    cid = call["call_id"]
    template = " ".join(str(v) for v in (call.get("template_id"), call.get("template_version")) if v) or "-"
    report = Report(
        f"Investigation of call {cid[:16]}",
        [
            ("call", cid),
            ("trace", str(call.get("trace_id"))),
            ("user", str(call.get("user_id") or "-")),
            ("when", f"{call.get('occurred_at'):%Y-%m-%d %H:%M:%S} UTC" if call.get("occurred_at") else "-"),
            ("service", str(call.get("service") or "-")),
            ("model", str(call.get("request_model") or "-")),
            ("template", template),
        ],
    )
    target = Path(output or f"investigation-{cid[:16]}.html")

    def step(section: Section) -> None:
        report.sections.append(section)
        out.print(render_section(section), highlight=False, soft_wrap=True)

    def finish(conclusion: str, next_steps: list[str], code: int = 0) -> None:
        report.conclusion, report.next_steps = conclusion, next_steps
        out.print(render_conclusion(report), highlight=False, soft_wrap=True)
        target.write_text(render_html(report), encoding="utf-8")
        console.print(
            f"wrote {target} ({target.stat().st_size} bytes, no script, no external requests)", soft_wrap=True
        )
        raise typer.Exit(code)

    step(found)
    run_id = _run_id("investigate")
    pinned, rate, plan, facts, frozen = _freeze(settings, warehouse, call, n, run_id)
    step(frozen)
    if rate is None:
        finish(f"cannot be replayed: the record lacks {', '.join(plan.fidelity.reasons)}", [])
    symptom, failed = symptom_and_test(call)
    best, compared = _compare(warehouse, call)

    # every request of the investigation, planned (and priced) before any is sent
    # the ledger records the retired model a substituted request was recorded on
    retired = facts["substituted"][0] if facts["substituted"] else None
    moved_from = {_request_sha(b): retired for b in (pinned.body, rate.body)} if retired else None
    # a decrypted request's answers come back sealed (its values as tokens again); verified bytes go out as recorded
    sealed = {"seal": rate.seal, "cache_prefix": not rate.as_witnessed}
    replays = sample_requests(
        [pinned.body], 1, purpose="debug", mode="pinned", call_id=cid, substituted=moved_from, seal=rate.seal
    )
    replays += sample_requests(
        [rate.body], n, purpose="debug", mode="class_rate", call_id=cid, substituted=moved_from, **sealed
    )
    planned, ablations = [], []
    if best is not None and best.differences:
        good = plan_replay(best.call, None, pin=False, samples=1, redaction_mode=settings.redaction_mode).body
        planned = variants(call, best.call, best.differences, bodies=(plan.body, good))
        served, _ = _on_served_models(settings, [v.body for v in planned])
        planned = [dataclasses.replace(v, body=b) for v, b in zip(planned, served, strict=True)]
        ablations = sample_requests(
            (v.body for v in planned), n, purpose="ablation", mode="ablation", call_id=cid, seal=rate.seal
        )
    llm_plan = _plan(settings, warehouse, replays + ablations, budget_usd, cid)
    lines = llm_plan.lines()
    if ablations:
        lines.append(f"  ({len(ablations)} of them ablate: sent only if the failure reproduces)")
    console.print("\n".join(lines), soft_wrap=True, markup=False, highlight=False)
    if llm_plan.blocked:
        _fail("; ".join(llm_plan.blocked), code=3)
    if plan_only:
        raise typer.Exit(0)

    # 3. reproduce
    spent = _send(settings, replays, run_id=run_id, batch=False, budget_usd=budget_usd, what="reproducing")
    rate_answers = spent.answers.get(_request_sha(rate.body), [])
    pinned_answers = spent.answers.get(_request_sha(pinned.body), [])[:1]
    _, samples = compare_samples(call, rate_answers)
    _, pinned_samples = compare_samples(call, pinned_answers)
    api_version = settings.llm().translator("investigate").api_version
    # a sample with no answer (the backend failed) says nothing about the failure, unless the failure is an error
    counted = samples if symptom == "errored" else [s for s in samples if s.answer.ok]
    reproduction = inv.Reproduction(
        symptom,
        counted,
        inv.Rate.of(sum(s.shows_symptom for s in counted), len(counted)),
        inv.sampling_note(rate.body, facts["dropped"], api_version),
        pinned_samples[0] if pinned_samples else None,
        inv.sampling_note(pinned.body, facts["dropped"], api_version),
    )
    section = Section("reproduce", "3. Reproduce")
    section.lines.append(f"symptom: {symptom} (the recorded finish: {call.get('finish_reason') or '-'})")
    if reproduction.pinned is not None:
        shows = "shows the symptom" if reproduction.pinned.shows_symptom else "does not show the symptom"
        if not reproduction.pinned.answer.ok and symptom != "errored":
            shows = f"no answer ({reproduction.pinned.answer.error or reproduction.pinned.answer.status})"
        section.lines.append(f"pinned replay ({reproduction.pinned_note}): {shows}")
    section.lines.append(f"class rate at production settings ({reproduction.settings}): {reproduction.rate.text()}")
    section.lines.append(_cost_line(spent))
    unanswered = [s for s in samples if s not in counted]
    if unanswered:
        first = unanswered[0].answer.error or unanswered[0].answer.status
        section.lines.append(f"{len(unanswered)} of {len(samples)} samples got no answer ({first}): not counted")
    table = Table("samples", "samples at production settings", ["sample", "finish", "moved", "symptom", "answer"])
    table.rows = [sample_row(s) for s in samples]
    section.tables.append(table)
    section.texts.append(("recorded output", call.get("output_text") or ""))
    if reproduction.pinned is not None:
        section.texts.append(
            ("pinned replay's output", reproduction.pinned.answer.text or reproduction.pinned.answer.error or "")
        )
    step(section)
    step(compared)
    if not counted:
        finish(
            f"not replayed: none of the {len(samples)} requests got an answer ({first}); nothing can be concluded: "
            "check the LLM backend (TRACELAKE_LLM, TRACELAKE_LLM_URL or the API key) and run again",
            [_cost_line(spent)],
            code=4,
        )

    # 5. isolate
    isolation, costs = None, [spent]
    section = Section("isolate", "5. Isolate")
    if not reproduction.reproduces:
        section.lines.append("not run: the failure does not reproduce, so there is nothing to isolate")
    elif not planned:
        section.lines.append("not run: no known-good sibling with a different request")
    else:
        sent = _send(settings, ablations, run_id=run_id, batch=False, budget_usd=budget_usd, what="ablating")
        costs.append(sent)
        results = outcomes(planned, sent.answers, failed)
        isolation = inv.isolate(results, best.differences)
        table = Table(
            "ablation",
            f"failure rate ({symptom}) per variant, Wilson 95% intervals",
            ["#", "difference", "bad, this reversed", "good, this introduced", "effect", "p (Holm)"],
        )
        table.rows.append(
            [
                "0",
                "as recorded",
                inv.Rate.of_outcome(isolation.bad0).text(),
                inv.Rate.of_outcome(isolation.good0).text(),
                "",
                "",
            ]
        )
        for t in sorted(isolation.tested, key=lambda t: t.effect.difference_index):
            e = t.effect
            table.rows.append(
                [
                    str(e.difference_index),
                    e.difference,
                    inv.Rate.of_outcome(e.reversed_in_bad).text(),
                    inv.Rate.of_outcome(e.introduced_in_good).text(),
                    f"{e.effect:+.2f}",
                    f"{t.p_adjusted:.3f}",
                ]
            )
        section.tables.append(table)
        cause = isolation.cause
        section.lines.append(
            f"largest effect: #{cause.effect.difference_index} {cause.effect.difference}"
            if cause
            else "no single difference is significant"
        )
        section.lines.append(_cost_line(sent))
        rows = ablation_rows(call, best.call, results, symptom, run_id=run_id, now=datetime.now(UTC))
        merged = warehouse.merge("ablations", rows)
        section.lines.append(f"ablations: {len(rows)} row(s) ({merged.inserted} new)")
    step(section)

    # 6. conclude
    likely = inv.likely_reasons(
        call,
        rot=facts["rot"],
        fidelity_reasons=facts["reasons"],
        substituted=facts["substituted"],
        dropped=facts["dropped"],
    )
    approximate = facts["reasons"] if facts["level"] != "exact" else []
    conclusion = inv.conclude(
        reproduction, isolation, sibling=best.call["call_id"] if best else None, likely=likely, approximate=approximate
    )
    total = sum(c.cost_usd for c in costs)
    sent_n, reused = sum(c.sent for c in costs), sum(c.reused for c in costs)
    simulated = " (simulated)" if any(c.simulated for c in costs) else ""
    report.facts.append(("replay path", f"{plan.path} ({facts['level']})"))
    report.facts.append(
        ("LLM cost", f"${total:.4f}{simulated}: {sent_n} request(s) sent, {reused} answered from storage")
    )
    next_steps = [f"LLM: {sent_n} request(s) sent, {reused} found stored, ${total:.4f} in all{simulated}"]
    if promote:
        next_steps.append(_promote(warehouse, call, promote, note or conclusion, facts["level"]))
    else:
        next_steps.append(
            f"keep it as a regression case: tracelake investigate --call-id {cid} --promote DATASET "
            "(a re-run reuses every answer: it costs nothing)"
        )
    finish(conclusion, next_steps)


def _request_sha(body: dict) -> str:
    from pipelines.record.canonical import request_sha256

    return request_sha256(body)


def _cost_line(sent) -> str:
    label = " (simulated: tracelake's simulator, not a model)" if sent.simulated else ""
    return f"LLM: {sent.sent} request(s) sent, {sent.reused} found stored, ${sent.cost_usd:.4f}{label}"


def _promote(warehouse, call, dataset: str, note: str, fidelity: str) -> str:
    import getpass

    from pipelines.debug.promote import case_row

    try:
        row = case_row(
            call, dataset, note, replay_fidelity=fidelity, promoted_by=getpass.getuser(), now=datetime.now(UTC)
        )
    except ValueError as e:
        _fail(str(e), code=2)
    merged = warehouse.merge("regression_cases", [row])
    state = "new" if merged.inserted else ("updated" if merged.updated else "unchanged")
    return f"kept as regression case {row['case_id'][:16]} in dataset {dataset} ({state}), replay fidelity {fidelity}"
