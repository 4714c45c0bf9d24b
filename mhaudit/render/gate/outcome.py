"""One gate outcome for CI: text table, GitHub annotations, markdown, JUnit, the JSON section."""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from mhaudit import units
from mhaudit.data import BudgetResult, Finding, GateOutcome, Severity, SourceLocation
from mhaudit.data.gate import Suggestion
from mhaudit.data.schema import finding_to_dict
from mhaudit.errors import sentences
from mhaudit.render import escape
from mhaudit.units import metric_value


def format_value(metric: str, value: float | None) -> str:
    """A metric value with its unit (:func:`mhaudit.units.metric_value`)."""
    return metric_value(metric, value)


def _bound_text(r: BudgetResult) -> str:
    if r.bound == "baseline":
        return (f"baseline {format_value(r.metric, r.baseline)} +{r.increase_percent or 0:g}% "
                f"= {format_value(r.metric, r.limit)}")
    return f"budget {format_value(r.metric, r.limit)}"


_MISSING_TIPS = {
    "train_peak_bytes": "add --train to compute it",
    "decode_step_ms": "add --decode to compute it",
    "decode_kv_cache_bytes": "add --decode to compute it",
}
"""How to get a metric the report lacks, where it is not a measurement."""


def budget_message(r: BudgetResult) -> str:
    """One sentence with metric, limit, actual and delta."""
    bound = _bound_text(r)
    if r.actual is None or r.limit is None:
        tip = _MISSING_TIPS.get(r.metric, "measure on a real device (--device cpu or cuda) to "
                                "get it")
        return f"{r.metric} is not in the report, so it cannot meet {bound}; {tip}"
    delta = r.actual - r.limit
    rel = f", {100.0 * delta / r.limit:+.1f}%" if r.limit else ""
    verb = "within" if r.passed else "exceeds"
    sign = "+" if delta >= 0 else ""
    message = (f"{r.metric} {format_value(r.metric, r.actual)} {verb} {bound} "
               f"({sign}{format_value(r.metric, delta)}{rel})")
    if r.baseline:
        message += f"; {100.0 * (r.actual - r.baseline) / r.baseline:+.1f}% vs baseline"
    return message


def _change(result: BudgetResult) -> str:
    delta = result.delta_percent
    return "" if delta is None else f"{delta:+.1f}%"


def _status(result: BudgetResult) -> str:
    if result.passed:
        return "ok"
    return "FAIL" if result.severity is Severity.ERROR else "warn"


def _breaches(outcome: GateOutcome) -> list[BudgetResult]:
    return [r for r in outcome.results if not r.passed]


def _flag_line(flag: Finding) -> str:
    """The flag in one line of raw text (each format escapes it)."""
    where = f" ({flag.block})" if flag.block is not None else ""
    return f"{flag.code} {flag.name}{where} [{flag.severity.value}]: {flag.message}"


def verdict(outcome: GateOutcome) -> str:
    """One line: PASS or FAIL with the counts behind it."""
    failed = [r for r in _breaches(outcome) if r.severity is Severity.ERROR]
    warned = [r for r in _breaches(outcome) if r.severity is not Severity.ERROR]
    parts = [f"{len(outcome.results)} budget(s) checked", f"{len(failed)} exceeded"]
    if warned:
        parts.append(f"{len(warned)} warning(s)")
    if outcome.fail_on != "never":
        parts.append(f"{len(outcome.failing_findings)} flag(s) at or above {outcome.fail_on}")
    if outcome.unread_cores:
        parts.append(f"{outcome.unread_cores} op(s) that can be attention in no block "
                     "(coverage.unread_cores)")
    if outcome.declared_mismatch:
        parts.append(f"{outcome.declared_mismatch} declared layout attribute(s) the blocks "
                     "contradict (coverage.declared_mismatch)")
    return f"{'PASS' if outcome.passed else 'FAIL'}: {', '.join(parts)}"


GATE_HEADERS = ("metric", "actual", "limit", "baseline", "change", "severity", "status")
GATE_DROP_ORDER = ("severity", "change", "baseline")
"""Columns given up first to last when the table is wider than the terminal: the metric,
its value, its limit and whether it passed stay."""


