"""Markdown renderer, for pull-request comments and job summaries."""

from __future__ import annotations

from tabulate import tabulate

from mhaudit.data import Report
from mhaudit.render.phases import phase_lines
from mhaudit.render.table import (
    BLOCK_HEADERS,
    MEASURE_HEADERS,
    SCALING_HEADERS,
    block_rows,
    flag_lines,
    formula_lines,
    header_lines,
    measure_rows,
    scaling_rows,
    target_lines,
    total_lines,
)


def render_markdown(report: Report) -> str:
    """The report as GitHub-flavoured markdown."""
    title, how = header_lines(report)
    out = [f"## {title}", "", how, ""]
    if report.groups:
        out.append(tabulate(block_rows(report), headers=BLOCK_HEADERS, tablefmt="github",
                            disable_numparse=True))
        out += ["", "### Parameters", "", "```"]
        for group in report.groups:
            out.extend(formula_lines(group))
        out.append("```")
    else:
        out.append("No attention blocks found.")
    targets = target_lines(report)
    if targets:
        out += ["", "### Target", "", targets[0], ""]
        out.extend(f"- {line.strip()}" for line in targets[1:])
    if report.findings:
        out += ["", "### Flags", ""]
        lines = flag_lines(report)
        for finding_line, fix_line in zip(lines[::2], lines[1::2], strict=True):
            out.append(f"- **{finding_line.split(' ', 1)[0]}** {finding_line.split(' ', 1)[1]}")
            out.append(f"  - {fix_line.strip()}")
    if report.scaling:
        out += ["", "### Scaling with sequence length", ""]
        out.append(tabulate(scaling_rows(report), headers=SCALING_HEADERS, tablefmt="github",
                            disable_numparse=True))
    if report.measurement is not None:
        out += ["", "### Measured", ""]
        out.append(tabulate(measure_rows(report), headers=MEASURE_HEADERS, tablefmt="github",
                            disable_numparse=True))
    phases = phase_lines(report)
    if phases:
        out += ["", "### Phases", ""]
        out.extend(f"- {line.strip()}" for line in phases[1:])
    out += ["", "### Totals", ""]
    out.extend(f"- {line}" for line in total_lines(report))
    return "\n".join(out) + "\n"
