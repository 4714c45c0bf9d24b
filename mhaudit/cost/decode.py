"""One decode step: every weight read once, the KV cache read at the context, one token written.

A generation step at context c for a batch of b sequences runs the model on b new
tokens. Its work is the per-token part of the audited forward (every matmul, norm and
elementwise op, read from the traced graph's FLOPs with each attention core taken out)
for b tokens, plus each block's attention over its cache. Its memory traffic is every
weight once, the cached K/V (or latent) of every layer at the context, and the cache
entries written for the new tokens. The roofline time on the target is the larger of
the compute time and the memory time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mhaudit.cost.block import roofline
from mhaudit.cost.devices import GpuProfile
from mhaudit.cost.formulas import SOFTMAX_FLOPS_PER_ELEMENT
from mhaudit.cost.latent import absorbed_core_flops
from mhaudit.data import AttentionBlock, BlockDecode, DecodeCost, Layout, Projection, Report
from mhaudit.errors import ConfigError

CONVENTION = (
    "one step: batch_size new tokens at the context; FLOPs are the audited forward's per-token "
    "FLOPs (attention cores taken out) times batch_size plus QKᵀ, softmax and PV over the "
    "cache (window-capped; latent attention absorbed, over its latent); bytes are every "
    "weight once (embedding tables that are only gathered: the rows gathered), the cache read "
    "at the context and written for the new tokens; roofline max(compute, memory) at the "
    "profile's dense bf16 peak"
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


def core_flops(layout: Layout, batch: int, keys: int, queries: int = 1) -> int:
    """QKᵀ + softmax + PV for ``queries`` new tokens per sequence against ``keys`` keys.

    2·b·h·q·keys·d_k + SOFTMAX_FLOPS_PER_ELEMENT·b·h·q·keys + 2·b·h·q·keys·d_v; all
    query heads count (GQA shares K/V, not work). Dense, masks ignored.
    """
    pairs = batch * layout.num_heads * queries * keys
    return 2 * pairs * layout.head_dim + SOFTMAX_FLOPS_PER_ELEMENT * pairs \
        + 2 * pairs * layout.v_head_dim


def _projection_flops(projection: Projection | None, rows: int) -> int:
    if projection is None:
        return 0
    if projection.low_rank_width:
        return 2 * rows * projection.weight_params
    return 2 * rows * projection.in_features * projection.out_features


def projection_flops(layout: Layout, batch: int) -> int:
    """Q, K, V and O projections of ``batch`` new tokens; cross-attention K/V are cached."""
    kv = 0
    if layout.kind == "self":
        kv = _projection_flops(layout.k, batch)
        kv += 0 if layout.kv_shared else _projection_flops(layout.v, batch)
    return _projection_flops(layout.q, batch) + kv + _projection_flops(layout.o, batch)


def static_cache_bytes(block: AttentionBlock, batch: int) -> int:
    """Cross-attention K/V of ``batch`` source sequences (the block's figure is for its own
    audited batch)."""
    return block.memory.kv_cache_bytes_static // max(1, block.layout.batch_size) * batch


def kv_read_bytes(block: AttentionBlock, batch: int, context: int) -> int:
    """Cache bytes a step reads: b·min(c, window)·bytes per token, or the cross cache."""
    if block.layout.kind != "self":
        return static_cache_bytes(block, batch)
    return batch * effective_context(block.layout, context) * block.memory.kv_cache_bytes_per_token


def kv_write_bytes(block: AttentionBlock, batch: int) -> int:
    """Cache bytes a step writes: one position per sequence (0 for a cross cache)."""
    return batch * block.memory.kv_cache_bytes_per_token if block.layout.kind == "self" else 0


def _weight_bytes(layout: Layout, element_bytes: int) -> int:
    seen: dict[str, int] = {}
    for p in (layout.q, layout.k, layout.v, layout.o):
        if p is not None:
            seen[f"{p.weight}:{p.out_features}"] = p.params
    return sum(seen.values()) * element_bytes


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
        lay = block.layout
        keys = effective_context(lay, context) if lay.kind == "self" else lay.seq_len_kv
        per_head = core_flops(lay, batch_size, keys)
        absorbed = absorbed_core_flops(lay, batch_size, keys)
        core = per_head if absorbed is None else absorbed
        latent, per_head_total = latent or absorbed is not None, per_head_total + per_head
        read, write = kv_read_bytes(block, batch_size, context), kv_write_bytes(block, batch_size)
        flops = projection_flops(lay, batch_size) + core
        moved = _weight_bytes(lay, element_bytes) + read + write
        rows.append(BlockDecode(lay.name, flops, read, roofline(flops, moved, profile).time_s))
        core_total, read_total, write_total = core_total + core, read_total + read, \
            write_total + write
    weights = weight_bytes - routed_bytes_saved(experts, batch_size)
    flops_per_step = round(linear) + core_total
    bytes_per_step = weights + read_total + write_total
    roof = roofline(flops_per_step, bytes_per_step, profile)
    cache = sum(
        batch_size * effective_context(b.layout, context) * b.memory.kv_cache_bytes_per_token
        if b.layout.kind == "self" else static_cache_bytes(b, batch_size)
        for b in blocks
    )
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
                      experts: Sequence[ExpertGroup] = ()) -> DecodeCost:
    """The decode step of an audited model: batch and context from its first self-attention."""
    selfs = [b for b in report.blocks if b.layout.kind == "self"]
    if not selfs:
        raise ConfigError("--decode needs a self-attention block, and none was found",
                          "Audit a decoder (a model that generates tokens) with --decode.")
    first = selfs[0].layout
    return decode_step(
        report.blocks, forward_flops=report.totals.flops,
        tokens=first.batch_size * first.seq_len_q, batch_size=first.batch_size,
        context=first.seq_len_kv if context is None else context, weight_bytes=weight_bytes,
        param_bytes=report.totals.param_bytes, element_bytes=element_bytes, profile=profile,
        experts=experts)
