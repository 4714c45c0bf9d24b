"""Head-layout rules: declared rule objects, their configuration and the evaluator."""

from __future__ import annotations

from mhaudit.rules.base import REGISTRY, Rule, RuleContext, RuleRegistry, Threshold
from mhaudit.rules.config import RuleConfig, config_from_table, find_pyproject, load_config
from mhaudit.rules.engine import check_block, evaluate

__all__ = [
    "REGISTRY",
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
