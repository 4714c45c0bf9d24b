"""Report assembly: expand folded layers, group identical blocks, total the model."""

from __future__ import annotations

from mhaudit.assemble.expand import expand_experts, expand_layouts, expand_names
from mhaudit.assemble.grouping import fold_names, group_blocks
from mhaudit.assemble.report import build_report, untraced_modules
from mhaudit.assemble.sections import located, with_fvcore_count, with_measured
from mhaudit.assemble.totals import attention_params_of, model_totals

__all__ = [
    "attention_params_of",
    "build_report",
    "expand_experts",
    "expand_layouts",
    "expand_names",
    "fold_names",
    "group_blocks",
    "located",
    "model_totals",
    "untraced_modules",
    "with_fvcore_count",
    "with_measured",
]
