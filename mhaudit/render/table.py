"""Plain-text table renderer for people (tabulate); also the base of the markdown one."""

from __future__ import annotations

import re
from collections.abc import Sequence

from tabulate import tabulate

from mhaudit import units
from mhaudit.data import BlockGroup, Finding, Report
from mhaudit.render.escape import defuse_lines, plain
from mhaudit.render.phases import phase_lines, verify_lines
from mhaudit.render.style import PLAIN, RenderOptions, paint, wrap
from mhaudit.render.summary import summary_table

BLOCK_HEADERS = (
    "block", "×", "type", "kind", "impl", "d_model", "h", "h_kv", "d_k", "params",
    "4·d²+b", "Δ", "FLOPs", "scores", "KV/token", "flags",
)
CORE_HEADERS = (
    "block", "×", "impl", "h", "h_kv", "d_k", "params", "Δ", "FLOPs", "KV/token", "flags",
)
"""The columns of the default terminal table; ``--wide`` shows all of BLOCK_HEADERS."""


def block_rows(report: Report) -> list[list[str]]:
    """One row per group of identical blocks."""
    rows = []
    for group in report.groups:
        b = group.block
        lay, par = b.layout, b.params
        head = f"{lay.head_dim}" if lay.head_dim == lay.v_head_dim else (
            f"{lay.head_dim}/{lay.v_head_dim}"
        )
        rows.append([
            plain(group.pattern) if group.pattern else "(root)",
            str(group.count),
            plain(lay.module_type),
            lay.kind + (" causal" if lay.causal else ""),
            lay.implementation,
            str(lay.d_model),
            str(lay.num_heads),
            str(lay.num_kv_heads),
            head,
            units.count(par.total),
            units.count(par.textbook),
            units.signed(par.delta),
            units.si(b.flops.total),
            units.nbytes(b.memory.scores_bytes) if b.memory.scores_bytes is not None else "—",
            units.nbytes(b.memory.kv_cache_bytes_per_token),
            ",".join(f.code for f in b.findings) or "—",
        ])
    return rows


def _input(value: object) -> str:
    if isinstance(value, dict) and "shape" in value:
        dims = "×".join(str(d) for d in value["shape"])
        return f"{dims} {value.get('dtype', '')}".rstrip()
    return str(value)


def header_lines(report: Report) -> list[str]:
    """What was audited, how, and at which shape."""
    m = report.model
    inputs = ", ".join(f"{k} {_input(v)}" for k, v in m.inputs.items())
    return [
        plain(f"mhaudit: {m.source} ({m.class_name})"),
        plain(f"traced with {m.trace_method} on {m.device}; costs at {m.dtype}; inputs: {inputs}"),
    ]


def formula_lines(group: BlockGroup) -> list[str]:
    """The parameter check of one group: textbook, actual formula, and each deviation."""
    b = group.block
    par, lay = b.params, b.layout
    label = _group_label(group)
    bias_text = f" + {par.num_biases}·{lay.d_model}" if par.num_biases else ""
    lines = [
        f"{label}: W_Q {units.count(par.q)}, W_K {units.count(par.k)}, "
        f"W_V {units.count(par.v)}, W_O {units.count(par.o)} = {units.count(par.total)}",
        f"  textbook 4·d² = 4·{lay.d_model}²{bias_text} = {units.count(par.textbook)}; "
        f"this layout: {par.formula_text} = {units.count(par.formula)}",
    ]
    if not par.deviations:
        lines.append("  matches the textbook count exactly")
    for dev in par.deviations:
        lines.append(f"  {units.signed(dev.params)}: {plain(dev.reason)}")
    return lines


def target_lines(report: Report) -> list[str]:
    """Kernel and roofline estimate of each group on the target GPU."""
    targets = [(g, g.block.target) for g in report.groups if g.block.target is not None]
    if not targets:
        return []
    first = targets[0][1]
    assert first is not None
    lines = [f"On {first.gpu_name} at {first.dtype} (roofline estimates, one block):"]
    for group, t in targets:
        assert t is not None
        roof = t.roofline
        kernel = t.kernel
        if t.kernel_head_dim is not None and t.kernel_head_dim != group.block.layout.head_dim:
            kernel += f" (runs d_k {t.kernel_head_dim}, {units.percent(t.padding_waste)} padding)"
        intensity = (f" at {roof.arithmetic_intensity:.0f} FLOP/B"
                     if roof.arithmetic_intensity is not None else "")
        lines.append(f"  {_group_label(group)}: {kernel} kernel; {units.seconds(roof.time_s)}, "
                     f"{roof.bound}-bound{intensity}; {units.nbytes(roof.bytes_moved)} moved")
    return lines


