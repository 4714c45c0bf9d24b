"""One real CPU forward at the audited dtype: the references ``--verify`` reads off it.

MemTracker tracks its live tensors, FlopCounterMode counts its matmuls (the routed
experts' grouped matmuls by the rows the router really sent them), and the KV cache it
returns is measured tensor by tensor. Nothing here reads the report: each figure comes
from what torch ran, at the dtype the report is for, so a wrong assumption of the audit
(a scaled dtype, an expert table, a cache layout) shows as a disagreement.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from mhaudit.fake.live import tensors_in
from mhaudit.verify.real import real_inputs, real_state


@dataclass(frozen=True)
class RealForward:
    """What one real no_grad forward of CPU copies of the model did."""

    activation_bytes: int
    """MemTracker's activation peak (parameters, buffers and inputs tracked apart)."""
    flops: int
    """FlopCounterMode's total, grouped matmuls included."""
    kv_cache_bytes_per_token: float | None
    """Bytes of the returned self-attention KV cache per cached position and sequence;
    None when the forward returned no cache."""
    invented: bool
    """Parameter values were drawn at random (the model was built on meta)."""


def cpu_flash(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any,
              out_shape: Any = None, **kwargs: Any) -> int:
    """torch's own SDPA count (``sdpa_flop_count``) for the CPU flash kernel, which a CPU
    run takes where a GPU runs flash, cuDNN or memory-efficient attention; torch counts
    those three, not its CPU twin."""
    return int(sdpa_flop_count(query_shape, key_shape, value_shape))  # type: ignore[no-untyped-call]


def grouped_mm(a_shape: Any, b_shape: Any, *args: Any, out_shape: Any = None,
               **kwargs: Any) -> int:
    """``aten._grouped_mm``, which FlopCounterMode has no formula for (the routed experts
    of transformers' MoE blocks): every row of ``a`` meets one group's ``(K, N)`` matrix,
    2·K·N FLOPs a row, so 2·numel(a)·N, whatever the offsets (a ``(tokens·k, K)`` input
    against ``(E, K, N)`` experts, a ``(G, M, K)`` batch, or K split by offsets)."""
    rows = 1
    for size in a_shape:
        rows *= int(size)
    return 2 * rows * int(b_shape[-1])


def packed_linear(x_shape: Any, packed: Any, *args: Any, out_shape: Any = None,
                  **kwargs: Any) -> int:
    """A quantized linear on packed weights (``quantized::linear_dynamic``,
    ``quantized::linear``), which FlopCounterMode has no formula for: each output element
    is one row of x times one row of the (out, in) weight, 2·numel(out)·in FLOPs."""
    elements = 1
    for size in out_shape:
        elements *= int(size)
    return 2 * elements * int(x_shape[-1])


FLOP_FORMULAS: dict[Any, Any] = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: cpu_flash,
    torch.ops.aten._grouped_mm: grouped_mm,
    torch.ops.quantized.linear_dynamic: packed_linear,
    torch.ops.quantized.linear: packed_linear,
}
"""Formulas FlopCounterMode is given for the ops a CPU forward runs and it lacks."""


def flop_counter() -> FlopCounterMode:
    """FlopCounterMode with :data:`FLOP_FORMULAS`, able to count an eager flex_attention."""
    _count_eager_flex()
    return FlopCounterMode(display=False, custom_mapping=FLOP_FORMULAS)


def _count_eager_flex() -> None:
    """Give FlopCounterMode's dispatch mode a rule for the flex_attention op and its
    backward, once.

    torch registers their FLOP formulas (the dense SDPA ones) but its counting mode
    answers the ops only inside compiled graphs: an eager call falls through to a path
    that fails. The rule runs the op below the mode and counts it by torch's own formula.
    """
    from torch._higher_order_ops.flex_attention import flex_attention, flex_attention_backward
    from torch.utils.flop_counter import _FlopCounterMode

    for op in (flex_attention, flex_attention_backward):
        if _FlopCounterMode in op.python_key_table:
            continue

        def counted(mode: _FlopCounterMode, *args: Any, op: Any = op) -> Any:
            out = op(*args)
            return mode.counter._count_flops(op, out, args, {})  # type: ignore[no-untyped-call]

        op.py_impl(_FlopCounterMode)(counted)


def cache_of(out: Any) -> Any:
    """The KV cache a transformers forward returned (``past_key_values``, or ``cache``),
    its self-attention part for an encoder-decoder; None when there is none."""
    cache = None
    for name in ("past_key_values", "cache"):
        found = out.get(name) if isinstance(out, Mapping) else getattr(out, name, None)
        cache = cache if found is None else found
    return getattr(cache, "self_attention_cache", cache)


def cache_tensors(out: Any) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """Each cache layer's keys and values, each ``(b, h_kv, n, d_k)``; None without a
    cache of layers."""
    layers = getattr(cache_of(out), "layers", None)
    if layers is None:
        return None
    found = []
    for layer in layers:
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if isinstance(keys, torch.Tensor) and isinstance(values, torch.Tensor):
            found.append((keys, values))
    return found


def cache_bytes_per_token(out: Any) -> float | None:
    """Bytes of each cache layer's keys and values per position and sequence, summed over
    layers (a layer that keeps a window counts per position it keeps)."""
    layers = cache_tensors(out)
    if layers is None:
        return None
    total = 0.0
    for keys, values in layers:
        positions = keys.shape[0] * keys.shape[-2]  # (b, h_kv, n, d_k)
        if positions:
            total += (keys.nbytes + values.nbytes) / positions
    return total


@contextlib.contextmanager
def unfused() -> Iterator[None]:
    """Run torch's own attention modules (``nn.MultiheadAttention``, ``nn.Transformer*``)
    by their pieces, as the audit's record sees them: their fused fast path (eval and
    no_grad) is another computation, and with a padding mask it packs the batch into a
    nested tensor that fake tensors cannot hold."""
    was = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(was)


@contextlib.contextmanager
def _eval(model: nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def real_forward(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                 dtype: torch.dtype) -> RealForward:
    """Run one no_grad forward of CPU copies of ``model`` and its inputs (floats at
    ``dtype``; values drawn for what was built on meta) under MemTracker and
    FlopCounterMode, and measure the KV cache it returns."""
    from mhaudit.verify.step import memory_tracker

    with real_state(model, dtype) as invented, _eval(model):
        r_args, r_kwargs = real_inputs(args, dtype), real_inputs(dict(kwargs), dtype)
        tracker, counter = memory_tracker(), flop_counter()
        tracker.track_external(model, *tensors_in((r_args, r_kwargs)))
        with torch.no_grad(), tracker, counter:
            out = model(*r_args, **r_kwargs)
        per_token = cache_bytes_per_token(out)
        del out
    (peak,) = tracker.get_tracker_snapshot("peak").values()
    activations = next((v for k, v in peak.items() if str(k).endswith("ACT")), 0)
    return RealForward(int(activations), int(counter.get_total_flops()), per_token, invented)
