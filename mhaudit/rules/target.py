"""The block as the rules see it on the context's GPU and dtype, and head-count hints."""

from __future__ import annotations

from mhaudit.cost.builder import build_block
from mhaudit.cost.kernels import FA2_HEAD_DIMS, flash_head_dims
from mhaudit.data import AttentionBlock, TargetEstimate
from mhaudit.rules.base import RuleContext
from mhaudit.rules.heads import heads_hint


def kernel_hint(block: AttentionBlock, ctx: RuleContext) -> str:
    """Head counts whose d_k is a compiled flash size on the target."""
    version = ctx.profile.flash_attention_version
    dims = flash_head_dims(version) if version else FA2_HEAD_DIMS
    return heads_hint(block.layout.num_heads * block.layout.head_dim, dims)


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