def flag_lines(report: Report) -> list[str]:
    """Each finding with its fix; a repeated layer's findings appear once for the group."""
    lines = []
    items: list[tuple[str | None, Finding]] = [
        (_group_label(g), f) for g in report.groups for f in g.block.findings
    ]
    items += [(None, f) for f in report.findings if f.block is None]
    for label, f in items:
        where = f" {label}" if label is not None else ""
        lines.append(plain(f"{f.code} {f.severity.value}{where}: {f.message}"))
        lines.append(plain(f"  fix: {f.fix}"))
    return lines


def _group_label(group: BlockGroup) -> str:
    label = plain(group.pattern) if group.pattern else "(root)"
    return f"{label} (×{group.count})" if group.count > 1 else label


def total_lines(report: Report) -> list[str]:
    """Whole-model figures."""
    t = report.totals
    lines = [
        f"attention blocks: {t.num_blocks}; attention params {units.count(t.attention_params)} "
        f"of {units.count(t.params_total)} ({units.percent(t.attention_params_share)})",
        f"forward FLOPs: {units.si(t.flops)} (attention {units.si(t.attention_flops)}; "
        "2 per multiply-add)",
        f"KV cache per token: {units.nbytes(t.kv_cache_bytes_per_token)}; "
        f"parameters {units.nbytes(t.param_bytes)}",
    ]
    fvcore = report.extras.get("fvcore")
    if isinstance(fvcore, dict):
        lines.append(f"fvcore for comparison: {units.si(fvcore['flops'])} (its MACs × 2; "
                     "it skips softmax, SDPA and elementwise ops)")
    if t.peak_activation_bytes is not None:
        lines.append(f"peak activations (estimate): {units.nbytes(t.peak_activation_bytes)}")
    if t.measured_peak_memory_bytes is not None:
        lines.append(f"measured peak memory: {units.nbytes(t.measured_peak_memory_bytes)}")
    if t.latency_ms is not None:
        lines.append(f"measured forward latency: {t.latency_ms:.3f} ms (median)")
    untraced = report.coverage.untraced_modules
    if untraced:
        shown = ", ".join(plain(m) or "(root)" for m in untraced[:8])
        more = f" and {len(untraced) - 8} more" if len(untraced) > 8 else ""
        lines.append(f"modules the forward did not use (not counted): {shown}{more}")
    missing = report.coverage.ops_without_formula
    if missing:
        listed = ", ".join(f"{k}×{v}" for k, v in sorted(missing.items()))
        lines.append(f"ops without a FLOP formula (not counted): {listed}")
    return lines


SCALING_HEADERS = ("seq len", "attention FLOPs", "scores (if materialised)", "KV cache")


def scaling_rows(report: Report) -> list[list[str]]:
    """One row per projected sequence length."""
    return [
        [str(p.seq_len), units.si(p.attention_flops), units.nbytes(p.scores_bytes),
         units.nbytes(p.kv_cache_bytes)]
        for p in report.scaling
    ]


MEASURE_HEADERS = ("measured", "median", "min", "max", "repeats")


def measure_rows(report: Report) -> list[list[str]]:
    """The forward and each block's measured time."""
    m = report.measurement
    if m is None:
        return []
    items = [("forward", m.forward), *m.blocks.items()]
    return [
        [plain(name), f"{t.median_ms:.3f} ms", f"{t.min_ms:.3f} ms", f"{t.max_ms:.3f} ms",
         str(t.repeats)]
        for name, t in items
    ]


DROP_ORDER = ("Δ", "impl", "×", "KV/token")
"""Core columns given up, in this order, when even wrapped cells do not fit the width."""


def block_table(report: Report, options: RenderOptions = PLAIN) -> str:
    """The block table: every column with ``wide`` (or no width), else the core columns,
    with the block and flags cells wrapped (and the least needed columns dropped) until the
    table fits ``options.width``."""
    rows = block_rows(report)
    if options.wide or options.width is None:
        return tabulate(rows, headers=BLOCK_HEADERS, tablefmt="simple", disable_numparse=True)
    headers = list(CORE_HEADERS)
    text = _fit(rows, headers, options.width)
    for dropped in DROP_ORDER:
        if _width(text) <= options.width:
            break
        headers.remove(dropped)
        text = _fit(rows, headers, options.width)
    return text


