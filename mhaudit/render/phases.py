"""One summary line per phase: prefill forward, decode step, training step."""

from __future__ import annotations

from mhaudit import units
from mhaudit.data import DecodeCost, ParallelCost, Report


def _prefill(report: Report) -> str:
    t = report.totals
    at_least = "at least " if t.peak_activation_is_lower_bound else ""
    peak = (f", peak activations {at_least}{units.nbytes(t.peak_activation_bytes)}"
            if t.peak_activation_bytes is not None else "")
    shape = ""
    if report.blocks:
        lay = report.blocks[0].layout
        shape = f"{lay.batch_size}×{lay.seq_len_q} tokens, "
    return (f"  prefill forward: {shape}{units.flops(t.flops)} (attention "
            f"{units.flops(t.attention_flops)}){peak}")


def _decode(report: Report) -> str | None:
    d = report.decode
    if d is None:
        return None
    if not d.applicable:
        return ("  decode step: not applicable: no block keeps K/V that grows with generated "
                "tokens (an encoder)")
    return (f"  decode step: {d.batch_size} × 1 token at context {d.context:,}, "
            f"{units.flops(d.flops_per_step)}, {units.nbytes(d.bytes_per_step)} read "
            f"(KV cache {units.nbytes(d.kv_read_bytes)}), {units.seconds(d.time_per_step_s)} "
            f"{d.bound}-bound, {d.tokens_per_s:,.0f} tokens/s; {_decode_fit(report)}"
            + _prefill_only(d))


def _prefill_only(d: DecodeCost) -> str:
    """What ran once, in prefill (an encoder, a tower), when not the whole model steps."""
    if not d.prefill_only_flops and not d.prefill_only_weight_bytes:
        return ""
    return (f"; once in prefill, not per step: {units.flops(d.prefill_only_flops)}, "
            f"weights {units.nbytes(d.prefill_only_weight_bytes)}")


def _decode_fit(report: Report) -> str:
    """What fits in memory, naming what does not: the weights alone, or the KV cache
    beside them."""
    d = report.decode
    assert d is not None
    weights, cache, memory = (units.nbytes(d.param_bytes), units.nbytes(d.kv_cache_bytes),
                              units.nbytes(d.memory_bytes))
    if d.param_bytes > d.memory_bytes:
        return (f"the weights ({weights}) alone do not fit in {memory}, before the KV "
                f"cache ({cache})")
    fits = "fits" if d.fits else "does not fit"
    return f"KV cache {cache} {fits} beside the weights ({weights}) in {memory}"


def _training(report: Report) -> str | None:
    t = report.training
    if t is None:
        return None
    b = t.breakdown
    saved = sum(r.saved_bytes for r in t.blocks)
    scores = sum(r.scores_saved_bytes for r in t.blocks)
    fits = (f"fits in {units.nbytes(t.memory_bytes)}, up to batch {t.max_batch_size:,}"
            if t.fits else f"does not fit in {units.nbytes(t.memory_bytes)}"
            + (f" (batch {t.max_batch_size:,} would)" if t.max_batch_size else ""))
    kernel = f", attention on {t.attention_kernel}" if t.attention_kernel else ""
    if t.attention_kernel in ("mem_efficient", "math") and t.attention_kernel_reason:
        kernel += f" ({t.attention_kernel_reason})"
    rung = {"real-cpu": ", run for real on a CPU build",
            "fake-bounded": ", data-dependent sizes at their upper bound (peak and FLOPs are "
                            "upper bounds)"}.get(t.rung, "")
    return (f"  training step ({t.optimizer}, {t.precision}, checkpointing {t.checkpointing}"
            f"{kernel}, loss: {t.loss}{rung}): peak {units.nbytes(t.peak_bytes)} in the "
            f"{t.peak_phase} "
            f"(params {units.nbytes(b.params)}, grads {units.nbytes(b.grads)}, optimizer "
            f"states {units.nbytes(b.optimizer_states)}, activations "
            f"{units.nbytes(b.activations)}, temporaries {units.nbytes(b.temporaries)}); "
            f"{units.flops(t.flops)}; attention keeps {units.nbytes(saved)} for the backward "
            f"(scores {units.nbytes(scores)}); {fits}")


