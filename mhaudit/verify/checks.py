"""The audit's figures checked against torch's counters, each reference by its own road."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from mhaudit.cost.arithmetic import attention_parts
from mhaudit.cost.devices import canonical_dtype
from mhaudit.data import Agreement, Report, Unchecked, Verification
from mhaudit.errors import first_line
from mhaudit.fake.run import fake_forward, run_dtype
from mhaudit.load.packed import packed_weights
from mhaudit.trace.flex import eager_flex
from mhaudit.verify.decode import decode_check
from mhaudit.verify.limits import over_limits
from mhaudit.verify.reference import RealForward, flop_counter, real_forward, unfused

FLOPS_TOLERANCE = 0.0
"""matmul + conv FLOPs are the same arithmetic: they must agree exactly."""
PEAK_TOLERANCE = 0.10
"""The inference peak: allocator-free live bytes in both, within 10% (a fake forward of a
transformers model passes an explicit mask and expands GQA's K/V, a real one need not)."""
KV_TOLERANCE = 0.0
"""KV cache per token: elements per position times the element size in both: exact."""
FORWARD_LIMIT_FLOPS = 2 * 10**11
"""Largest forward the real reference may compute (seconds on a few CPU cores)."""

RAISED = "a real CPU forward at "
"""How the reason starts where the real forward raised."""
PEAK = "inference peak activation bytes"
KV = "kv cache bytes per token"


def verify(report: Report, model: nn.Module, args: tuple[Any, ...],
           kwargs: Mapping[str, Any]) -> Verification:
    """The report's matmul + conv FLOPs, inference peak and KV cache per token beside one
    real CPU forward at the audited dtype (MemTracker, FlopCounterMode, the cache it
    returns) where that fits the size limits; FLOPs beside FlopCounterMode on fake
    tensors otherwise. With a decode step on the report, its bytes per step beside one real
    generation step (:func:`~mhaudit.verify.decode.decode_check`); with a training step,
    its peak against MemTracker on one real CPU step where it fits
    (:func:`~mhaudit.verify.training.training_check`), and its parallel plan's per-GPU
    figures, analytic beside torch's fake process group
    (:func:`~mhaudit.verify.plans.plan_checks`). The layout the model's own modules
    declare (``coverage.declared_mismatch``) must agree with the detected blocks. torch's
    attention modules run by their pieces, as the audit saw them (:func:`unfused`)."""
    with unfused():
        return _verify(report, model, args, kwargs)


def _verify(report: Report, model: nn.Module, args: tuple[Any, ...],
            kwargs: Mapping[str, Any]) -> Verification:
    dtype = run_dtype(canonical_dtype(report.model.dtype))
    real, why = _real(report, model, args, kwargs, dtype)
    flops, mixed = _flops_row(report, model, args, kwargs, dtype, real, why)
    if mixed is not None and why is not None and why.startswith(RAISED):
        why = (f"the model's code mixes float32 with {report.model.dtype} ({why}); rerun "
               "with --dtype float32 to check it")
    rows = [flops]
    unchecked: list[Unchecked] = []
    for figure, row in ((PEAK, _peak_row(report, real)), (KV, _kv_row(report, real))):
        if isinstance(row, Agreement):
            rows.append(row)
        elif row is not None or why is not None:
            unchecked.append(Unchecked(figure, row or why or ""))
    decode = decode_check(report, model, dtype)
    if isinstance(decode, Agreement):
        rows.append(decode)
    elif decode is not None:
        unchecked.append(decode)
    if report.training is not None:
        from mhaudit.verify.plans import plan_checks
        from mhaudit.verify.training import training_check

        layouts = [b.layout for b in report.blocks]
        for step in (training_check(report.training, model, args, kwargs, layouts),
                     *plan_checks(report, model, args, kwargs)):
            if isinstance(step, Agreement):
                rows.append(step)
            else:
                unchecked.append(step)
    return Verification(tuple(rows), tuple(unchecked), report.coverage.declared_mismatch)


def _real(report: Report, model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
          dtype: torch.dtype | None) -> tuple[RealForward | None, str | None]:
    """The real forward at ``dtype``, or why it did not run."""
    if dtype is None:
        return None, f"the CPU computes no matmuls in {report.model.dtype}"
    t = report.totals
    need = t.param_bytes + t.buffer_bytes + (t.peak_activation_bytes or 0)
    reason = over_limits(need, t.flops, FORWARD_LIMIT_FLOPS, "a real CPU forward")
    if reason is not None:
        return None, reason
    try:
        with eager_flex():
            return real_forward(model, args, kwargs, dtype), None
    except Exception as exc:  # the model's code on real CPU tensors at this dtype
        return None, f"{RAISED}{report.model.dtype} raised {first_line(exc, 160)}"


def _flops_row(report: Report, model: nn.Module, args: tuple[Any, ...],
               kwargs: Mapping[str, Any], dtype: torch.dtype | None,
               real: RealForward | None, why: str | None) -> tuple[Agreement, str | None]:
    """The report's matmul + conv FLOPs beside FlopCounterMode's: on fake tensors (at
    float32 where the model's code mixes float32 into the audited dtype, then also how it
    failed at that dtype), on the real forward for routed experts and packed weights."""
    families = report.totals.flops_by_family
    skipped = _skipped_tiles(report)
    ours = families.get("matmul", 0) + families.get("conv", 0) + skipped
    routed = ("; routed experts' grouped matmuls (aten._grouped_mm, which it has no formula "
              "for) at 2·rows·K·N")
    if report.experts and real is not None:
        return Agreement("matmul + conv flops", ours, real.flops, "FlopCounterMode",
                         FLOPS_TOLERANCE, "FlopCounterMode over a real CPU forward at "
                         f"{report.model.dtype}{routed}, by the rows its router really "
                         "sent each expert"), None
    if packed_weights(model):  # fake tensors cannot carry packed objects (no __eq__)
        return Agreement("matmul + conv flops", ours, _own_flops(model, args, kwargs),
                         "FlopCounterMode", FLOPS_TOLERANCE, "FlopCounterMode over a real "
                         "CPU forward at the model's own dtypes: its quantized layers hold "
                         "packed weights, which fake tensors cannot carry and whose kernels "
                         "take float32 inputs (2·numel(out)·in for each packed linear)"), None
    counted, mixed = _flops_at(model, args, kwargs, dtype)
    how = "FlopCounterMode over the forward on fake tensors"
    if mixed is not None:
        how += (f" at float32: the model's code mixes float32 with {report.model.dtype} "
                f"(at {report.model.dtype}: {mixed}); the FLOPs of a matmul or a "
                "convolution depend on its shapes alone")
    if skipped:
        how += (f"; flex_attention over every score tile, as FlopCounterMode counts it (ours "
                f"adds the {skipped:,} FLOPs of the tiles its block masks skip: the blocks' "
                "flops.dense_core)")
    if report.experts:
        how += f"{routed}, as dispatched on fake tensors (no real routed forward: {why})"
    return Agreement("matmul + conv flops", ours, counted, "FlopCounterMode", FLOPS_TOLERANCE,
                     how), mixed


def _own_flops(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> int:
    """FlopCounterMode's total over one real no_grad forward of the model as built."""
    counter = flop_counter()
    with torch.no_grad(), counter:
        model(*args, **kwargs)
    return int(counter.get_total_flops())


def _skipped_tiles(report: Report) -> int:
    """QKᵀ and PV FLOPs of the score tiles flex_attention block masks skip: the dense
    products less the products the graph's flex formula counts over the visited tiles."""
    skipped = 0
    for block in report.blocks:
        lay, fraction = block.layout, block.layout.visited_fraction
        if fraction is None:
            continue
        scores, softmax, context = attention_parts(
            lay.batch_size * lay.num_heads, lay.seq_len_q, lay.seq_len_kv, lay.head_dim,
            lay.v_head_dim)
        visited = round((scores + softmax + context) * fraction) - round(softmax * fraction)
        skipped += scores + context - visited
    return skipped


def _flops_at(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
              dtype: torch.dtype | None) -> tuple[int, str | None]:
    """FlopCounterMode's total at ``dtype`` (:func:`_counted_flops`), and None; or, where
    that forward fails and one at float32 runs (the model's code makes float32 tensors,
    ``torch.zeros`` with no dtype, and mixes them with the audited dtype), the float32
    count and the first failure."""
    try:
        return _counted_flops(model, args, kwargs, dtype), None
    except Exception as exc:  # the model's code on fake tensors at this dtype
        if dtype in (None, torch.float32):
            raise
        try:
            flops = _counted_flops(model, args, kwargs, torch.float32)
        except Exception:  # fails at float32 too: not the dtype, the first failure stands
            raise exc from None
        return flops, first_line(exc, 120)


def _counted_flops(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                   dtype: torch.dtype | None) -> int:
    """FlopCounterMode's total over one no_grad forward of fake CPU copies (floats at
    ``dtype``; None keeps their own)."""
    counter = flop_counter()
    with eager_flex(), torch.no_grad(), fake_forward(model, args, kwargs, dtype) as forward:
        forward(counter)
    return int(counter.get_total_flops())


def _peak_row(report: Report, real: RealForward | None) -> Agreement | str | None:
    """The inference peak beside MemTracker's on the real forward; None where there is
    none to check or no forward ran."""
    ours = report.totals.peak_activation_bytes
    if ours is None or real is None:
        return None
    values = "values drawn at random for the meta-built state" if real.invented else (
        "the model's own values")
    return Agreement(PEAK, ours, real.activation_bytes, "MemTracker", PEAK_TOLERANCE,
                     f"MemTracker's activation peak of one real no_grad CPU forward at "
                     f"{report.model.dtype} ({values}; parameters, buffers and inputs "
                     "tracked apart), upcasts in the model's code included")


def _kv_row(report: Report, real: RealForward | None) -> Agreement | str | None:
    """KV cache per token beside the cache the real forward returned; a reason where the
    report has a cache that cannot be checked; None where there is nothing to check."""
    ours = report.totals.kv_cache_bytes_per_token
    if any(b.layout.latent_width is not None for b in report.blocks):
        return ("transformers caches latent attention's expanded K and V; the report counts "
                "the latent, as its decode kernels cache it")
    if real is None:
        return None
    if real.kv_cache_bytes_per_token is None:
        return (None if not ours else "the forward returned no KV cache (past_key_values) "
                "to measure")
    return Agreement(KV, ours, round(real.kv_cache_bytes_per_token), "DynamicCache",
                     KV_TOLERANCE, "the keys and values of the cache a real CPU forward at "
                     f"{report.model.dtype} returned (past_key_values; the self-attention "
                     "cache of an encoder-decoder), bytes per position and sequence summed "
                     "over layers")