def _wrapped(text: str, width: int | None, indent: str = "", hang: str = "  ") -> list[str]:
    if width is None:
        return [indent + text]
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + hang,
                         break_on_hyphens=False) or [indent]


def render_table(outcome: GateOutcome, *, title: str | None = None,
                 width: int | None = None) -> str:
    """A plain-text table of every checked metric, then every breach and failing flag;
    with ``width``, every line fits it (columns dropped as in ``report``, text wrapped)."""
    from mhaudit.render.fit import fitted  # the table format only

    rows = [
        [
            r.metric,
            format_value(r.metric, r.actual),
            format_value(r.metric, r.limit),
            format_value(r.metric, r.baseline) if r.baseline is not None else "",
            _change(r),
            r.severity.value,
            _status(r),
        ]
        for r in outcome.results
    ]
    lines = [*_wrapped(escape.plain(title), width), ""] if title else []
    lines += [fitted(rows, GATE_HEADERS, GATE_DROP_ORDER, width)] if rows else []
    breaches = _breaches(outcome)
    if breaches:
        lines += ["", "Over budget:"]
        lines += [ln for r in breaches
                  for ln in _wrapped(f"{r.severity.value}: {budget_message(r)}", width, "  ")]
    if outcome.failing_findings:
        lines += ["", f"Flags at or above {outcome.fail_on}:"]
        lines += [ln for f in outcome.failing_findings
                  for ln in _wrapped(escape.plain(_flag_line(f)), width, "  ")]
    if outcome.suggestion is not None:
        lines += ["", *_wrapped(suggestion_line(outcome.suggestion), width)]
    lines += [""] if lines and lines[-1] else []
    lines += _wrapped(verdict(outcome), width)
    return escape.defuse_lines("\n".join(lines)) + "\n"


def suggestion_line(sug: Suggestion) -> str:
    """The suggested change in one line: what to change, and what the rerun gave."""
    peak = f" (per-GPU peak {units.nbytes(sug.peak_bytes)})" if sug.peak_bytes else ""
    if sug.passes:
        return f"Suggestion: {escape.plain(sug.change)} passes the per-GPU budget{peak}."
    return (f"Suggestion: {escape.plain(sug.change)} comes closest{peak} but still fails; "
            "raise the limit or add GPUs.")


_escape_data = escape.github_data
_escape_property = escape.github_property


_COMMANDS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def render_github(
    outcome: GateOutcome, locations: Mapping[str | None, SourceLocation] | None = None,
    folded: Mapping[str, str | None] | None = None,
) -> str:
    """GitHub workflow commands: one annotation per breach and failing flag, then the verdict.

    ``locations`` maps a block name (None: the model) to its source, for ``file=``/``line=``.
    ``folded`` maps a repeated layer's block name to its group's label (its first block)
    or to None (the others), so that a group's flag is annotated once.
    """
    lines = [
        f"::{_COMMANDS[r.severity]} title={_escape_property(f'mhaudit budget {r.metric}')}"
        f"::{_escape_data(budget_message(r))}"
        for r in _breaches(outcome)
    ]
    for flag in outcome.failing_findings:
        label = (folded or {}).get(flag.block, flag.block) if flag.block is not None else None
        if flag.block is not None and label is None:
            continue
        title = _escape_property(f"mhaudit {flag.code} {flag.name}")
        line = _flag_line(replace(flag, block=label))
        text = sentences(line, f"Fix: {flag.fix}") if flag.fix else line
        where = (locations or {}).get(flag.block) or (locations or {}).get(None)
        place = (f"file={_escape_property(where.path)},line={where.line},"
                 if where is not None else "")
        lines.append(f"::{_COMMANDS[flag.severity]} {place}title={title}::{_escape_data(text)}")
    lines.append(verdict(outcome))
    return "\n".join(lines) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _md_flag(flag: Finding) -> str:
    where = f" ({escape.summary(flag.block)})" if flag.block is not None else ""
    return (f"- `{escape.markdown_code(flag.code)}` {escape.summary(flag.name)}{where} "
            f"[{flag.severity.value}]: {escape.summary(flag.message)}")


