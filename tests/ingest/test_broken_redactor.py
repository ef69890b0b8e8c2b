"""A broken redactor cannot blind the safety net: the pre-write screen scans the tables
about to be written, apart from the redactor, and quarantines what it left behind.

Two breakages, through the real ingest job: the CPF recognizer disabled (the redactor
never sees the CPF), and the redacted text lost on its way into the row (the redactor
sees and replaces it, but the row keeps the raw text: a screen that judged what the
redactor wrote, where it wrote it, would have passed it).
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import polars as pl
import pytest

from pipelines.record.schema import TABLES
from pipelines.redact import analyzer, redactor
from pipelines.redact.recognizers import CpfRecognizer
from tests.environments import local_settings, run_stage
from tests.ingest.test_pii_at_rest import files_text

DAY = date(2026, 11, 20)
CPF = "529.982.247-25"


def frozen_call(n: int, user: str) -> dict:
    return {
        "format": "tracelake.frozen_call",
        "version": 1,
        "trace_id": f"trace-broken-{n}",
        "span_id": f"span-broken-{n}",
        "occurred_at": f"{DAY.isoformat()}T11:0{n}:00+00:00",
        "service": "billing",
        "model": {"id": "claude-sonnet-4-5-20250929"},
        "request": {
            "model": "claude-sonnet-4-5-20250929",
            "max_tokens": 256,
            "messages": [{"role": "user", "content": user}],
        },
        "response": {"id": f"msg-broken-{n}", "content": [{"type": "text", "text": "Anotado."}]},
    }


def _without_cpf(regions: tuple[str, ...], ner: bool) -> list:
    return [r for r in BUILD(regions, ner) if not isinstance(r, CpfRecognizer)]


BUILD = analyzer.build_recognizers
BREAKAGES = {
    "cpf recognizer disabled": (analyzer, "build_recognizers", _without_cpf),
    "redacted text lost on its way into the row": (redactor, "_changes", lambda before, after: {}),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_a_broken_redactors_residue_is_caught_by_the_independent_screen_and_quarantined(
    tmp_path: Path, monkeypatch, breakage
):
    folder = tmp_path / "source" / f"{DAY:%Y/%m/%d}"
    folder.mkdir(parents=True)
    users = ["Onde está meu reembolso?", f"Meu CPF é {CPF}, pode conferir?", "Obrigado!", f"CPF {CPF} de novo"]
    lines = [json.dumps(frozen_call(n, user), ensure_ascii=False) for n, user in enumerate(users)]
    (folder / "calls.jsonl").write_text("\n".join(lines) + "\n")
    module, name, broken = BREAKAGES[breakage]
    monkeypatch.setattr(module, name, broken)

    # the breakage is real: this redactor leaves the CPF in the rows it returns
    from pipelines.redact.redactor import Redactor
    from tests.redact.conftest import KEYS, rows_of

    with Redactor(mode="placeholder", keys=KEYS, ner=False) as leaky:
        out = leaky.redact_rows(*rows_of([frozen_call(1, users[1])]))
    assert CPF in json.dumps(out.calls, ensure_ascii=False, default=str)

    settings = local_settings(tmp_path)
    result = run_stage(settings, "ingest", DAY.isoformat())
    assert result.success  # nothing got through, so the blocking checks pass
    warehouse = settings.warehouse()
    assert sorted(warehouse.read("calls")["trace_id"]) == ["trace-broken-0", "trace-broken-2"]
    held = warehouse.read("quarantine").filter(pl.col("error_class") == "residual_pii")
    assert sorted(held["line"]) == [2, 2, 4, 4]  # each leaking call and its span, by pointer
    assert all(CPF not in m and "529" not in m for m in held["message"])
    assert any("still matched the cpf pattern" in m for m in held["message"])
    for table in TABLES:
        if warehouse.table(table) is not None:
            assert CPF not in warehouse.read(table).write_ndjson(), table
    assert CPF not in files_text(tmp_path / "warehouse")
    log = warehouse.read("ingest_log").row(0, named=True)
    assert (log["records_read"], log["records_ingested"], log["records_quarantined"]) == (4, 2, 2)
