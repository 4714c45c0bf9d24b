"""One decode step: every weight read once, the KV cache read at the context, one token written.

A generation step at context c for a batch of b sequences runs the part of the model
that generates (:mod:`~mhaudit.phases.step_part`: a decoder, a language model; an
encoder or a tower ran once, in prefill) on b new tokens. Its work is the per-token part
of that part's forward (every matmul, norm and elementwise op, read from the traced
graph's FLOPs with each attention core taken out) for b tokens, plus each of its blocks'
attention over its cache. Its memory traffic is each of its weights once, the cached K/V
(or latent) of every layer at the context, static cross-attention caches, and the cache
entries written for the new tokens. The roofline time on the target is the larger of
the compute time and the memory time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from mhaudit.cost.block import core_flops, projection_flops, roofline
from mhaudit.cost.devices import GpuProfile
from mhaudit.cost.latent import absorbed_core_flops
from mhaudit.data import (
    AttentionBlock,
    BlockDecode,
    BlockMemory,
    DecodeCost,
    Layout,
    Report,
    Roofline,
)
from mhaudit.errors import ConfigError
from mhaudit.phases.step_part import WHOLE_MODEL, StepPart

CONVENTION = (
    "one step: batch_size new tokens at the context; FLOPs are the audited forward's per-token "
    "FLOPs (attention cores taken out) times batch_size plus QKᵀ, softmax and PV over the "
    "cache (window-capped; latent attention absorbed, over its latent); bytes are every "
    "weight once (embedding tables that are only gathered: the rows gathered), the cache read "
    "at the context and written for the new tokens; roofline max(compute, memory) at the "
    "profile's dense bf16 peak"
)

PART_CONVENTION = (
    "; only what depends on the generating token input runs per step: ops that depend "
    "only on other inputs (encoders, towers, cross-attention K/V projections) run once, in "
    "prefill, and their weights are not read per step"
)


@dataclass(frozen=True)
class ExpertGroup:
    """Routed experts of one MoE layer: how many, how many each token picks, their bytes."""

    num_experts: int
    top_k: int
    bytes_per_expert: int


def experts_touched(num_experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct experts a step touches: E·(1 − (1 − k/E)^tokens).

    Uniform top-k routing: each token picks a given expert with probability k/E,
    independently of the other tokens. Real routers are skewed, so this is an upper
    bound for a balanced router and a fair figure for an unknown one.
    """
    if num_experts < 1 or not 0 < top_k <= num_experts:
        raise ConfigError(f"top-{top_k} of {num_experts} experts is not a routing",
                          "Check the MoE layer's expert count and top-k.")
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


def effective_context(layout: Layout, context: int) -> int:
    """Keys one new token attends to: the context, capped by a sliding window."""
    window = layout.window
    return context if window is None else min(context, window)


def step_projection_flops(layout: Layout, batch: int) -> int:
    """Q, K, V and O projections of ``batch`` new tokens; cross-attention K/V are cached."""
    kv = 0
    if layout.kind == "self":
        kv = projection_flops(layout.k, batch)
        kv += 0 if layout.kv_shared else projection_flops(layout.v, batch)
    return projection_flops(layout.q, batch) + kv + projection_flops(layout.o, batch)


def _cache_read(layout: Layout, memory: BlockMemory, batch: int, context: int) -> int:
    if layout.kind != "self":  # cross K/V of ``batch`` sources; the block's is for its batch
        return memory.kv_cache_bytes_static // max(1, layout.batch_size) * batch
    return batch * effective_context(layout, context) * memory.kv_cache_bytes_per_token


def _cache_write(layout: Layout, memory: BlockMemory, batch: int) -> int:
    return batch * memory.kv_cache_bytes_per_token if layout.kind == "self" else 0


def kv_read_bytes(block: AttentionBlock, batch: int, context: int) -> int:
    """Cache bytes a step reads: b·min(c, window)·bytes per token, or the cross cache."""
    return _cache_read(block.layout, block.memory, batch, context)


def kv_write_bytes(block: AttentionBlock, batch: int) -> int:
    """Cache bytes a step writes: one position per sequence (0 for a cross cache)."""
    return _cache_write(block.layout, block.memory, batch)


def weight_bytes(layout: Layout, element_bytes: int) -> int:
    """Bytes of the block's projection weights and biases, a weight shared by two roles
    (same tensor, same width, e.g. ``kv_shared``) counted once."""
    seen: dict[str, int] = {}
    for p in (layout.q, layout.k, layout.v, layout.o):
        if p is not None:
            seen[f"{p.weight}:{p.out_features}"] = p.params
    return sum(seen.values()) * element_bytes


@dataclass(frozen=True)
class BlockStep:
    """One block's share of a decode step."""

    core_flops: int
    """QKᵀ, softmax and PV of the new tokens over the cache."""
    flops: int
    """Projections of the new tokens plus ``core_flops``."""
    kv_read_bytes: int
    kv_write_bytes: int
    roofline: Roofline
    """Of ``flops`` over the block's weights once plus its cache reads and writes."""
    per_head_core_flops: int
    """``core_flops`` with every head's own K and V (the non-absorbed form)."""
    absorbed: bool
    """``core_flops`` is the absorbed form of latent attention (decode kernels' form)."""


