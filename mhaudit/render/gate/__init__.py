"""The gate rendered: each outcome's verdict and messages, and ``mhaudit check`` in every format."""

from __future__ import annotations

from mhaudit.render.gate.checks import (
    BUDGET_RULE,
    Checked,
    CheckRenderer,
    model_verdicts,
    overall_verdict,
)
from mhaudit.render.gate.outcome import (
    budget_message,
    budget_to_dict,
    format_value,
    render_github,
    render_junit,
    render_markdown,
    render_table,
    verdict,
)

__all__ = [
    "BUDGET_RULE",
    "CheckRenderer",
    "Checked",
    "budget_message",
    "budget_to_dict",
    "format_value",
    "model_verdicts",
    "overall_verdict",
    "render_github",
    "render_junit",
    "render_markdown",
    "render_table",
    "verdict",
]
