"""Markdown renderer, for pull-request comments and job summaries."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

from mhaudit.data import Report
from mhaudit.render.escape import defuse_lines, markdown, markdown_code
from mhaudit.render.phases import phase_lines, verify_lines
from mhaudit.render.style import PLAIN, RenderOptions
from mhaudit.render.summary import summary_table
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


def render_markdown(report: Report, options: RenderOptions = PLAIN) -> str:
    """The report as GitHub-flavoured markdown."""
    title, how = header_lines(report)
    out = [f"## {markdown(title)}", "", markdown(how), ""]
    if report.groups:
        rows = [[markdown(cell) for cell in row] for row in block_rows(report)]
        out.append(tabulate(rows, headers=BLOCK_HEADERS, tablefmt="github",
                            disable_numparse=True))
        out += ["", "### Parameters", "", "```"]
        for group in report.groups:
            out.extend(markdown_code(line) for line in formula_lines(group))
        out.append("```")
    else:
        out.append("No attention blocks found.")
    targets = target_lines(report)
    if targets:
        out += ["", "### Target", "", markdown(targets[0]), ""]
        out.extend(f"- {markdown(line.strip())}" for line in targets[1:])
    if report.findings:
        out += ["", "### Flags", ""]
        lines = flag_lines(report)
        for finding_line, fix_line in zip(lines[::2], lines[1::2], strict=True):
            code, rest = finding_line.split(" ", 1)
            out.append(f"- **{markdown(code)}** {markdown(rest)}")
            out.append(f"  - {markdown(fix_line.strip())}")
    if report.scaling:
        out += ["", "### Scaling with sequence length", ""]
        out.append(tabulate(scaling_rows(report), headers=SCALING_HEADERS, tablefmt="github",
                            disable_numparse=True))
    if report.measurement is not None:
        out += ["", "### Measured", ""]
        rows = [[markdown(cell) for cell in row] for row in measure_rows(report)]
        out.append(tabulate(rows, headers=MEASURE_HEADERS, tablefmt="github",
                            disable_numparse=True))
    phases = phase_lines(report)
    if phases:
        out += ["", "### Phases", ""]
        out.extend(f"- {line.strip()}" for line in phases[1:])
    checked = verify_lines(report)
    if checked:
        out += ["", "### Verify", ""]
        out.extend(f"- {line.strip()}" for line in checked[1:])
    out += ["", "### Totals", ""]
    out.extend(f"- {markdown(line)}" for line in total_lines(report))
    return defuse_lines("\n".join(out)) + "\n"


def render_markdown_many(reports: Sequence[Report], options: RenderOptions = PLAIN) -> str:
    """A summary table across the models, then each model's section."""
    parts = [f"## mhaudit: {len(reports)} models", "", summary_table(reports, "github"), ""]
    parts += [render_markdown(r, options) for r in reports]
    return "\n".join(parts)
