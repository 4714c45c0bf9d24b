"""Head-layout rules: declared rule objects by family, their configuration and the evaluator."""

from __future__ import annotations

from mhaudit.rules.base import Hit, NumberSpec, Rule, RuleContext, Threshold
from mhaudit.rules.config import RuleConfig, config_from_table, find_pyproject, load_config
from mhaudit.rules.engine import check_block, evaluate
from mhaudit.rules.registry import REGISTRY, RETIRED_CODES, RuleRegistry

__all__ = [
    "REGISTRY",
    "RETIRED_CODES",
    "Hit",
    "NumberSpec",
    "Rule",
    "RuleConfig",
    "RuleContext",
    "RuleRegistry",
    "Threshold",
    "check_block",
    "config_from_table",
    "evaluate",
    "find_pyproject",
    "load_config",
]
