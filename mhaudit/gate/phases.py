"""Which phases a gated run costs, and under which parallel plan."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mhaudit.errors import ConfigError
from mhaudit.gate.budget import Budget, phases_needed


def budget_phase_options(budget: Budget, phases: Mapping[str, Any]) -> dict[str, Any]:
    """The phase options of a gated run: each phase a budget limits switched on, and the
    budget's plan as ``parallel`` (a ``--parallel`` given beside it must agree)."""
    chosen = dict(phases)
    for phase in phases_needed(budget):
        chosen[phase] = True
    if budget.parallel is None:
        return chosen
    given = chosen.get("parallel")
    if given is not None:
        from mhaudit.parallel.plan import as_plan

        if as_plan(given) != budget.parallel:
            raise ConfigError(f"--parallel {given} disagrees with {budget.source}'s "
                              f"parallel = \"{budget.parallel.text()}\"",
                              "Give the plan once, on the command line or in the budget.")
    chosen["parallel"] = budget.parallel
    if not chosen.get("train") and not chosen.get("decode"):
        chosen["train"] = True  # a plan costs a phase: the training step unless one is asked
    return chosen
