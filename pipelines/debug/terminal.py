"""The timeline for a terminal (rich renderables): one block per step."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from pipelines.debug.timeline import Step, Timeline, segments
from pipelines.printable import inert

# a terminal block shows this much of a long value; `show --html` shows all of it
MAX_TEXT = 600
STYLES = {"llm_call": "cyan", "tool": "yellow", "retrieval": "blue", "state": "magenta", "think": "dim"}


def value_text(value: str) -> Text:
    """A value from a trace as terminal text: control characters escaped, redaction placeholders
    highlighted, cut at ``MAX_TEXT`` characters (saying how many more there are)."""
    value = inert(value)
    shown = value if len(value) <= MAX_TEXT else value[:MAX_TEXT]
    text = Text()
    for piece, placeholder in segments(shown):
        text.append(piece, style="bold magenta" if placeholder else None)
    if len(value) > MAX_TEXT:
        text.append(f" … ({len(value) - MAX_TEXT} more characters; --html shows all)", style="dim")
    return text


def render_step(step: Step) -> RenderableType:
    head = Text.assemble((f"step {step.number:>2}  ", "bold"), (step.title, f"bold {STYLES.get(step.kind, '')}"))
    if step.status and step.status != "ok":
        head.append(f"  [{step.status}]", style="red")
    if step.at is not None:
        head.append(f"  {step.at:%H:%M:%S.%f}"[:-3], style="dim")
    if step.first_violation:
        head.append("  <<< FIRST VIOLATION", style="bold red")
    body: list[RenderableType] = [head]
    for label, value in step.facts:
        line = Text(f"  {label:>10}  ", style="dim")
        line.append_text(value_text(str(value)))
        body.append(line)
    for item in step.texts:
        if not item.value:
            continue
        body.append(Text(f"  {item.label}:", style="dim"))
        body.append(Text("    ").append_text(value_text(item.value)))
    for violation in step.violations:
        body.append(Text(f"  ! state violation: {violation}", style="red"))
    for finding in step.findings:
        body.append(Text(f"  ! semantic error: {finding}", style="red"))
    return Group(*body)


def render_timeline(timeline: Timeline) -> list[RenderableType]:
    facts = Text("\n".join(f"{k:>14}  {v}" for k, v in timeline.facts))
    out: list[RenderableType] = [Panel(facts, title=f"trace {timeline.trace_id}", expand=False)]
    for step in timeline.steps:
        out.append(render_step(step))
        out.append(Text(""))
    for finding in timeline.unplaced_findings:
        out.append(Text(f"! (no step) {finding}", style="red"))
    return out
