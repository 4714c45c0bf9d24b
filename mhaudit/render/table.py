"""Plain-text table renderer for people (tabulate); also the base of the markdown one."""

from __future__ import annotations

from collections.abc import Sequence

from mhaudit import units
from mhaudit.data import BlockGroup, Finding, Report
from mhaudit.render.escape import defuse_lines, plain
from mhaudit.render.fit import fitted, pick, simple_table
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
            lay.kind + (" causal" if lay.causal else " causal?" if lay.causal is None else ""),
            lay.implementation + ("" if lay.score_form == "softmax" else f" {lay.score_form}"),
            str(lay.d_model),
            str(lay.num_heads),
            str(lay.num_kv_heads),
            head,
            units.count(par.total),
            units.count(par.textbook),
            units.signed(par.delta),
            units.flops(b.flops.total),
            units.nbytes(b.memory.scores_bytes),
            units.nbytes(b.memory.kv_cache_bytes_per_token),
            ",".join(f.code for f in b.findings) or units.NONE,
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
        why = f" ({plain(t.reason)})" if t.kernel in FALLBACK_KERNELS else ""
        intensity = (f" at {roof.arithmetic_intensity:.0f} FLOP/B"
                     if roof.arithmetic_intensity is not None else "")
        lines.append(f"  {_group_label(group)}: {kernel} kernel{why}; "
                     f"{units.seconds(roof.time_s)}, {roof.bound}-bound{intensity}; "
                     f"{units.nbytes(roof.bytes_moved)} moved")
    return lines


FALLBACK_KERNELS = frozenset({"mem_efficient", "math"})
"""Kernels whose line says which of torch's checks ruled out the faster ones."""


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
        f"forward FLOPs: {units.flops(t.flops)} (attention {units.flops(t.attention_flops)}; "
        "2 per multiply-add)",
        f"KV cache per token: {units.nbytes(t.kv_cache_bytes_per_token)}; "
        f"parameters {units.nbytes(t.param_bytes)}",
    ]
    fvcore = report.extras.get("fvcore")
    if isinstance(fvcore, dict):
        lines.append(f"fvcore for comparison: {units.flops(fvcore['flops'])} (its MACs × 2; "
                     "it skips softmax, SDPA and elementwise ops)")
    if t.peak_activation_bytes is not None:
        bound = (", a lower bound: from the graph's tensor lifetimes, the forward could not "
                 "run on fake tensors") if t.peak_activation_is_lower_bound else ""
        lines.append(f"peak activations (estimate{bound}): "
                     f"{units.nbytes(t.peak_activation_bytes)}")
    if t.measured_peak_memory_bytes is not None:
        lines.append(f"measured peak memory: {units.nbytes(t.measured_peak_memory_bytes)}")
    if t.latency_ms is not None:
        lines.append(f"measured forward latency: {t.latency_ms:.3f} ms (median)")
    coverage = report.coverage
    for names, what in (
        (coverage.untraced_towers, "towers the forward did not run (not counted)"),
        (coverage.untraced_modules, "modules the forward did not use (not counted)"),
        (coverage.untraced_attention, "attention the forward never ran (no block, not audited)"),
        (coverage.unread_projections,
         "projections computed but never read (no block made of them)"),
    ):
        if names:
            lines.append(f"{what}: {_named(names)}")
    if coverage.unread_cores:
        ops = sorted({f"{plain(u.module) or '(root)'} {u.op}" for u in coverage.unread_cores})
        lines.append(f"ops that can be attention but are in no block: "
                     f"{len(coverage.unread_cores)} ({', '.join(ops[:6])}"
                     f"{' and more' if len(ops) > 6 else ''}; see coverage.unread_cores)")
    if coverage.inputs_left_out:
        left = [f"{i.name} ({i.why})" for i in coverage.inputs_left_out]
        lines.append(f"inputs left out, the forward did not run on them (their towers not "
                     f"audited): {plain('; '.join(left))}")
    if coverage.declared_mismatch:
        said = [f"{plain(m.module) or '(root)'}.{m.attribute} {m.declared} (detected "
                f"{m.detected})" for m in coverage.declared_mismatch]
        lines.append(f"declared layout the blocks contradict: {len(said)} "
                     f"({', '.join(said[:4])}{' and more' if len(said) > 4 else ''}; "
                     "see coverage.declared_mismatch)")
    missing = report.coverage.ops_without_formula
    if missing:
        listed = ", ".join(f"{k}×{v}" for k, v in sorted(missing.items()))
        lines.append(f"ops without a FLOP formula (not counted): {listed}")
    return lines


def _named(modules: tuple[str, ...], shown: int = 8) -> str:
    """The first ``shown`` module names, "(root)" for the root, and how many more."""
    listed = ", ".join(plain(m) or "(root)" for m in modules[:shown])
    more = f" and {len(modules) - shown} more" if len(modules) > shown else ""
    return listed + more


SCALING_HEADERS = ("seq len", "attention FLOPs", "scores (if materialised)", "KV cache")


def scaling_rows(report: Report) -> list[list[str]]:
    """One row per projected sequence length."""
    return [
        [str(p.seq_len), units.flops(p.attention_flops), units.nbytes(p.scores_bytes),
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


DROP_ORDER = ("Δ", "impl", "×", "KV/token", "d_k", "h_kv")
"""Core columns given up, first to last, when the table does not fit the width; block, h,
params, FLOPs and flags stay. When even they do not fit, each group becomes a record of
``name: value`` lines. A block name is never broken over lines."""


def block_table(report: Report, options: RenderOptions = PLAIN) -> str:
    """The block table: every column with ``wide`` (or no width), else the core columns
    fitted to ``options.width`` as :data:`DROP_ORDER` states."""
    rows = block_rows(report)
    if options.wide or options.width is None:
        return simple_table(rows, BLOCK_HEADERS)
    core = pick(rows, BLOCK_HEADERS, CORE_HEADERS)
    return fitted(core, CORE_HEADERS, DROP_ORDER, options.width)


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

    width = None if options.wide else options.width
    title, *how = header_lines(report)
    out = [*(paint(line, None, options) for line in wrap(title, options)), *prose(how), ""]
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
        out.append(fitted(scaling_rows(report), SCALING_HEADERS, (), width))
        out.append("")
    if report.measurement is not None:
        out.append(fitted(measure_rows(report), MEASURE_HEADERS, (), width))
        out.append("")
    for section in (phase_lines(report), verify_lines(report)):
        if section:
            out.extend([*prose(section), ""])
    out.extend(prose(total_lines(report)))
    return defuse_lines("\n".join(out)) + "\n"


def render_table_many(reports: Sequence[Report], options: RenderOptions = PLAIN) -> str:
    """A summary table across the models, then each model's table."""
    width = None if options.wide else options.width
    parts = [f"mhaudit: summary of {len(reports)} models", "",
             summary_table(reports, width=width), ""]
    parts += [render_table(r, options) for r in reports]
    return "\n".join(parts)
