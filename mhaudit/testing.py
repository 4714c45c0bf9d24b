"""Budget assertions for a user's own test suite."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from mhaudit.data import GateOutcome, Severity
from mhaudit.gate.budget import parse_budget
from mhaudit.gate.check import BaselineSpec, check
from mhaudit.render.gate import budget_message

if TYPE_CHECKING:
    from torch import nn

    from mhaudit.options import AuditOptions


def breaches(outcome: GateOutcome) -> list[str]:
    """One line per error-severity budget breach and per flag that failed the gate."""
    lines = [budget_message(r) for r in outcome.results
             if not r.passed and r.severity is Severity.ERROR]
    for flag in outcome.failing_findings:
        where = f" ({flag.block})" if flag.block is not None else ""
        lines.append(f"{flag.code} {flag.name}{where} [{flag.severity.value}]: {flag.message}")
    return lines


def assert_within_budget(
    model: nn.Module | str,
    example_inputs: Any = None,
    *,
    baseline: BaselineSpec = None,
    options: AuditOptions | None = None,
    **budget: Any,
) -> GateOutcome:
    """Audit ``model`` and raise AssertionError listing every breach of the budget.

    Budget keys are those of a ``[budget]`` table, e.g.
    ``assert_within_budget(model, x, max_params="20k", max_kv_cache_bytes_per_token="64KiB")``.
    Warning-severity breaches are emitted as warnings instead. Returns the outcome.
    """
    parsed = parse_budget(budget, "assert_within_budget", section="")
    outcome = check(model, example_inputs, budget=parsed, baseline=baseline, options=options)
    for result in outcome.results:
        if not result.passed and result.severity is not Severity.ERROR:
            warnings.warn(f"mhaudit budget: {budget_message(result)}", UserWarning, stacklevel=2)
    lines = breaches(outcome)
    if lines:
        raise AssertionError("mhaudit budget exceeded:\n" + "\n".join(f"  {x}" for x in lines))
    return outcome
