"""Context parallelism: the sequence split over cp ranks and K/V passed round a ring in every
attention layer, as torch's ``context_parallel`` runs it.

Source: torch/distributed/tensor/experimental/_context_parallel/_attention.py (torch 2.13):
``_templated_ring_attention`` and ``_templated_ring_attention_backward``. The ring runs the
fused SDPA kernel (flash, efficient or cuDNN) on one chunk of keys per step and merges the
chunks' outputs by their log-sum-exp, so no rank holds an s × s score matrix. Torch
dispatches the ring only for the CUDA kernels: on CPU, ``context_parallel`` raises (the CPU
flash kernel has no sharding rule), so mhaudit's tests check the exchange against torch's
ring functions driven with the CPU kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

from mhaudit.data import AttentionBlock
from mhaudit.data.parallel import ContextCost, ParallelPlan
from mhaudit.parallel.shard import ceil_div, kv_heads_per_rank
from mhaudit.parallel.step import TRAIN, StepSpec

ACCUM_BYTES = 4
"""dK and dV are accumulated, and passed round the ring, in fp32 (torch's
``_cp_options.convert_to_f32``, on by default)."""

Sent = tuple[str, str, int, int]
"""(group ``cp``, collective kind, bytes this rank sends, calls)."""


def ring_blocks(blocks: Sequence[AttentionBlock]) -> list[AttentionBlock]:
    """The blocks the ring splits: self-attention (queries and keys are the same split
    sequence); cross-attention's keys are not the sequence being split."""
    return [b for b in blocks if b.layout.kind == "self"]


def kv_shard_elements(block: AttentionBlock, batch: int, plan: ParallelPlan) -> int:
    """K and V of one rank's chunk: b · ⌈s/cp⌉ · h_kv · (d_k + d_v) elements, with h_kv the
    KV heads on this TP rank (the SDPA input; a model that expands K/V to h heads before
    SDPA passes h/h_kv times more)."""
    lay = block.layout
    rows = batch * ceil_div(lay.seq_len_kv, plan.cp)
    return rows * kv_heads_per_rank(lay.num_kv_heads, plan.tp) * (lay.head_dim
                                                                  + lay.v_head_dim)


def ring_traffic(blocks: Sequence[AttentionBlock], spec: StepSpec,
                 plan: ParallelPlan) -> tuple[Sent, ...]:
    """Per attention layer and training step, with S the K/V shard at the compute dtype:

    - forward: each rank needs the other cp − 1 chunks: one all-gather of the shard (torch's
      default rotate method), (cp − 1)·S sent, the same bytes as cp − 1 ring steps of S;
    - backward: K and V again, (cp − 1)·S in one all-gather; and dK/dV passed on at every
      one of the cp steps (the last returns each chunk's sum to its owner), in fp32:
      cp · S · 4 / bytes, cp all-to-alls (``permute_tensor``).

    A decode step is not split (torch's ring needs as many queries as keys under a causal
    mask): no traffic there."""
    if plan.cp == 1 or spec.phase != TRAIN:
        return ()
    cp = plan.cp
    sent: list[Sent] = []
    for block in ring_blocks(blocks):
        shard = kv_shard_elements(block, spec.batch, plan)
        gathered = (cp - 1) * shard * spec.compute_bytes
        sent += [("cp", "all_gather", 2 * gathered, 2),
                 ("cp", "all_to_all", cp * shard * ACCUM_BYTES, cp)]
    return tuple(sent)


def chunk_scores_bytes(blocks: Sequence[AttentionBlock], spec: StepSpec,
                       plan: ParallelPlan) -> int:
    """The largest score chunk one ring step of a math (score-materialising) kernel holds:
    b · ⌈h/t⌉ · ⌈s/cp⌉² · bytes; 0 for blocks on a fused kernel, which hold none."""
    biggest = 0
    for block in ring_blocks(blocks):
        lay = block.layout
        if block.memory.scores_bytes is None:
            continue
        rows = ceil_div(lay.seq_len_q, plan.cp)
        biggest = max(biggest, spec.batch * ceil_div(lay.num_heads, plan.tp) * rows * rows
                      * spec.compute_bytes)
    return biggest


def context_cost(blocks: Sequence[AttentionBlock], spec: StepSpec,
                 plan: ParallelPlan) -> ContextCost | None:
    """The ring's figures on one rank; None when cp is 1."""
    if plan.cp == 1:
        return None
    ring = ring_blocks(blocks)
    sent = ring_traffic(blocks, spec, plan)
    train = spec.phase == TRAIN
    return ContextCost(
        cp=plan.cp,
        tokens_per_rank=ceil_div(ring[0].layout.seq_len_q, plan.cp) if ring and train else 1,
        kv_exchange_bytes=sum(s[2] for s in sent), kv_exchange_calls=sum(s[3] for s in sent),
        load_balanced=bool(ring) and all(b.layout.causal for b in ring),
        chunk_scores_bytes=chunk_scores_bytes(blocks, spec, plan) if train else 0,
        kv_cache_split=False)
