"""The per-segment summary as people read it: table rows and a PNG plot of the
per-segment deltas (improved share minus regressed share) with their intervals."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

SEGMENT_COLUMNS = (
    "mode",
    "fidelity",
    "model_basis",
    "segment_key",
    "n",
    "improved",
    "regressed",
    "same",
    "inconclusive",
    "delta",
    "delta_interval",
    "bh_p",
    "flag",
    "cost_usd",
)
FIDELITY_ORDER = {"exact": 0, "approximate": 1, "ineligible": 2}


def _interval(low: float | None, high: float | None) -> str:
    return "" if low is None or high is None else f"[{low:+.2f}, {high:+.2f}]"


def _flag(row: Mapping[str, Any]) -> str:
    if row["segment_key"] == "all":
        return "HIDES A REGRESSION" if row["hides_regression"] else ""
    if row["significant_regression"]:
        return "regresses"
    return "improves" if row["significant_improvement"] else ""


def basis(row: Mapping[str, Any]) -> str:
    """Whether a summary row's calls ran on their recorded model or a retired model's substitute."""
    return row.get("model_basis") or "recorded_model"


def group_of(row: Mapping[str, Any]) -> tuple[str, str, str]:
    """The rows one table or panel shows: never mixing modes, fidelities or model bases."""
    return row["mode"], row["fidelity"], basis(row)


def ordered(summary: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(
        summary,
        key=lambda r: (
            r["mode"],
            FIDELITY_ORDER.get(r["fidelity"], 9),
            basis(r),
            r["segment_key"] != "all",
            r["segment_key"],
        ),
    )


def segment_table_rows(summary: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One display row per summary row, in reading order (the ``all`` row first per group)."""
    rows = []
    for r in ordered(summary):
        rows.append(
            {
                "mode": r["mode"],
                "fidelity": r["fidelity"],
                "model_basis": basis(r),
                "segment_key": r["segment_key"],
                "n": r["n"],
                "improved": r["improved"],
                "regressed": r["regressed"],
                "same": r["same"],
                "inconclusive": r["inconclusive"],
                "delta": "" if r["delta"] is None else f"{r['delta']:+.2f}",
                "delta_interval": _interval(r["delta_low"], r["delta_high"]),
                "bh_p": f"{r['bh_p']:.3g}",
                "flag": _flag(r),
                "cost_usd": f"{r['cost_usd']:.4f}",
            }
        )
    return rows


def plot_deltas(summary: Iterable[Mapping[str, Any]], path: Path, title: str) -> Path:
    """A horizontal interval plot of each segment's delta, one panel per (mode, fidelity, model basis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for r in ordered(summary):
        if r["delta"] is not None:
            groups.setdefault(group_of(r), []).append(r)
    panels = max(1, len(groups))
    height = max(2.5, 0.35 * max((len(g) for g in groups.values()), default=1) + 1.2)
    fig, axes = plt.subplots(panels, 1, figsize=(9, height * panels), squeeze=False)
    for ax, ((mode, fidelity, model), rows) in zip(axes[:, 0], groups.items(), strict=False):
        ys = list(range(len(rows)))[::-1]
        for y, r in zip(ys, rows, strict=True):
            color = (
                "tab:red"
                if r["significant_regression"]
                else ("tab:green" if r["significant_improvement"] else "tab:gray")
            )
            if r["segment_key"] == "all":
                color = "black"
            ax.errorbar(
                r["delta"],
                y,
                xerr=[[r["delta"] - r["delta_low"]], [r["delta_high"] - r["delta"]]],
                fmt="o",
                color=color,
                capsize=3,
            )
        # over several days each segment has a row per day: say which
        dated = len({r.get("day") for r in rows}) > 1
        labels = [
            f"{r['segment_key']} {r['day']} (n={r['n']})" if dated else f"{r['segment_key']} (n={r['n']})" for r in rows
        ]
        ax.set_yticks(ys, labels, fontsize=8)
        ax.axvline(0, color="lightgray", linewidth=1)
        ax.set_xlim(-1.05, 1.05)
        ax.set_xlabel("improved share - regressed share (95% interval)")
        on = ", on a retired model's substitute" if model == "substituted" else ""
        ax.set_title(f"{mode} replay, {fidelity} fidelity{on}", fontsize=10)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