def block_step(layout: Layout, memory: BlockMemory, batch: int, context: int,
               element_bytes: int, profile: GpuProfile) -> BlockStep:
    """The one per-block decode builder: ``batch`` new tokens at ``context`` cached tokens.

    Self-attention reads b·min(c, window) cached positions and writes one per sequence;
    cross-attention attends over its n_kv source positions, reads its static cache and
    writes nothing.
    """
    keys = effective_context(layout, context) if layout.kind == "self" else layout.seq_len_kv
    per_head = core_flops(layout, batch, 1, keys)
    absorbed = absorbed_core_flops(layout, batch, keys)  # latent attention as decode runs it
    core = per_head if absorbed is None else absorbed
    read = _cache_read(layout, memory, batch, context)
    write = _cache_write(layout, memory, batch)
    flops = step_projection_flops(layout, batch) + core
    moved = weight_bytes(layout, element_bytes) + read + write
    return BlockStep(core, flops, read, write, roofline(flops, moved, profile), per_head,
                     absorbed is not None)


def per_token_flops(forward_flops: int, blocks: Sequence[AttentionBlock], tokens: int) -> float:
    """The audited forward's FLOPs per token with every attention core taken out."""
    cores = sum(b.flops.scores + b.flops.softmax + b.flops.context for b in blocks)
    return max(0, forward_flops - cores) / tokens


def routed_bytes_saved(groups: Iterable[ExpertGroup], tokens: int) -> int:
    """Expert bytes a step does not read: the experts no token of the step picks."""
    saved = 0.0
    for g in groups:
        idle = g.num_experts - experts_touched(g.num_experts, g.top_k, tokens)
        saved += idle * g.bytes_per_expert
    return math.floor(saved)


def decode_step(
    blocks: Sequence[AttentionBlock],
    *,
    forward_flops: int,
    tokens: int,
    batch_size: int,
    context: int,
    weight_bytes: int,
    param_bytes: int,
    element_bytes: int,
    profile: GpuProfile,
    experts: Sequence[ExpertGroup] = (),
) -> DecodeCost:
    """Cost one decode step of ``batch_size`` sequences at ``context`` cached tokens.

    ``forward_flops`` is the audited forward over ``tokens`` tokens; ``weight_bytes``
    the bytes of the weights a step reads (dense; routed experts are thinned here
    with :func:`experts_touched`); ``param_bytes`` all resident weights.
    """
    if context < 0:
        raise ConfigError(f"--context {context} is negative", "Pass 0 or more cached tokens.")
    if tokens < 1:
        raise ConfigError("the audited forward has no tokens", "Audit at least one token.")
    linear = per_token_flops(forward_flops, blocks, tokens) * batch_size
    rows: list[BlockDecode] = []
    core_total = read_total = write_total = per_head_total = 0
    latent = False
    for block in blocks:
        step = block_step(block.layout, block.memory, batch_size, context, element_bytes,
                          profile)
        rows.append(BlockDecode(block.layout.name, step.flops, step.kv_read_bytes,
                                step.roofline.time_s))
        core_total += step.core_flops
        per_head_total += step.per_head_core_flops
        latent = latent or step.absorbed
        read_total += step.kv_read_bytes
        write_total += step.kv_write_bytes
    weights = weight_bytes - routed_bytes_saved(experts, batch_size)
    flops_per_step = round(linear) + core_total
    bytes_per_step = weights + read_total + write_total
    roof = roofline(flops_per_step, bytes_per_step, profile)
    cache = read_total  # a step reads the whole cache it holds
    convention = CONVENTION + (
        "; routed experts: only those a step touches, E·(1 − (1 − k/E)^tokens) per layer "
        "under uniform top-k routing" if experts else "")
    return DecodeCost(
        context=context, batch_size=batch_size, flops_per_step=flops_per_step,
        weight_bytes=weights, kv_read_bytes=read_total, kv_write_bytes=write_total,
        bytes_per_step=bytes_per_step, time_per_step_s=roof.time_s,
        tokens_per_s=batch_size / roof.time_s if roof.time_s else 0.0, bound=roof.bound,
        kv_cache_bytes=cache, param_bytes=param_bytes, memory_bytes=profile.memory_bytes,
        fits=param_bytes + cache <= profile.memory_bytes, blocks=tuple(rows),
        convention=convention,
        flops_per_step_non_absorbed=round(linear) + per_head_total if latent else None,
    )


def decode_for_report(report: Report, weight_bytes: int, element_bytes: int,
                      profile: GpuProfile, context: int | None,
                      experts: Sequence[ExpertGroup] = (), part: StepPart = WHOLE_MODEL
                      ) -> DecodeCost:
    """The decode step of an audited model: the blocks ``part`` runs, batch and context
    from the first of its self-attention blocks; ``weight_bytes`` is what a step reads.

    The step's per-token FLOPs are the forward's without what runs only in prefill
    (``part.prefill_only_flops``), over the tokens the step's part ran on.
    """
    blocks = [b for b in report.blocks if part.runs(b)]
    selfs = [b for b in blocks if b.layout.kind == "self"]
    if not selfs:
        raise ConfigError("--decode needs a self-attention block, and none was found",
                          "Audit a decoder (a model that generates tokens) with --decode.")
    first = selfs[0].layout
    step = decode_step(
        blocks, forward_flops=report.totals.flops - part.prefill_only_flops,
        tokens=first.batch_size * first.seq_len_q, batch_size=first.batch_size,
        context=first.seq_len_kv if context is None else context, weight_bytes=weight_bytes,
        param_bytes=report.totals.param_bytes, element_bytes=element_bytes, profile=profile,
        experts=experts)
    if part.blocks is not None:
        step = replace(step, convention=step.convention + PART_CONVENTION,
                       prefill_only_flops=part.prefill_only_flops)
    growing = any(b.memory.kv_cache_bytes_per_token for b in selfs)
    return step if growing else replace(step, applicable=False)
