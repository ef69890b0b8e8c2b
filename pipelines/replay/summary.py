"""The per-segment summary of a candidate's day: how many replays improved,
regressed or stayed the same, with Wilson 95% intervals, a paired sign test per
segment (improved vs regressed among the calls that changed, scipy's
``binomtest``), Benjamini-Hochberg across the segments of a day (statsmodels'
``multipletests``), the cost, and a flag when the aggregate improves while a
segment significantly regresses (the aggregate hides it).

Groups never mix fidelities, modes or models: every row is one (mode,
fidelity, model basis, segment), where the model basis says whether the calls
were replayed on the model they were recorded on (``recorded_model``) or on a
retired model's substitute (``substituted``). The ``all`` segment weights each replay by its inverse inclusion
probability (strata were sampled at different rates); its intervals use Kish's
effective sample size. Only final verdicts count (a state replay's last step).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import date
from typing import Any

from pipelines.record.canonical import sha256_hex
from pipelines.replay.compare import IMPROVED, INCONCLUSIVE, REGRESSED, SAME
from pipelines.replay.sampling import SEGMENT_FIELDS

ALL = "all"
ALPHA = 0.05
RECORDED_MODEL, SUBSTITUTED = "recorded_model", "substituted"


def model_basis(row: Mapping[str, Any]) -> str:
    return SUBSTITUTED if row.get("substituted_from") else RECORDED_MODEL


def wilson(count: float, n: float) -> tuple[float | None, float | None]:
    from statsmodels.stats.proportion import proportion_confint  # loaded when used: every run worker loads this module

    if n <= 0:
        return None, None
    low, high = proportion_confint(count, n, alpha=ALPHA, method="wilson")
    return float(low), float(high)


def sign_test(improved: int, regressed: int) -> float:
    from scipy.stats import binomtest  # loaded when used, as statsmodels is

    changed = improved + regressed
    return float(binomtest(improved, changed, 0.5).pvalue) if changed else 1.0


def _counts(rows: list[Mapping[str, Any]], weighted: bool) -> dict[str, Any]:
    weights = [1.0 / r["inclusion_probability"] if weighted and r["inclusion_probability"] else 1.0 for r in rows]
    total = sum(weights)
    n_eff = total * total / sum(w * w for w in weights) if weighted else float(len(rows))
    by = {
        v: sum(w for w, r in zip(weights, rows, strict=True) if r["verdict"] == v)
        for v in (IMPROVED, REGRESSED, SAME, INCONCLUSIVE)
    }
    out: dict[str, Any] = {
        "n": len(rows),
        "weight": total,
        "effective_n": n_eff,
        **{v: sum(1 for r in rows if r["verdict"] == v) for v in (IMPROVED, REGRESSED, SAME, INCONCLUSIVE)},
    }
    for v in (IMPROVED, REGRESSED, SAME):
        share = by[v] / total if total else None
        out[f"{v}_share"] = share
        out[f"{v}_low"], out[f"{v}_high"] = wilson(share * n_eff, n_eff) if share is not None else (None, None)
    p_i, p_r = out["improved_share"], out["regressed_share"]
    if p_i is None:
        out.update(delta=None, delta_low=None, delta_high=None)
    else:
        # Newcombe's hybrid score interval for a difference of two proportions
        out["delta"] = p_i - p_r
        out["delta_low"] = out["delta"] - ((p_i - out["improved_low"]) ** 2 + (out["regressed_high"] - p_r) ** 2) ** 0.5
        out["delta_high"] = (
            out["delta"] + ((out["improved_high"] - p_i) ** 2 + (p_r - out["regressed_low"]) ** 2) ** 0.5
        )
    out["sign_test_p"] = sign_test(out[IMPROVED], out[REGRESSED])
    # what the replays and the judge that compared them cost
    out["cost_usd"] = round(sum((r.get("cost_usd") or 0.0) + (r.get("judge_cost_usd") or 0.0) for r in rows), 8)
    out["input_tokens"] = sum((r.get("input_tokens") or 0) + (r.get("cache_read_input_tokens") or 0) for r in rows)
    out["output_tokens"] = sum(r.get("output_tokens") or 0 for r in rows)
    out["simulated"] = any(r.get("simulated") for r in rows)
    return out


def summarize(rows: Iterable[Mapping[str, Any]], candidate: str, day: date) -> list[dict[str, Any]]:
    """The ``replay_summary`` rows of a candidate's day."""
    from statsmodels.stats.multitest import multipletests  # loaded when used, as in wilson

    groups: dict[tuple[str, str, str], dict[str, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row.get("verdict") is None and row.get("fidelity") != "ineligible":
            continue  # an intermediate state step, or nothing came back
        groups[(row["mode"], row["fidelity"], model_basis(row))][row["segment_key"]].append(row)
    out: list[dict[str, Any]] = []
    for (mode, fidelity, basis), segments in sorted(groups.items()):
        block = []
        for key, members in sorted(segments.items()):
            stats = _counts(members, weighted=False)
            segment = dict(members[0]["segment"])
            block.append({"segment_key": key, **{f: segment.get(f) for f in SEGMENT_FIELDS}, **stats})
        pvalues = [r["sign_test_p"] for r in block]
        adjusted = multipletests(pvalues, alpha=ALPHA, method="fdr_bh")[1] if pvalues else []
        for r, p in zip(block, adjusted, strict=True):
            r["bh_p"] = float(p)
            r["significant_regression"] = r[REGRESSED] > r[IMPROVED] and r["bh_p"] < ALPHA
            r["significant_improvement"] = r[IMPROVED] > r[REGRESSED] and r["bh_p"] < ALPHA
        everything = [m for members in segments.values() for m in members]
        total = {"segment_key": ALL, **{f: None for f in SEGMENT_FIELDS}, **_counts(everything, weighted=True)}
        total["bh_p"] = total["sign_test_p"]
        total["significant_regression"] = total[REGRESSED] > total[IMPROVED] and total["sign_test_p"] < ALPHA
        total["significant_improvement"] = total[IMPROVED] > total[REGRESSED] and total["sign_test_p"] < ALPHA
        hidden = [r["segment_key"] for r in block if r["significant_regression"]]
        flagged = (total["delta"] or 0) > 0 and bool(hidden)
        for r in [total, *block]:
            r.update(
                candidate=candidate,
                day=day,
                mode=mode,
                fidelity=fidelity,
                model_basis=basis,
                aggregate_improves=(total["delta"] or 0) > 0,
                hides_regression=flagged,
                regressed_segments=hidden,
            )
            r["record_sha256"] = sha256_hex(json.dumps(r, sort_keys=True, default=str))
            out.append(r)
    return out
