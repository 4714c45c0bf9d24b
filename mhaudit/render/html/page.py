"""One self-contained HTML page: the tables, a roofline, memory, per-block costs, phases,
parallel plans and what-if sweeps.

Inline SVG only: no network, no JavaScript. Every figure comes from the report (or the
what-if sweeps the CLI passes in); nothing is computed here beyond placing points.
"""

from __future__ import annotations

from collections.abc import Sequence

from mhaudit.data import Report
from mhaudit.render.escape import html as escape
from mhaudit.render.html.charts import memory_chart, per_block_charts, roofline_chart, scores_table
from mhaudit.render.html.phases import parallel_section, phases_section
from mhaudit.render.html.whatif import whatif_block
from mhaudit.render.style import PLAIN, RenderOptions
from mhaudit.render.summary import SUMMARY_HEADERS, summary_rows
from mhaudit.render.table import (
    BLOCK_HEADERS,
    block_rows,
    flag_lines,
    formula_lines,
    header_lines,
    target_lines,
    total_lines,
)

CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 24px auto;
       max-width: 1560px; color: #222; background: #fff; padding: 0 24px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 28px;
     border-bottom: 1px solid #ddd; padding-bottom: 4px; } h3 { font-size: 16px; }
p.how { color: #555; margin-top: 0; } p.note, figcaption { color: #555; font-size: 13px; }
nav.toc { font-size: 14px; margin: 4px 0 12px; } nav.toc a { margin-right: 14px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; white-space: normal; min-width: 4em; vertical-align: bottom; }
td:first-child, th:first-child { text-align: left; }
table.facts th { text-align: left; } tr.current td { background: #fff4d6; font-weight: bold; }
.scroll { overflow-x: auto; max-width: 100%; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(480px, 1fr));
          gap: 16px; align-items: start; grid-auto-flow: row dense; }
.charts svg { border: 1px solid #e6e6e6; border-radius: 4px; background: #fff;
              width: 100%; height: auto; max-width: 760px; }
figure { margin: 0; }
.charts figure.wide { grid-column: 1 / -1; } .charts figure.wide svg { max-width: none; }
.whatif-pair { display: grid; grid-template-columns: minmax(0, max-content) minmax(320px, 1fr);
               gap: 16px; align-items: start; }
.whatif-pair .charts { grid-template-columns: repeat(auto-fit, minmax(320px, 1fr)); }
@media (max-width: 1100px) { .whatif-pair { grid-template-columns: 1fr; } }
.whatif-pair > div:first-child { overflow-x: auto; }
dl.units { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px;
           font-size: 13px; } dl.units dt { font-weight: bold; } dl.units dd { margin: 0; }
ul.flags { list-style: none; padding-left: 0; font-size: 14px; }
ul.flags li { margin: 6px 0; padding: 6px 10px; border-left: 4px solid #999; background: #fafafa; }
li.error { border-color: #c62828 !important; } li.warning { border-color: #ef8f00 !important; }
li.info { border-color: #1f77b4 !important; } .code { font-weight: bold; font-family: monospace; }
.fix { color: #444; display: block; margin-top: 2px; }
pre { background: #f7f7f7; padding: 8px; font-size: 12px; overflow-x: auto; }
"""

UNITS = (
    ("FLOP", "floating-point operations, 2 per multiply-add (a matmul of m×k by k×n is "
             "2·m·k·n FLOP); FLOP/s per second."),
    ("HBM bytes moved", "bytes a block's kernels read from and write to the GPU's device "
                        "memory (HBM) in one forward: weights, inputs, Q/K/V, outputs, and "
                        "the score matrix when the kernel materialises it; no cache reuse "
                        "between kernels."),
    ("arithmetic intensity", "FLOP per byte moved; below the ridge a block is memory-bound."),
    ("roofline time", "max(FLOP / peak throughput, bytes moved / memory bandwidth) on the "
                      "target: a lower bound on the real time."),
    ("KV cache", "the K and V (or latent) tensors a decoder keeps for every cached token."),
    ("peak", "the most bytes alive at one moment; its parts are alive together."),
    ("KiB, MiB, GiB", "2¹⁰, 2²⁰, 2³⁰ bytes; k, M, G, T are 10³, 10⁶, 10⁹, 10¹²."),
)


def html_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
               links: Sequence[str] = ()) -> str:
    """A table; with ``links``, each row's first cell links to that anchor."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cells = [f"<td>{escape(c)}</td>" for c in row]
        if i < len(links) and cells:
            cells[0] = f'<td><a href="#{links[i]}">{escape(row[0])}</a></td>'
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def _flags_html(report: Report) -> str:
    items = []
    lines = flag_lines(report)
    severities = [f.severity for g in report.groups for f in g.block.findings]
    severities += [f.severity for f in report.findings if f.block is None]
    for (finding, fix), severity in zip(zip(lines[::2], lines[1::2], strict=True), severities,
                                        strict=True):
        code, rest = finding.split(" ", 1)
        items.append(f'<li class="{severity.value}"><span class="code">{escape(code)}</span> '
                     f'{escape(rest)}<span class="fix">{escape(fix.strip())}</span></li>')
    return '<ul class="flags">' + "".join(items) + "</ul>"


def _units_html() -> str:
    return '<dl class="units">' + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>"
                                          for k, v in UNITS) + "</dl>"


def _costs(report: Report, h2: str, anchor: str) -> list[str]:
    charts = [c for c in (roofline_chart(report), memory_chart(report)) if c]
    charts += per_block_charts(report) if report.groups else []
    out = [f'<{h2} id="{anchor}-costs">Costs</{h2}>',
           '<div class="charts">' + "\n".join(charts) + "</div>"]
    if report.groups:
        out.append(scores_table(report))
    return out


def _whatif(report: Report, options: RenderOptions, h2: str, anchor: str) -> list[str]:
    flagged = {f.block for f in report.findings}
    out = []
    for i, sweep in enumerate(s for s in options.sweeps if s.spec.name in flagged):
        label = sweep.spec.name or "(root)"
        out += [f'<{h2} id="{anchor}-whatif-{i}">What if: the head layout of '
                f"{escape(label)}</{h2}>", whatif_block(sweep)]
    return out


def _toc(anchor: str, body: Sequence[str]) -> str:
    names = [("findings", "Findings"), ("costs", "Costs"), ("phases", "Phases"),
             ("parallel", "Parallel"), ("whatif-0", "What if"), ("details", "Parameters"),
             ("units", "Units")]
    text = "\n".join(body)
    links = [f'<a href="#{anchor}-{key}">{label}</a>' for key, label in names
             if f'id="{anchor}-{key}"' in text]
    return '<nav class="toc">' + "".join(links) + "</nav>"


def report_section(report: Report, options: RenderOptions, level: int = 1,
                   anchor: str = "report") -> str:
    """Everything about one report, its sections anchored under ``anchor``."""
    title, *how = header_lines(report)
    h, h2 = f"h{level}", f"h{level + 1}"
    body = [html_table(BLOCK_HEADERS, block_rows(report)) if report.groups
            else "<p>No attention blocks found.</p>"]
    if report.findings:
        body += [f'<{h2} id="{anchor}-findings">Findings</{h2}>', _flags_html(report)]
    body += _costs(report, h2, anchor)
    body += phases_section(report, h2, anchor)
    body += parallel_section(report, h2, anchor)
    body += _whatif(report, options, h2, anchor)
    details = [line for g in report.groups for line in formula_lines(g)]
    body += [f'<{h2} id="{anchor}-details">Parameters and target</{h2}>',
             "<pre>" + escape("\n".join([*details, "", *target_lines(report)])) + "</pre>",
             f"<{h2}>Totals</{h2}>",
             "<ul>" + "".join(f"<li>{escape(line)}</li>" for line in total_lines(report))
             + "</ul>",
             f'<{h2} id="{anchor}-units">Units and definitions</{h2}>', _units_html()]
    head = [f'<{h} id="{anchor}">{escape(title)}</{h}>',
            f'<p class="how">{escape(" ".join(how))}</p>']
    return "\n".join([*head, _toc(anchor, body), *body])


def page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n"
            "</body></html>\n")


def render_html(report: Report, options: RenderOptions = PLAIN) -> str:
    """One report as a self-contained HTML page."""
    return page(f"mhaudit: {report.model.source}", report_section(report, options))


def render_html_many(reports: Sequence[Report], options: RenderOptions = PLAIN) -> str:
    """Several reports on one page, a summary across models first, each row linked to its
    model's section."""
    anchors = [f"model-{i + 1}" for i in range(len(reports))]
    parts = [f"<h1>mhaudit: {len(reports)} models</h1>",
             html_table(SUMMARY_HEADERS, summary_rows(reports), anchors)]
    parts += [f"<section>{report_section(r, options, level=2, anchor=a)}</section>"
              for r, a in zip(reports, anchors, strict=True)]
    return page(f"mhaudit: {len(reports)} models", "\n".join(parts))
