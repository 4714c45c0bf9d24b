"""``mhaudit check`` output: one renderer per format, for one checked model or several."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from mhaudit.data import GateOutcome, Report, Severity, SourceLocation
from mhaudit.render.escape import summary as _summary_text
from mhaudit.render.escape import text_data
from mhaudit.render.gate import outcome as one
from mhaudit.render.sarif import fingerprint, physical, sarif_log
from mhaudit.render.style import PLAIN, RenderOptions


@dataclass(frozen=True)
class Checked:
    """One target through the gate: its report, the verdict, and the metrics judged."""

    target: str
    report: Report
    outcome: GateOutcome
    metrics: dict[str, float | None]

    def data(self) -> dict[str, Any]:
        """The JSON report with its ``budget`` section."""
        return {**self.report.to_dict(),
                "budget": one.budget_to_dict(self.outcome, self.metrics)}

    def folded(self) -> dict[str, str | None]:
        """A repeated layer's block names: the first to its group label, the others to None."""
        found: dict[str, str | None] = {}
        for g in self.report.groups:
            if g.count > 1:
                found.update(dict.fromkeys(g.names[1:]))
                found[g.names[0]] = f"{g.pattern} ({g.count} blocks)"
        return found

    def locations(self) -> dict[str | None, SourceLocation]:
        """Block name (None: the model) to its source location."""
        found: dict[str | None, SourceLocation] = {
            b.name: b.location for b in self.report.blocks if b.location is not None}
        if self.report.model.location is not None:
            found[None] = self.report.model.location
        return found


CheckRenderer = Callable[[Sequence[Checked], RenderOptions], str]

BUDGET_RULE = {
    "id": "MHAB001",
    "name": "attention-budget-exceeded",
    "shortDescription": {"text": "A model metric is over its budget or grew past its baseline."},
    "fullDescription": {"text": "The budget gate compares parameters, FLOPs, KV cache, peak "
                        "memory and latency with the limits in the [budget] table."},
    "helpUri": "https://github.com/mhaudit/mhaudit#ci-model-budget-gate",
    "defaultConfiguration": {"level": "error"},
}
def escape_md(text: str) -> str:
    """A target name in a markdown table cell."""
    return _summary_text(text)


_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def input_shapes(report: Report) -> str:
    """The example inputs the FLOPs budget depends on: ``x 1×128×256`` (``;`` between)."""
    parts = []
    for name, spec in report.model.inputs.items():
        shape = spec.get("shape") if isinstance(spec, dict) else None
        dims = "×".join(str(d) for d in shape) if isinstance(shape, (list, tuple)) else "?"
        parts.append(f"{name} {dims}")
    return "; ".join(parts)


def _title(prefix: str, c: Checked) -> str:
    shapes = input_shapes(c.report)
    return f"{prefix}{c.target}" + (f" (input {shapes})" if shapes else "")


def model_verdicts(items: Sequence[Checked]) -> list[str]:
    """One ``PASS a.py`` / ``FAIL b.py`` line per model, then the overall verdict."""
    lines = [f"{'PASS' if c.outcome.passed else 'FAIL'} {c.target}" for c in items]
    return [*lines, overall_verdict(items)]


def overall_verdict(items: Sequence[Checked]) -> str:
    """``FAIL: 2 models: 1 passed, 1 failed``: the worst verdict wins."""
    failed = sum(not c.outcome.passed for c in items)
    word = "FAIL" if failed else "PASS"
    return f"{word}: {len(items)} models: {len(items) - failed} passed, {failed} failed"


def checks_table(items: Sequence[Checked], options: RenderOptions) -> str:
    """Each target's gate table; with several, a summary across models first and the
    per-model verdicts and the overall one last."""
    from mhaudit.render.summary import summary_table  # the table format only

    width = None if options.wide else options.width
    parts = [one.render_table(c.outcome, title=_title("mhaudit check ", c), width=width)
             for c in items]
    if len(items) > 1:
        table = summary_table([c.report for c in items], width=width)
        parts.insert(0, f"mhaudit: {len(items)} models\n\n{table}\n")
        parts.append("\n".join(model_verdicts(items)) + "\n")
    return "\n".join(parts)