def _fit(rows: list[list[str]], headers: list[str], width: int) -> str:
    """The table of ``headers``, the flags then the block cells wrapped to fit ``width``."""
    keep = [BLOCK_HEADERS.index(h) for h in headers]
    picked = [[row[i].replace(",MHA", ", MHA") for i in keep] for row in rows]

    def draw(flags: int | None, block: int | None) -> str:
        cells = [[_break_at_dots(r[0], block), *r[1:]] for r in picked]
        limits: list[int | None] = [*([None] * (len(headers) - 1)), flags]
        return tabulate(cells, headers=headers, tablefmt="simple",
                        disable_numparse=True, maxcolwidths=limits)

    flags = max([5] + [len(r[-1]) for r in picked])
    block = max([5] + [len(r[0]) for r in picked])
    text = draw(None, None)
    while _width(text) > width and flags > 7:  # "MHA002," per line at the least
        flags -= 1
        text = draw(flags, None)
    while _width(text) > width and block > 12:
        block -= 1
        text = draw(flags, block)
    return text


_DOT = re.compile(r"\.(?![^{]*\})")  # a dot that is not inside {0..31}


def _break_at_dots(name: str, limit: int | None) -> str:
    """A dotted module name on lines of at most ``limit``, broken after dots where it can."""
    if limit is None or len(name) <= limit:
        return name
    lines, current = [], ""
    for part in _DOT.sub(".\0", name).split("\0"):
        if current and len(current) + len(part) > limit:
            lines.append(current)
            current = ""
        while len(part) > limit:
            lines.append(part[:limit])
            part = part[limit:]
        current += part
    return "\n".join([*lines, current] if current else lines)


def _width(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def _flag_items(report: Report, options: RenderOptions) -> list[str]:
    lines = []
    for line in flag_lines(report):
        if line.startswith("  fix: "):
            lines.extend(wrap(line, options, hang=5))
            continue
        code, severity, _ = line.split(" ", 2)
        wrapped = wrap(line, options)
        level = next((f.severity for f in report.findings if f.code == code), None)
        head = paint(f"{code} {severity}", level, options)
        wrapped[0] = head + wrapped[0][len(code) + len(severity) + 1:]
        lines.extend(wrapped)
    return lines


def render_table(report: Report, options: RenderOptions = PLAIN) -> str:
    """The report for a terminal, fitted to ``options.width`` unless ``options.wide``."""

    def prose(lines: list[str]) -> list[str]:
        return [part for line in lines for part in wrap(line, options)]

    title, *how = header_lines(report)
    out = [paint(title, None, options), *prose(how), ""]
    if report.groups:
        out.append(block_table(report, options))
        out.append("")
        out.append("Parameters (W_Q, W_K, W_V, W_O with biases):")
        for group in report.groups:
            out.extend(prose(formula_lines(group)))
    else:
        out.append("no attention blocks found")
    out.append("")
    targets = target_lines(report)
    if targets:
        out.extend(prose(targets))
        out.append("")
    if report.findings:
        out.append("Flags:")
        out.extend(_flag_items(report, options))
        out.append("")
    if report.scaling:
        out.append(tabulate(scaling_rows(report), headers=SCALING_HEADERS, tablefmt="simple",
                            disable_numparse=True))
        out.append("")
    if report.measurement is not None:
        out.append(tabulate(measure_rows(report), headers=MEASURE_HEADERS, tablefmt="simple",
                            disable_numparse=True))
        out.append("")
    for section in (phase_lines(report), verify_lines(report)):
        if section:
            out.extend([*prose(section), ""])
    out.extend(prose(total_lines(report)))
    return defuse_lines("\n".join(out)) + "\n"


def render_table_many(reports: Sequence[Report], options: RenderOptions = PLAIN) -> str:
    """A summary table across the models, then each model's table."""
    parts = [f"mhaudit: summary of {len(reports)} models", "", summary_table(reports), ""]
    parts += [render_table(r, options) for r in reports]
    return "\n".join(parts)
