"""The decode and training columns of a what-if row: one block layout in each phase.

The decode step of a layout is its share of a generation step at the spec's key
length. Its training column is what its forward keeps for the backward in
score-shaped tensors, read from a fake-tensor forward of the layout (eager
``softmax(QKᵀ)·V`` or SDPA, as the spec says), never from a formula.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from mhaudit.cost.block import block_memory, roofline
from mhaudit.cost.decode import core_flops, effective_context, projection_flops
from mhaudit.cost.devices import GpuProfile, canonical_dtype, dtype_bytes
from mhaudit.cost.latent import absorbed_core_flops
from mhaudit.cost.livemem import LiveStorages
from mhaudit.data import Layout


@dataclass(frozen=True)
class PhaseColumns:
    """One layout's decode step and training scores."""

    decode_step_s: float
    """Roofline time of the block's share of one decode step at n_kv cached tokens."""
    decode_kv_read_bytes: int
    """Cached K/V bytes the step reads (window-capped)."""
    train_scores_saved_bytes: int | None
    """Score-shaped bytes the forward keeps alive for the backward."""


def _weights(layout: Layout) -> int:
    return sum(p.params for p in (layout.q, layout.k, layout.v, layout.o) if p is not None)


MAX_FAKE_NUMEL = 2**62
"""Largest tensor a fake forward can describe (torch's storage sizes are 64-bit)."""


def saved_scores_bytes(layout: Layout, dtype: str) -> int | None:
    """Score-shaped bytes a fake forward of ``layout`` keeps for the backward; None when a
    tensor of the layout is too large for torch to describe at all."""
    b, n_q, n_kv = layout.batch_size, layout.seq_len_q, layout.seq_len_kv
    d, h, h_kv, d_k = layout.d_model, layout.num_heads, layout.num_kv_heads, layout.head_dim
    widest = max(d, h * max(d_k, layout.v_head_dim))
    if max(b * h * n_q * n_kv, widest * d, b * max(n_q, n_kv) * widest) > MAX_FAKE_NUMEL:
        return None
    d_v, tdtype = layout.v_head_dim, getattr(torch, canonical_dtype(dtype))
    tracker = LiveStorages()
    with FakeTensorMode():
        def leaf(*shape: int) -> torch.Tensor:
            return torch.empty(*shape, dtype=tdtype).requires_grad_()

        x, mem = leaf(b, n_q, d), leaf(b, n_kv, d)
        w_q, w_k, w_v, w_o = leaf(h * d_k, d), leaf(h_kv * d_k, d), leaf(h_kv * d_v, d), \
            leaf(d, h * d_v)
        tracker.known([x, mem, w_q, w_k, w_v, w_o])

        def forward() -> torch.Tensor:
            q = F.linear(x, w_q).view(b, n_q, h, d_k).transpose(1, 2)  # (b, h, n_q, d_k)
            k = F.linear(mem, w_k).view(b, n_kv, h_kv, d_k).transpose(1, 2)  # (b, h_kv, n_kv, d_k)
            v = F.linear(mem, w_v).view(b, n_kv, h_kv, d_v).transpose(1, 2)  # (b, h_kv, n_kv, d_v)
            k, v = k.repeat_interleave(h // h_kv, 1), v.repeat_interleave(h // h_kv, 1)
            causal = bool(layout.causal) and layout.kind == "self"
            if layout.implementation == "eager":
                scores = q @ k.transpose(-2, -1) * d_k**-0.5  # (b, h, n_q, n_kv)
                if causal:
                    mask = torch.ones(n_q, n_kv, dtype=torch.bool).triu(1)
                    scores = scores.masked_fill(mask, float("-inf"))
                out = scores.softmax(-1) @ v  # (b, h, n_q, d_v)
            else:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            merged = out.transpose(1, 2).reshape(b, n_q, h * d_v)  # (b, n_q, h·d_v)
            return F.linear(merged, w_o)  # (b, n_q, d)

        with tracker:
            result = forward()  # its locals are gone: what is alive is kept for the backward
            end = tracker.log.ticks
        del result
    score_numel = b * h * n_q * n_kv
    return sum(
        rec.nbytes for rec in tracker.log.records
        if (rec.freed is None or rec.freed >= end) and len(rec.shape) >= 2
        and tuple(rec.shape[-2:]) == (n_q, n_kv) and _numel(rec.shape) == score_numel
    )


def _numel(shape: tuple[int, ...]) -> int:
    total = 1
    for s in shape:
        total *= s
    return total


def phase_columns(layout: Layout, dtype: str, profile: GpuProfile) -> PhaseColumns:
    """Decode-step time and KV reads at n_kv cached tokens, and the saved-scores bytes."""
    e = dtype_bytes(dtype)
    memory = block_memory(layout, e, materializes_scores=False)
    b = layout.batch_size
    if layout.kind == "self":
        keys = effective_context(layout, layout.seq_len_kv)
        per_token = memory.kv_cache_bytes_per_token
        read, write = b * keys * per_token, b * per_token
    else:
        keys, read, write = layout.seq_len_kv, memory.kv_cache_bytes, 0
    absorbed = absorbed_core_flops(layout, b, keys)  # latent attention as decode runs it
    core = core_flops(layout, b, keys) if absorbed is None else absorbed
    flops = projection_flops(layout, b) + core
    step = roofline(flops, _weights(layout) * e + read + write, profile)
    return PhaseColumns(step.time_s, read, saved_scores_bytes(layout, dtype))