def _parallel(name: str, cost: ParallelCost | None) -> str | None:
    if cost is None:
        return None
    b, c, plan = cost.per_device_bytes, cost.comm_bytes_per_step, cost.plan
    sent = {"all-gather": c.all_gather, "reduce-scatter": c.reduce_scatter,
            "all-reduce": c.all_reduce, "all-to-all": c.all_to_all, "send/recv": c.send_recv}
    comm = ", ".join(f"{k} {units.nbytes(v)}" for k, v in sent.items() if v) or "none"
    fits = "fits" if cost.fits else "does not fit"
    batch = (f", up to batch {cost.max_batch_size:,} per rank"
             if cost.fits and cost.max_batch_size else "")
    beyond = ", ".join(f"{t.name.replace('_', ' ')} {units.nbytes(t.bytes)}"
                       for t in cost.memory_terms)
    mfu = f", MFU {units.percent(cost.mfu)}" if cost.mfu is not None else ""
    return (f"  {name} per device, {plan.text()} ({plan.world_size:,} GPUs, {cost.source}): "
            f"{_axes(cost)}"
            f"peak {units.nbytes(b.peak)}: tensors {units.nbytes(b.tensors)} (params "
            f"{units.nbytes(b.params)}, grads {units.nbytes(b.grads)}, optimizer states "
            f"{units.nbytes(b.optimizer_states)}, activations {units.nbytes(b.activations)}, "
            f"KV cache {units.nbytes(b.kv_cache)}, temporaries {units.nbytes(b.temporaries)})"
            + (f" + beyond tensors ({beyond})" if beyond else "")
            + f"; sends {comm} per step; {units.seconds(cost.step_time_s)} per step{mfu}; "
            f"{fits}{batch}")


def _axes(cost: ParallelCost) -> str:
    """The expert- and context-parallel clause: experts per rank and their all-to-all
    bytes, the ring's K/V bytes; empty where neither axis is above 1."""
    parts = []
    x, ring = cost.experts, cost.context
    if x is not None:
        parts.append(f"{x.experts_per_rank:,} of {x.num_experts:,} experts per rank"
                     f"{' (uneven)' if x.uneven else ''}, all-to-all "
                     f"{units.nbytes(x.all_to_all_bytes)}")
    if ring is not None:
        parts.append(f"ring K/V {units.nbytes(ring.kv_exchange_bytes)} over cp={ring.cp}")
    return "; ".join(parts) + "; " if parts else ""


def verify_lines(report: Report) -> list[str]:
    """The ``--verify`` section: each figure beside torch's counter, and the verdict."""
    v = report.verification
    if v is None:
        return []
    lines = ["Verify (against torch's counters on this model):"]
    for r in v.rows:
        bound = "exact" if r.tolerance == 0 else f"within {units.percent(r.tolerance)}"
        mark = "agrees" if r.agrees else "DISAGREES"
        lines.append(f"  {r.figure}: {r.ours:,} vs {r.counter} {r.reference:,} "
                     f"({units.percent(r.difference)}, {bound}): {mark}")
    lines.extend(f"  {u.figure}: not checked ({u.reason})" for u in v.unchecked)
    declared = len(v.declared_mismatch)
    lines.append(f"  declared layout (the modules' own head counts and widths): "
                 f"{f'{declared} attribute(s) DISAGREE' if declared else 'agrees'}"
                 f"{' (coverage.declared_mismatch)' if declared else ''}")
    return lines


def phase_lines(report: Report) -> list[str]:
    """The phases section, when a decode or training step was costed."""
    lines = [line for line in (
        _decode(report),
        _parallel("decode step", report.decode.parallel if report.decode else None),
        _training(report),
        _parallel("training step", report.training.parallel if report.training else None),
    ) if line is not None]
    if not lines:
        return []
    return ["Phases:", _prefill(report), *lines]
