"""Baselines: a previous JSON report read back, checked, and compared model to model."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mhaudit.contain.files import parse_json, read_input_text
from mhaudit.data import Report
from mhaudit.errors import ConfigError
from mhaudit.gate.budget import MAX_QUANTITY, METRICS, metrics_from, phase_metrics

SCHEMA_VERSION = 1
"""The JSON report schema a baseline must have been written with."""

_REGENERATE = "Regenerate it with: mhaudit check TARGET --baseline FILE --update-baseline."


@dataclass(frozen=True)
class Baseline:
    """The metrics of a previous report and the model it was recorded for."""

    metrics: dict[str, float | None]
    """Gate metric to its recorded value; None where the report had none."""
    source: str | None
    """The target the baseline was recorded for (``model.source``)."""
    class_name: str | None
    """The model class it was recorded for (``model.class``)."""
    origin: str = "baseline"
    """Where it was read from, for messages."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _number(data: Mapping[str, Any], key: str, source: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{source}: field {key} = {value!r} is not a number", _REGENERATE)
    # compare before any float conversion: a 400-digit int overflows math.isfinite
    in_range = 0 <= value <= MAX_QUANTITY if isinstance(value, int) else (
        math.isfinite(value) and 0 <= value <= MAX_QUANTITY)
    if not in_range:
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:20]}... " \
            f"({len(repr(value))} digits)"
        raise ConfigError(f"{source}: field {key} = {shown} is not a finite value >= 0 "
                          f"(at most {MAX_QUANTITY:.0e})", _REGENERATE)
    return value


def metric_values_from_dict(
    data: Mapping[str, Any], source: str = "baseline"
) -> dict[str, float | None]:
    """The gate's metrics from a JSON report (``--format json``) read back as a dict."""
    version = data.get("schema_version", SCHEMA_VERSION)
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise ConfigError(f"{source} has schema_version {version!r}; this mhaudit reads "
                          f"version {SCHEMA_VERSION}", _REGENERATE)
    totals = data.get("totals")
    if not isinstance(totals, Mapping):
        raise ConfigError(f"{source} is not an mhaudit JSON report (no 'totals' object)",
                          "Create it with mhaudit check --baseline FILE --update-baseline.")
    values = metrics_from(lambda key: _number(totals, key, source))
    training, decode = data.get("training"), data.get("decode")
    values.update(phase_metrics(training if isinstance(training, Mapping) else None,
                                decode if isinstance(decode, Mapping) else None))
    model, budget = data.get("model"), data.get("budget")
    if values["params_total"] is None and isinstance(model, Mapping):
        values["params_total"] = _number(model, "params_total", source)
    saved = budget.get("metrics") if isinstance(budget, Mapping) else None
    for metric in METRICS:
        if values[metric] is None and isinstance(saved, Mapping):
            values[metric] = _number(saved, metric, source)
    return values


def baseline_from_dict(data: Mapping[str, Any], origin: str = "baseline") -> Baseline:
    """Check a JSON report dict and take its metrics and model identity."""
    metrics = metric_values_from_dict(data, origin)
    model = data.get("model")
    source = model.get("source") if isinstance(model, Mapping) else None
    cls = model.get("class") if isinstance(model, Mapping) else None
    return Baseline(metrics, source if isinstance(source, str) else None,
                    cls if isinstance(cls, str) else None, origin)


def load_baseline_report(path: str | Path) -> Baseline:
    """Read and check a previous JSON report file (schema, finite values, model identity)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"cannot read baseline {path}: No such file or directory",
                          "Create it with: mhaudit check --baseline FILE --update-baseline.")
    text = read_input_text(path, "baseline")
    try:
        data = parse_json(text, f"baseline {path}", parse_constant=_reject_constant)
    except ValueError as exc:
        raise ConfigError(f"baseline {path} is not valid JSON: {exc}", _REGENERATE) from exc
    if not isinstance(data, Mapping):
        raise ConfigError(f"baseline {path} is not a JSON object", _REGENERATE)
    return baseline_from_dict(data, str(path))


def load_baseline(path: str | Path) -> dict[str, float | None]:
    """The metrics of a previous JSON report file."""
    return load_baseline_report(path).metrics


def check_same_model(baseline: Baseline, report: Report, *, allow_other: bool = False) -> None:
    """Refuse to compare a report with a baseline recorded for another model.

    The model is the same when the target (``model.source``) and its class match.
    """
    if allow_other:
        return
    recorded = (baseline.source, baseline.class_name)
    current = (report.model.source, report.model.class_name)
    same_class = baseline.class_name in (None, report.model.class_name)
    if not (same_class and _same_source(baseline.source, report.model.source)):
        raise ConfigError(
            f"{baseline.origin} was recorded for {recorded[0]} ({recorded[1]}), not for "
            f"{current[0]} ({current[1]})",
            "Record a baseline for this model with --update-baseline, or pass "
            "--allow-other-model to compare anyway.",
        )


def _same_source(recorded: str | None, current: str) -> bool:
    """Targets compare as written, with ``./`` and doubled separators normalised away."""
    if recorded is None:
        return True
    return os.path.normpath(recorded) == os.path.normpath(current)


def baseline_text(data: Mapping[str, Any]) -> str:
    """A JSON report dict as the text of a baseline file."""
    return json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n"


def write_baseline(data: Mapping[str, Any], path: str | Path) -> None:
    """Write a JSON report dict as the new baseline, atomically."""
    from mhaudit.atomic import write_text_atomic

    write_text_atomic(path, baseline_text(data))