def checks_json(items: Sequence[Checked], options: RenderOptions) -> str:
    """The JSON report with its ``budget`` section (several targets: a list)."""
    data: Any = items[0].data() if len(items) == 1 else [c.data() for c in items]
    return json.dumps(text_data(data), indent=2) + "\n"


def checks_github(items: Sequence[Checked], options: RenderOptions) -> str:
    """GitHub annotations for every breach and failing flag of every target."""
    return "".join(one.render_github(c.outcome, c.locations(), c.folded()) for c in items)


def checks_markdown(items: Sequence[Checked], options: RenderOptions = PLAIN) -> str:
    """The job summary: one section per target; with several, a summary table first and
    the per-model verdicts and the overall one last."""
    from mhaudit.render.summary import summary_table  # the markdown format only

    parts = [one.render_markdown(c.outcome, title=_title("mhaudit budget: ", c)) for c in items]
    if len(items) > 1:
        parts.insert(0, f"## mhaudit: {len(items)} models\n\n"
                     f"{summary_table([c.report for c in items], 'github')}\n")
        rows = [f"| {escape_md(c.target)} | {'✅ PASS' if c.outcome.passed else '❌ FAIL'} |"
                for c in items]
        parts.append("\n".join(["## Verdict", "", "| Model | Verdict |", "|---|---|", *rows,
                                "", f"**{overall_verdict(items)}**"]) + "\n")
    return "\n".join(parts)


def checks_junit(items: Sequence[Checked], options: RenderOptions) -> str:
    """JUnit XML: one budget and one flags suite per target."""
    if len(items) == 1:
        return one.render_junit(items[0].outcome)
    root = ET.Element("testsuites", name="mhaudit")
    for c in items:
        for suite in ET.fromstring(one.render_junit(c.outcome, suite=f"mhaudit.{c.target}")):
            root.append(suite)
    for key in ("tests", "failures", "errors"):
        root.set(key, str(sum(int(s.get(key, "0")) for s in root)))
    ET.indent(root)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{ET.tostring(root, encoding="unicode")}\n'


def checks_sarif(items: Sequence[Checked], options: RenderOptions) -> str:
    """SARIF 2.1.0: every breach as a result of the budget rule."""
    breaches = [
        {
            "ruleId": BUDGET_RULE["id"],
            "level": _LEVEL[r.severity],
            "message": {"text": f"{c.target}: {one.budget_message(r)}"},
            "locations": physical(c.report.model.location),
            "partialFingerprints": {"mhaudit/v1": fingerprint("budget", r.metric, c.target)},
        }
        for c in items for r in c.outcome.results if not r.passed
    ]
    log = sarif_log([c.report for c in items], [BUDGET_RULE], breaches)
    return json.dumps(text_data(log), indent=2) + "\n"


def checks_html(items: Sequence[Checked], options: RenderOptions) -> str:
    """One HTML page: each target's verdict, its budget table and its report."""
    from mhaudit.render.html import html_table, page, report_section  # html only

    parts = []
    for c in items:
        rows = [[r.metric, one.format_value(r.metric, r.actual),
                 one.format_value(r.metric, r.limit), r.severity.value,
                 "ok" if r.passed else "over"] for r in c.outcome.results]
        verdict = one.verdict(c.outcome)
        title = escape(f"mhaudit check {c.target}: {verdict.split(':')[0]}")
        parts.append(f"<section><h1>{title}</h1>"
                     + html_table(["metric", "actual", "limit", "severity", "status"], rows)
                     + f"<p>{escape(verdict)}</p>" + report_section(c.report, options, level=2)
                     + "</section>")
    return page(f"mhaudit check: {', '.join(c.target for c in items)}", "\n".join(parts))
