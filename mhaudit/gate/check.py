"""The library gate: audit a model and judge it against a budget and a baseline."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mhaudit.data import GateOutcome, Report
from mhaudit.errors import ConfigError
from mhaudit.gate.baseline import load_baseline, metric_values_from_dict
from mhaudit.gate.budget import (
    MAX_QUANTITY,
    METRICS,
    Budget,
    check_budget_applies,
    evaluate,
    load_budget,
    metric_values,
    parse_budget,
)
from mhaudit.gate.phases import budget_phase_options

if TYPE_CHECKING:
    from torch import nn

BudgetSpec = Budget | Mapping[str, Any] | str | Path
"""A parsed budget, a ``[budget]``-style mapping, or a TOML file path."""

BaselineSpec = Report | Mapping[str, Any] | str | Path | None
"""A report, a JSON report dict, a metric-to-value mapping, or a JSON report file path."""


def resolve_budget(budget: BudgetSpec, source: str = "budget") -> Budget:
    """A Budget from any of the accepted forms."""
    if isinstance(budget, Budget):
        return budget
    if isinstance(budget, (str, Path)):
        return load_budget(budget)
    if not isinstance(budget, Mapping):
        raise ConfigError(f"budget must be a Budget, a mapping or a TOML path, not "
                          f"{type(budget).__name__}", 'Pass e.g. budget={"max_params": "20k"}.')
    return parse_budget(budget, source, section="")


def resolve_baseline(baseline: BaselineSpec) -> dict[str, float | None] | None:
    """Baseline metric values from any of the accepted forms."""
    if baseline is None:
        return None
    if isinstance(baseline, Report):
        return metric_values(baseline)
    if isinstance(baseline, (str, Path)):
        return load_baseline(baseline)
    if not isinstance(baseline, Mapping):
        raise ConfigError(f"baseline must be a Report, a mapping or a JSON path, not "
                          f"{type(baseline).__name__}", "Pass a JSON report file path.")
    if "totals" in baseline:
        return metric_values_from_dict(baseline)
    values: dict[str, float | None] = dict.fromkeys(METRICS)
    for key, value in baseline.items():
        if key not in values:
            raise ConfigError(f"baseline: unknown metric {key!r}", f"Use {', '.join(METRICS)}.")
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 <= value <= MAX_QUANTITY):
            raise ConfigError(f"baseline: {key} = {value!r} is not a finite number >= 0",
                              "Pass numbers.")
        values[key] = value
    return values


def check(
    model: nn.Module | str | Report,
    example_inputs: Any = None,
    *,
    budget: BudgetSpec,
    baseline: BaselineSpec = None,
    **options: Any,
) -> GateOutcome:
    """Audit ``model`` and judge it against ``budget`` (and ``baseline`` when given).

    ``model`` is a built ``nn.Module``, a target string (``model.py[:NAME]``,
    ``pkg.mod:NAME``, ``config.json``) or an existing Report. ``options`` are
    AuditOptions fields (``seq_len=2048``, ``dtype="float16"``) or ``options=AuditOptions(...)``.
    The budget is parsed before the model is built, so a bad budget fails fast.
    """
    parsed = resolve_budget(budget)
    base = resolve_baseline(baseline)
    if not isinstance(model, Report):
        options = _phase_options(parsed, options)
    opts = options.get("options")
    device = options.get("device", getattr(opts, "device", "meta"))
    if not isinstance(model, Report):
        check_budget_applies(parsed, device)
    if isinstance(model, Report):
        report = model
    elif isinstance(model, str):
        if example_inputs is not None:
            raise ConfigError("example_inputs apply to a built model, not to a target string",
                              "Define example_inputs() in the model file instead.")
        from mhaudit.api import audit_target

        report = audit_target(model, options.pop("options", None), **options)
    else:
        from mhaudit.api import audit

        report = audit(model, example_inputs, **options)
    return evaluate(report, parsed, base)


def _phase_options(budget: Budget, options: dict[str, Any]) -> dict[str, Any]:
    """The audit options with the phases the budget limits and its plan (the same choice
    ``mhaudit check`` makes), in ``options=AuditOptions(...)`` when one is given."""
    import dataclasses

    opts = options.get("options")
    keys = ("train", "decode", "parallel")
    current = {k: options.get(k, getattr(opts, k, None)) for k in keys}
    chosen = budget_phase_options(budget, current)
    changed = {k: v for k, v in chosen.items() if v != current[k]}
    if not changed:
        return options
    if opts is not None:
        return {**options, "options": dataclasses.replace(opts, **changed)}
    return {**options, **changed}
