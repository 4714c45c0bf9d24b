"""The block as the rules see it on the context's GPU and dtype, and head-count hints."""

from __future__ import annotations

import functools
import math
from dataclasses import replace

from mhaudit.cost.builder import build_block
from mhaudit.cost.devices import GpuProfile
from mhaudit.cost.kernels import FA2_HEAD_DIMS, flash_head_dims
from mhaudit.data import AttentionBlock, Layout, TargetEstimate
from mhaudit.rules.base import RuleContext
from mhaudit.rules.heads import divisors, heads_hint


def kernel_hint(block: AttentionBlock, ctx: RuleContext, fixes: str) -> str:
    """Head counts to move to. Without ``ctx.peers``: those whose d_k is a compiled flash
    size. With them: the splits of the same width that clear the finding ``fixes`` (a rule
    code) and add none the block does not already have, so one fix never trips another
    rule; the three nearest the current h, in increasing order, one head last."""
    version = ctx.profile.flash_attention_version
    dims = flash_head_dims(version) if version else FA2_HEAD_DIMS
    lay = block.layout
    inner = lay.num_heads * lay.head_dim
    if not ctx.peers:
        return heads_hint(inner, dims)
    now = _flagged(block, ctx)
    heads = [h for h in divisors(inner) if h != lay.num_heads
             and (flags := _variant_flags(lay, h, ctx)) is not None
             and fixes not in flags and flags <= now]
    if not heads:
        return (f"no other head count of width {inner} avoids every finding; "
                "change the width")
    nearest = sorted(heads, key=lambda h: (h == 1, abs(math.log(h / lay.num_heads)), -h))[:3]
    pairs = ", ".join(f"h = {h} (d_k = {inner // h})"
                      for h in sorted(nearest, key=lambda h: (h == 1, h)))
    return f"for width {inner}: {pairs}"


@functools.lru_cache(maxsize=1024)
def _variant(layout: Layout, heads: int, dtype: str, profile: GpuProfile) -> AttentionBlock | None:
    """The block with its width split into ``heads`` heads (K/V widths kept), or None
    when the K/V width does not split into the new head dim."""
    inner = layout.num_heads * layout.head_dim
    head_dim = inner // heads
    kv_width = layout.num_kv_heads * layout.head_dim
    v_head_dim = layout.v_head_dim * layout.num_heads // heads
    if kv_width % head_dim or layout.v_head_dim * layout.num_heads % heads:
        return None
    kv_heads = kv_width // head_dim
    if kv_heads < 1 or heads % kv_heads:
        return None
    changed = replace(layout, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                      v_head_dim=v_head_dim, padded_head_dim=None)
    return build_block(changed, dtype, profile)


def _flagged(block: AttentionBlock, ctx: RuleContext) -> frozenset[str]:
    """Codes of the peer rules that flag ``block`` (proposals inside are not made)."""
    inner = replace(ctx, peers=())
    return frozenset(rule.code for rule, thresholds in ctx.peers
                     if rule.check(block, replace(inner, thresholds=thresholds)) is not None)


def _variant_flags(layout: Layout, heads: int, ctx: RuleContext) -> frozenset[str] | None:
    """Codes flagging ``layout`` split into ``heads`` heads; None when it cannot split."""
    block = _variant(layout, heads, ctx.dtype, ctx.profile)
    return None if block is None else _flagged(block, ctx)


def on_target(block: AttentionBlock, ctx: RuleContext) -> AttentionBlock:
    """The block as costed on the context's GPU and dtype: itself, or rebuilt for them."""
    target = block.target
    if target is None or target.gpu != ctx.profile.key or target.dtype != ctx.dtype:
        return build_block(block.layout, ctx.dtype, ctx.profile)
    return block


def target_of(block: AttentionBlock, ctx: RuleContext) -> TargetEstimate:
    """The kernel the block really gets on the context's GPU and dtype."""
    target = on_target(block, ctx).target
    assert target is not None
    return target
