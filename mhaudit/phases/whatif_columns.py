"""The decode and training columns of a what-if row: one block layout in each phase.

The decode step of a layout is its share of a generation step at the spec's key
length (:func:`~mhaudit.phases.decode.block_step`, the builder the report's decode
step uses). Its training column is what its forward keeps for the backward in
score-shaped tensors, read from a fake-tensor forward of the reference block
(eager ``softmax(QKᵀ)·V`` or SDPA, as the spec says), never from a formula.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mhaudit.cost.block import block_memory
from mhaudit.cost.devices import GpuProfile, canonical_dtype, dtype_bytes
from mhaudit.data import Layout
from mhaudit.fake.live import MAX_FAKE_NUMEL, LiveStorages, is_scores_of
from mhaudit.fake.mode import FakeMode
from mhaudit.measure.reference import reference_block
from mhaudit.phases.decode import block_step


@dataclass(frozen=True)
class PhaseColumns:
    """One layout's decode step and training scores."""

    decode_step_s: float
    """Roofline time of the block's share of one decode step at n_kv cached tokens."""
    decode_kv_read_bytes: int
    """Cached K/V bytes the step reads (window-capped)."""
    train_scores_saved_bytes: int | None
    """Score-shaped bytes the forward keeps alive for the backward."""


def saved_scores_bytes(layout: Layout, dtype: str) -> int | None:
    """Score-shaped bytes a fake forward of ``layout`` keeps for the backward; None when a
    tensor of the layout is too large for torch to describe at all."""
    b, n_q, n_kv = layout.batch_size, layout.seq_len_q, layout.seq_len_kv
    d, h, d_k = layout.d_model, layout.num_heads, layout.head_dim
    widest = max(d, h * max(d_k, layout.v_head_dim))
    if max(b * h * n_q * n_kv, widest * d, b * max(n_q, n_kv) * widest) > MAX_FAKE_NUMEL:
        return None
    tdtype = getattr(torch, canonical_dtype(dtype))
    tracker = LiveStorages()
    with FakeMode():
        def leaf(*shape: int) -> torch.Tensor:
            return torch.empty(*shape, dtype=tdtype).requires_grad_()

        block = reference_block(layout, leaf, causal=bool(layout.causal) and layout.kind == "self")
        tracker.known(block.leaves)
        with tracker:
            result = block.forward()  # its locals are gone: what is alive is kept for the backward
            end = tracker.log.ticks
        del result
    return sum(
        rec.nbytes for rec in tracker.log.records
        if (rec.freed is None or rec.freed >= end) and is_scores_of(rec.shape, layout)
    )


def phase_columns(layout: Layout, dtype: str, profile: GpuProfile) -> PhaseColumns:
    """Decode-step time and KV reads at n_kv cached tokens, and the saved-scores bytes."""
    e = dtype_bytes(dtype)
    memory = block_memory(layout, e, materializes_scores=False)
    step = block_step(layout, memory, layout.batch_size, layout.seq_len_kv, e, profile)
    return PhaseColumns(step.roofline.time_s, step.kv_read_bytes,
                        saved_scores_bytes(layout, dtype))
