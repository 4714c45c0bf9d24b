"""Run the enabled rules over the blocks and attach their findings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mhaudit.data import AttentionBlock, Finding
from mhaudit.rules.base import RuleContext
from mhaudit.rules.config import RuleConfig
from mhaudit.rules.registry import REGISTRY


def check_block(block: AttentionBlock, ctx: RuleContext, config: RuleConfig) -> tuple[Finding, ...]:
    """The findings of every enabled, unsuppressed rule on one block, in code order."""
    found: list[Finding] = []
    peers = tuple((rule, config.thresholds_for(rule)) for rule in REGISTRY
                  if config.enabled(rule.code))
    for rule, thresholds in peers:
        if config.suppressed(block.name, rule.code):
            continue
        hit = rule.check(block, replace(ctx, thresholds=thresholds, peers=peers))
        if hit is not None:
            found.append(replace(rule.finding(block, hit), severity=config.severity_for(rule)))
    return tuple(found)


def evaluate(
    blocks: Sequence[AttentionBlock], ctx: RuleContext, config: RuleConfig | None = None,
) -> tuple[AttentionBlock, ...]:
    """The blocks with ``flags`` filled by the rules; flags from other stages are kept."""
    config = config or RuleConfig()
    codes = set(REGISTRY.codes())
    out = []
    for block in blocks:
        kept = tuple(f for f in block.findings if f.code not in codes)
        out.append(replace(block, findings=kept + check_block(block, ctx, config)))
    return tuple(out)
