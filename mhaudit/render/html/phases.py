"""The Phases and Parallel sections of the HTML page: training step, decode step, and each
under its parallel plan, per device."""

from __future__ import annotations

from mhaudit import units
from mhaudit.data import DecodeCost, ParallelCost, Report, TrainingCost
from mhaudit.render.escape import html as escape
from mhaudit.render.html.phase_curves import decode_context_block, timeline_caption, timeline_chart
from mhaudit.render.html.svg import PALETTE, bar_chart, stacked_bar_chart
from mhaudit.render.phases import phase_lines

WIDTH = 720


def _figure(svg: str, caption: str, cls: str = "") -> str:
    tag = f'<figure class="{cls}">' if cls else "<figure>"
    return f'{tag}{svg}<figcaption>{escape(caption)}</figcaption></figure>'


def _kv_table(rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return f'<div class="scroll"><table class="facts"><tbody>{body}</tbody></table></div>'


def _training_parts(t: TrainingCost) -> list[tuple[str, float]]:
    b = t.breakdown
    parts = [("params", b.params), ("grads", b.grads), ("optimizer states", b.optimizer_states),
             ("activations", b.activations), ("temporaries", b.temporaries)]
    if b.buffers:
        parts.append(("buffers", b.buffers))
    return [(name, float(value)) for name, value in parts]


def training_figure(t: TrainingCost) -> str:
    """The training peak as one stacked bar of what is alive at it."""
    svg = stacked_bar_chart(f"Training step: peak {units.nbytes(t.peak_bytes)} in the "
                            f"{t.peak_phase}", [("alive at the peak", _training_parts(t))],
                            "bytes alive at the peak", units.nbytes, width=WIDTH)
    fits = (f"fits in {units.nbytes(t.memory_bytes)}, up to batch {t.max_batch_size:,}"
            if t.fits else f"does not fit in {units.nbytes(t.memory_bytes)}")
    return _figure(svg, f"{t.optimizer}, {t.precision}, checkpointing {t.checkpointing}; "
                        f"{units.si(t.flops, 'FLOP')} per step; {fits}. Temporaries: tensors "
                        "made in the backward or the optimizer step (gradients of activations).")


def decode_figure(d: DecodeCost) -> str:
    """The bytes one decode step reads and writes, stacked, with its time."""
    if not d.applicable:
        return ('<p class="note">Decode step: not applicable: no block keeps K/V that grows '
                "with generated tokens (an encoder).</p>")
    parts = [("weights read", float(d.weight_bytes)), ("KV cache read", float(d.kv_read_bytes)),
             ("KV cache written", float(d.kv_write_bytes))]
    svg = stacked_bar_chart(
        f"Decode step at context {d.context:,}: {units.nbytes(d.bytes_per_step)} per step",
        [(f"batch {d.batch_size:,}", parts)], "bytes moved per step", units.nbytes,
        width=WIDTH)
    return _figure(svg, f"{units.seconds(d.time_per_step_s)} per step ({d.bound}-bound), "
                        f"{d.tokens_per_s:,.0f} tokens/s, {units.si(d.flops_per_step, 'FLOP')} "
                        f"per step; KV cache held {units.nbytes(d.kv_cache_bytes)}. Each step "
                        "reads every weight once and the cache at the context.")


def phases_section(report: Report, h2: str, anchor: str) -> list[str]:
    """The Phases section: the phase lines of the table, then one figure per phase."""
    lines = phase_lines(report)
    if not lines:
        return []
    out = [f'<{h2} id="{anchor}-phases">Phases</{h2}>',
           '<ul class="phases">' + "".join(f"<li>{escape(line.strip())}</li>"
                                          for line in lines[1:]) + "</ul>"]
    figures = []
    if report.training is not None:
        figures.append(training_figure(report.training))
        timeline = timeline_chart(report.training)
        if timeline is not None:
            figures.append(_figure(timeline, timeline_caption(report.training), "wide"))
    if report.decode is not None:
        figures.append(decode_figure(report.decode))
    out.append('<div class="charts">' + "\n".join(figures) + "</div>")
    if report.decode is not None and report.decode.applicable:
        out.append(decode_context_block(report.decode))
    return out


def _device_parts(cost: ParallelCost) -> list[tuple[str, float]]:
    b = cost.per_device_bytes
    parts = [("params", b.params), ("grads", b.grads), ("optimizer states", b.optimizer_states),
             ("activations", b.activations), ("KV cache", b.kv_cache),
             ("temporaries", b.temporaries), ("NCCL buffers", b.nccl_buffers),
             ("workspace", b.workspace), ("CUDA context", b.cuda_context),
             ("fragmentation", b.fragmentation)]
    return [(name, float(value)) for name, value in parts if value]


COLLECTIVES = (("all-gather", "all_gather"), ("reduce-scatter", "reduce_scatter"),
               ("all-reduce", "all_reduce"), ("all-to-all", "all_to_all"),
               ("send/recv", "send_recv"))


def parallel_figures(name: str, cost: ParallelCost) -> str:
    """One phase under its plan: per-device bytes, bytes sent by collective, the facts."""
    plan = cost.plan
    devices = stacked_bar_chart(f"{name}: bytes per device, {plan.text()}",
                                [("each device", _device_parts(cost))],
                                "bytes per device", units.nbytes, width=WIDTH)
    comm = [(label, float(getattr(cost.comm_bytes_per_step, key)),
             f"{units.nbytes(getattr(cost.comm_bytes_per_step, key))} in "
             f"{getattr(cost.comm_calls_per_step, key):,} calls")
            for label, key in COLLECTIVES]
    sent = bar_chart(f"{name}: bytes each device sends per step", comm,
                     "bytes sent per step", units.nbytes, color=PALETTE[5], width=WIDTH,
                     binary=True)
    batch = "—" if cost.max_batch_size is None else f"{cost.max_batch_size:,}"
    facts = _kv_table([
        ("plan", f"{plan.text()} on {plan.world_size:,} GPUs"),
        ("peak per device", units.nbytes(cost.per_device_bytes.peak)),
        ("of which tensors", units.nbytes(cost.per_device_bytes.tensors)),
        ("step time", units.seconds(cost.step_time_s)),
        *_step_rows(cost),
        ("MFU", "—" if cost.mfu is None else units.percent(cost.mfu)),
        ("fits", "yes" if cost.fits else "no"),
        ("max batch per replica", batch),
        ("source", cost.source),
    ])
    pipe = pipeline_figure(name, cost)
    notes = "".join(f"<li>{escape(n)}</li>" for n in (
        *cost.notes, *(f"{t.name}: {units.nbytes(t.bytes)} ({t.source})"
                       for t in cost.memory_terms)))
    return (f'<div class="charts">{_figure(devices, "What one device holds at its peak.")}'
            f'{_figure(sent, "Ring algorithms: what each rank sends, by collective.")}{pipe}'
            f"<div>{facts}<ul class=\"notes\">{notes}</ul></div></div>")


def _step_rows(cost: ParallelCost) -> list[tuple[str, str]]:
    """The step time's parts: the compute, and each group's traffic on its link."""
    parts = cost.step_parts
    if parts is None:
        return []
    rows = [("of which compute", units.seconds(parts.compute_s))]
    for g in parts.groups:
        how = (f"overlapped, {units.seconds(g.exposed_s)} exposed" if g.overlapped
               else "exposed")
        rows.append((f"{g.group} traffic", f"{units.nbytes(g.bytes)} on {g.link}, "
                     f"{units.seconds(g.seconds)} ({how})"))
    return rows


def _units(value: float) -> str:
    return f"{value:g}"


def pipeline_figure(name: str, cost: ParallelCost) -> str:
    """The pipeline schedule as each rank runs it: forwards, backwards and the bubble, in
    units of one micro-batch's forward through a stage; empty without a drawn schedule."""
    pipe = cost.pipeline
    if pipe is None or not pipe.timeline:
        return ""
    rows = [(f"rank {r}", list(segments)) for r, segments in enumerate(pipe.timeline)]
    chart = stacked_bar_chart(
        f"{name}: {pipe.schedule}, {pipe.microbatches} micro-batches on {len(rows)} ranks",
        rows, "time (one micro-batch's forward through a stage = 1)", _units, width=WIDTH,
        binary=False)
    return _figure(chart, f"The schedule's bubble: {units.percent(pipe.bubble_fraction)} of "
                   "the step idle on every rank (a backward takes twice a forward).")


def parallel_section(report: Report, h2: str, anchor: str) -> list[str]:
    """The Parallel section, when a phase ran with a plan."""
    phases = [(name, cost) for name, cost in (
        ("training step", report.training.parallel if report.training else None),
        ("decode step", report.decode.parallel if report.decode else None)) if cost is not None]
    if not phases:
        return []
    out = [f'<{h2} id="{anchor}-parallel">Parallel</{h2}>']
    out += [parallel_figures(name, cost) for name, cost in phases]
    return out