def render_markdown(outcome: GateOutcome, *, title: str = "mhaudit budget") -> str:
    """A markdown job summary (for ``GITHUB_STEP_SUMMARY``)."""
    icon = {"ok": "✅ ok", "FAIL": "❌ fail", "warn": "⚠️ warn"}
    lines = [f"## {escape.summary(title)}: {'✅ passed' if outcome.passed else '❌ failed'}", ""]
    if outcome.results:
        lines += [
            "| Metric | Actual | Limit | Baseline | Change | Status |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for r in outcome.results:
            baseline = format_value(r.metric, r.baseline) if r.baseline is not None else ""
            cells = [f"`{r.metric}`", format_value(r.metric, r.actual),
                     format_value(r.metric, r.limit), baseline, _change(r), icon[_status(r)]]
            lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
        lines.append("")
    breaches = _breaches(outcome)
    if breaches:
        lines += ["**Over budget**", ""] + [f"- {budget_message(r)}" for r in breaches] + [""]
    if outcome.failing_findings:
        lines += [f"**Flags at or above `{outcome.fail_on}`**", ""]
        lines += [_md_flag(f) for f in outcome.failing_findings]
        lines.append("")
    lines.append(verdict(outcome))
    return escape.defuse_lines("\n".join(lines)) + "\n"


def render_junit(outcome: GateOutcome, *, suite: str = "mhaudit") -> str:
    """JUnit XML: one testcase per checked metric and one per failing flag."""
    root = ET.Element("testsuites", name=suite)
    budget = ET.SubElement(root, "testsuite", name=f"{suite}.budget")
    failures = 0
    for r in outcome.results:
        case = ET.SubElement(budget, "testcase", classname=f"{suite}.budget", name=r.metric)
        message = escape.xml_text(budget_message(r))
        if not r.passed and r.severity is Severity.ERROR:
            failures += 1
            failure = ET.SubElement(case, "failure", message=message, type="BudgetExceeded")
            failure.text = message
        else:
            out = ET.SubElement(case, "system-out")
            out.text = message if r.passed else f"warning: {message}"
    budget.set("tests", str(len(outcome.results)))
    budget.set("failures", str(failures))
    budget.set("errors", "0")
    flags = ET.SubElement(root, "testsuite", name=f"{suite}.flags")
    for flag in outcome.failing_findings:
        name = f"{flag.code} {flag.name}" + (f" ({flag.block})" if flag.block is not None else "")
        case = ET.SubElement(flags, "testcase", classname=f"{suite}.flags",
                             name=escape.xml_text(name))
        text = escape.xml_text(flag.message)
        failure = ET.SubElement(case, "failure", message=text, type=flag.severity.value)
        failure.text = f"{text}\nFix: {escape.xml_text(flag.fix)}" if flag.fix else text
    flags.set("tests", str(len(outcome.failing_findings)))
    flags.set("failures", str(len(outcome.failing_findings)))
    flags.set("errors", "0")
    root.set("tests", str(len(outcome.results) + len(outcome.failing_findings)))
    root.set("failures", str(failures + len(outcome.failing_findings)))
    root.set("errors", "0")
    ET.indent(root)
    body = ET.tostring(root, encoding="unicode")
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{body}\n'


def budget_to_dict(
    outcome: GateOutcome, metrics: dict[str, float | None] | None = None
) -> dict[str, Any]:
    """The ``budget`` section of the JSON report: verdict, each result, failing flags, metrics."""
    data: dict[str, Any] = {
        "passed": outcome.passed,
        "fail_on": outcome.fail_on,
        "results": [
            {
                "metric": r.metric,
                "actual": r.actual,
                "limit": r.limit,
                "baseline": r.baseline,
                "delta_percent": r.delta_percent,
                "severity": r.severity.value,
                "passed": r.passed,
                "message": budget_message(r),
            }
            for r in outcome.results
        ],
        "failing_flags": [finding_to_dict(f) for f in outcome.failing_findings],
    }
    if outcome.suggestion is not None:
        sug = outcome.suggestion
        data["suggestion"] = {"change": sug.change, "passes": sug.passes,
                              "peak_bytes": sug.peak_bytes}
    if metrics is not None:
        data["metrics"] = dict(metrics)
    return data
