"""Renderers of the gate's verdict for CI: text table, GitHub annotations, markdown, JUnit, JSON."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from tabulate import tabulate

from mhaudit.data import BudgetResult, Finding, GateOutcome, Severity
from mhaudit.render.serialize import finding_to_dict

_UNITS = {
    "flops": "FLOP",
    "kv_cache_bytes_per_token": "B",
    "peak_memory_bytes": "B",
    "latency_ms": "ms",
    "train_peak_bytes": "B",
    "decode_step_ms": "ms",
    "decode_kv_cache_bytes": "B",
}


def format_value(metric: str, value: float | None) -> str:
    """A metric value with its unit: exact counts, SI FLOPs, IEC bytes, milliseconds."""
    if value is None:
        return "n/a"
    unit = _UNITS.get(metric, "")
    sign, mag = ("-" if value < 0 else ""), abs(value)
    if unit == "ms":
        return f"{sign}{mag:.4g} ms"
    prefixes: tuple[str, ...]
    if unit == "B":
        prefixes, base = ("", "Ki", "Mi", "Gi", "Ti", "Pi"), 1024
    elif unit == "FLOP" and mag >= 10**6:
        prefixes, base = ("", "k", "M", "G", "T", "P", "E"), 1000
    else:
        text = f"{int(mag):,}" if float(mag).is_integer() else f"{mag:,.4g}"
        return f"{sign}{text}{' ' + unit if unit else ''}"
    step = 0
    while mag >= base and step < len(prefixes) - 1:
        mag, step = mag / base, step + 1
    return f"{sign}{mag:.4g} {prefixes[step]}{unit}"


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
    return f"{'PASS' if outcome.passed else 'FAIL'}: {', '.join(parts)}"


def render_table(outcome: GateOutcome, *, title: str | None = None) -> str:
    """A plain-text table of every checked metric, then every breach and failing flag."""
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
    headers = ["metric", "actual", "limit", "baseline", "change", "severity", "status"]
    lines = [title, ""] if title else []
    lines += [tabulate(rows, headers=headers, disable_numparse=True)] if rows else []
    breaches = _breaches(outcome)
    if breaches:
        lines += ["", "Over budget:"] + [f"  {r.severity.value}: {r.message}" for r in breaches]
    if outcome.failing_findings:
        lines += ["", f"Flags at or above {outcome.fail_on}:"]
        lines += [f"  {_flag_line(f)}" for f in outcome.failing_findings]
    lines += ["", verdict(outcome)] if lines and lines[-1] else [verdict(outcome)]
    return "\n".join(lines) + "\n"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


_COMMANDS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def render_github(outcome: GateOutcome) -> str:
    """GitHub workflow commands: one annotation per breach and failing flag, then the verdict."""
    lines = [
        f"::{_COMMANDS[r.severity]} title={_escape_property(f'mhaudit budget {r.metric}')}"
        f"::{_escape_data(r.message)}"
        for r in _breaches(outcome)
    ]
    for flag in outcome.failing_findings:
        title = _escape_property(f"mhaudit {flag.code} {flag.name}")
        text = _flag_line(flag) + (f" Fix: {flag.fix}" if flag.fix else "")
        lines.append(f"::{_COMMANDS[flag.severity]} title={title}::{_escape_data(text)}")
    lines.append(verdict(outcome))
    return "\n".join(lines) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(outcome: GateOutcome, *, title: str = "mhaudit budget") -> str:
    """A markdown job summary (for ``GITHUB_STEP_SUMMARY``)."""
    icon = {"ok": "✅ ok", "FAIL": "❌ fail", "warn": "⚠️ warn"}
    lines = [f"## {title}: {'✅ passed' if outcome.passed else '❌ failed'}", ""]
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
        lines += ["**Over budget**", ""] + [f"- {r.message}" for r in breaches] + [""]
    if outcome.failing_findings:
        lines += [f"**Flags at or above `{outcome.fail_on}`**", ""]
        lines += [f"- `{f.code}` {_flag_line(f)[len(f.code) + 1:]}"
                  for f in outcome.failing_findings]
        lines.append("")
    lines.append(verdict(outcome))
    return "\n".join(lines) + "\n"


def render_junit(outcome: GateOutcome, *, suite: str = "mhaudit") -> str:
    """JUnit XML: one testcase per checked metric and one per failing flag."""
    root = ET.Element("testsuites", name=suite)
    budget = ET.SubElement(root, "testsuite", name=f"{suite}.budget")
    failures = 0
    for r in outcome.results:
        case = ET.SubElement(budget, "testcase", classname=f"{suite}.budget", name=r.metric)
        if not r.passed and r.severity is Severity.ERROR:
            failures += 1
            failure = ET.SubElement(case, "failure", message=r.message, type="BudgetExceeded")
            failure.text = r.message
        else:
            out = ET.SubElement(case, "system-out")
            out.text = r.message if r.passed else f"warning: {r.message}"
    budget.set("tests", str(len(outcome.results)))
    budget.set("failures", str(failures))
    budget.set("errors", "0")
    flags = ET.SubElement(root, "testsuite", name=f"{suite}.flags")
    for flag in outcome.failing_findings:
        name = f"{flag.code} {flag.name}" + (f" ({flag.block})" if flag.block is not None else "")
        case = ET.SubElement(flags, "testcase", classname=f"{suite}.flags", name=name)
        failure = ET.SubElement(case, "failure", message=flag.message, type=flag.severity.value)
        failure.text = f"{flag.message}\nFix: {flag.fix}" if flag.fix else flag.message
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
                "message": r.message,
            }
            for r in outcome.results
        ],
        "failing_flags": [finding_to_dict(f) for f in outcome.failing_findings],
    }
    if metrics is not None:
        data["metrics"] = dict(metrics)
    return data
