"""The CI gate's budgets: parse them and judge a report's metrics against them."""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from mhaudit.contain.files import read_input_text
from mhaudit.data import BudgetLimit, BudgetResult, Finding, GateOutcome, Report, Severity
from mhaudit.data.parallel import ParallelPlan
from mhaudit.errors import ConfigError
from mhaudit.gate.per_device import budget_plan, per_device_metrics, phase_sections
from mhaudit.rules.pyproject import tool_table

METRIC_KEYS: dict[str, str] = {
    "max_params": "params_total",
    "max_attention_params": "attention_params",
    "max_flops": "flops",
    "max_kv_cache_bytes_per_token": "kv_cache_bytes_per_token",
    "max_peak_activation_bytes": "peak_activation_bytes",
    "max_peak_memory_bytes": "peak_memory_bytes",
    "max_latency_ms": "latency_ms",
    "max_train_peak_bytes": "train_peak_bytes",
    "max_decode_step_ms": "decode_step_ms",
    "max_decode_kv_cache_bytes": "decode_kv_cache_bytes",
    "max_train_peak_bytes_per_device": "train_peak_bytes_per_device",
    "max_decode_peak_bytes_per_device": "decode_peak_bytes_per_device",
    "max_train_comm_bytes_per_step": "train_comm_bytes_per_step",
}
"""Budget key to the report metric it limits (per GPU: see :mod:`mhaudit.gate.per_device`)."""

PHASE_METRICS: dict[str, str] = {
    "train_peak_bytes": "train",
    "decode_step_ms": "decode",
    "decode_kv_cache_bytes": "decode",
    "train_peak_bytes_per_device": "train",
    "decode_peak_bytes_per_device": "decode",
    "train_comm_bytes_per_step": "train",
}
"""Metrics read from the training or the decode section, and the option that adds it."""

METRICS: tuple[str, ...] = tuple(METRIC_KEYS.values())
"""Every metric the gate can check, in report order."""

FAIL_ON: tuple[str, ...] = ("error", "warning", "info", "never")
"""Values of ``fail_on``: the lowest flag severity that fails the gate, or never."""

BUDGET_KEYS: tuple[str, ...] = (*METRIC_KEYS, "fail_on", "max_increase_percent", "parallel")
_ENTRY_KEYS = ("limit", "severity", "max_increase_percent")
_METRIC_ALIASES = {**{m: m for m in METRICS}, **METRIC_KEYS, "params": "params_total"}
_SCALES: dict[str, int] = {
    "": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
}
_NUMBER = re.compile(
    r"^\s*([0-9]+(?:_[0-9]+)*(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)\s*([kKMGT]i?)?(B?)\s*$"
)
MAX_QUANTITY = 10**30
"""Largest budget value accepted: far above any model (10^30 FLOPs, bytes or parameters),
and small enough that every comparison and percentage stays exact and finite."""
BYTE_METRICS = frozenset(m for m in METRIC_KEYS.values() if "_bytes" in m)
"""Metrics counted in bytes (units in names): the only ones whose values may end in ``B``."""


@dataclass(frozen=True)
class Budget:
    """A parsed budget: absolute limits, growth allowed over a baseline, and the flag gate."""

    limits: tuple[BudgetLimit, ...] = ()
    """Absolute limits, one per metric at most."""
    fail_on: str = "error"
    """Lowest flag severity that fails the gate (``error``, ``warning``, ``info``) or ``never``."""
    increase_percent: Mapping[str, float] = field(default_factory=dict)
    """Metric to the growth over the baseline it may have, in percent."""
    default_increase_percent: float | None = None
    """Growth allowed for every metric without its own entry, in percent."""
    severities: Mapping[str, Severity] = field(default_factory=dict)
    """Metric to severity, where the budget sets one (ERROR otherwise)."""
    source: str = "budget"
    """Where the budget came from, for messages."""
    parallel: ParallelPlan | None = None
    """The plan the phases are costed under (``parallel = "tp=8,fsdp=8"``); None for one
    GPU."""

    def severity(self, metric: str) -> Severity:
        """How a breach of ``metric`` counts."""
        return self.severities.get(metric, Severity.ERROR)


def parse_quantity(value: Any, key: str, source: str = "budget", *,
                   metric: str | None = None) -> int | float:
    """A non-negative number from an int, float or string with an SI/IEC suffix.

    ``"20k"`` is 20,000, ``"125M"`` 125·10**6, ``"2GiB"`` 2·1024**3; a trailing ``B`` is
    allowed for byte metrics only. The arithmetic is exact (Decimal); values above
    :data:`MAX_QUANTITY` are refused. Integral values come back as ints.
    """
    tip = 'Use a number or a string such as "20k", "125M" or "2GiB" (k, M, G, T; Ki, Mi, Gi, Ti).'
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"{source}: {key} must be a number, not {value!r}", tip)
    if isinstance(value, str):
        match = _NUMBER.match(value)
        if match is None:
            raise ConfigError(f"{source}: {key} = {value!r} is not a number", tip)
        text, suffix, byte = match.groups()
        if byte and metric is not None and metric not in BYTE_METRICS:
            raise ConfigError(f"{source}: {key} = {value!r}: {metric} is not counted in bytes",
                              f'Drop the "B", e.g. {key} = "{text}{suffix or ""}".')
        if len(text) > 64:
            raise ConfigError(f"{source}: {key} = {value[:20]!r}… is absurdly large",
                              f"Budgets go up to {MAX_QUANTITY:.0e}.")
        try:
            number = Decimal(text.replace("_", "")) * _SCALES[suffix or ""]
        except InvalidOperation:
            raise ConfigError(f"{source}: {key} = {value!r} is not a number", tip) from None
    else:
        if isinstance(value, float) and value != value:  # NaN
            raise ConfigError(f"{source}: {key} = {value!r} must be a finite number >= 0", tip)
        try:
            number = Decimal(value)
        except (InvalidOperation, OverflowError):
            raise ConfigError(f"{source}: {key} = {value!r} is not a number", tip) from None
    if not number.is_finite() or number < 0:
        raise ConfigError(f"{source}: {key} = {value!r} must be a finite number >= 0", tip)
    if number > MAX_QUANTITY:
        raise ConfigError(f"{source}: {key} = {_short(value)} is absurdly large",
                          f"Budgets go up to {MAX_QUANTITY:.0e}; check the number of digits.")
    return int(number) if number == number.to_integral_value() else float(number)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 24 else text[:20] + "…"


def _percent(value: Any, key: str, source: str) -> float:
    text = value.strip().removesuffix("%") if isinstance(value, str) else value
    if isinstance(text, str) and not re.fullmatch(r"[0-9]+(\.[0-9]+)?", text.strip()):
        raise ConfigError(f"{source}: {key} = {value!r} is not a percentage",
                          "Write a plain number of percent, e.g. 10 or \"10%\".")
    pct = float(parse_quantity(text, key, source))
    if pct > 10**6:
        raise ConfigError(f"{source}: {key} = {value!r} is not a sensible growth",
                          "Allow at most 1,000,000 percent.")
    return pct


def _unknown(key: str, valid: Iterable[str], source: str, where: str) -> ConfigError:
    valid = list(valid)
    close = difflib.get_close_matches(key.split(".")[-1], valid, n=1)
    hint = f"Did you mean '{close[0]}'? " if close else ""
    return ConfigError(f"{source}: unknown key '{where}{key}'",
                       f"{hint}Valid keys: {', '.join(valid)}.")


def _severity(value: Any, key: str, source: str) -> Severity:
    if value not in ("error", "warning"):
        raise ConfigError(f"{source}: {key} = {value!r} is not a severity",
                          'Use "error" (fails the gate) or "warning" (reported only).')
    return Severity(value)


def parse_budget(
    table: Mapping[str, Any], source: str = "budget", section: str = "budget"
) -> Budget:
    """Validate one budget table (the contents of ``[budget]``) into a Budget."""
    where = f"{section}." if section else ""
    limits: list[BudgetLimit] = []
    severities: dict[str, Severity] = {}
    increase: dict[str, float] = {}
    default_increase: float | None = None
    fail_on = "error"
    plan: ParallelPlan | None = None
    for key, value in table.items():
        name = f"{where}{key}"
        if key == "parallel":
            plan = budget_plan(value, name, source)
        elif key == "fail_on":
            if value not in FAIL_ON:
                raise ConfigError(f"{source}: {name} = {value!r} is not allowed",
                                  'Use "error", "warning", "info" or "never".')
            fail_on = str(value)
        elif key == "max_increase_percent":
            if isinstance(value, Mapping):
                for sub, pct in value.items():
                    if sub == "default":
                        default_increase = _percent(pct, f"{name}.{sub}", source)
                    elif sub in _METRIC_ALIASES:
                        increase[_METRIC_ALIASES[sub]] = _percent(pct, f"{name}.{sub}", source)
                    else:
                        raise _unknown(sub, [*METRICS, "default"], source, f"{name}.")
            else:
                default_increase = _percent(value, name, source)
        elif key in METRIC_KEYS:
            metric = METRIC_KEYS[key]
            if not isinstance(value, Mapping):
                limits.append(BudgetLimit(metric, parse_quantity(value, name, source,
                                                                 metric=metric)))
                continue
            for sub in value:
                if sub not in _ENTRY_KEYS:
                    raise _unknown(sub, _ENTRY_KEYS, source, f"{name}.")
            if "limit" not in value and "max_increase_percent" not in value:
                raise ConfigError(f"{source}: {name} needs 'limit' or 'max_increase_percent'",
                                  f'Write {key} = {{ limit = "20k", severity = "warning" }}.')
            severity = _severity(value.get("severity", "error"), f"{name}.severity", source)
            severities[metric] = severity
            if "max_increase_percent" in value:
                pct = value["max_increase_percent"]
                increase[metric] = _percent(pct, f"{name}.max_increase_percent", source)
            if "limit" in value:
                limit = parse_quantity(value["limit"], f"{name}.limit", source, metric=metric)
                limits.append(BudgetLimit(metric, limit, severity))
        else:
            raise _unknown(key, BUDGET_KEYS, source, where)
    if not table:
        raise ConfigError(f"{source}: the {section or 'budget'} table is empty, so it would "
                          "pass any model", 'Add a limit, e.g. max_params = "125M".')
    return Budget(tuple(limits), fail_on, increase, default_increase, severities, source, plan)


def check_budget_applies(budget: Budget, device: str) -> None:
    """Refuse a budget whose metrics this run cannot produce (latency on meta)."""
    if device == "meta" and any(limit.metric == "latency_ms" for limit in budget.limits):
        raise ConfigError(f"{budget.source}: max_latency_ms needs a measured run, and the "
                          "meta device runs nothing", "Add --device cpu or --device cuda.")


def _read_toml(path: Path) -> dict[str, Any]:
    text = read_input_text(path, "budget file")
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise ConfigError(f"{path} nests too deeply to read", "Check the file.") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}",
                          'Fix the syntax there; strings need quotes, e.g. max_params = "20k".'
                          ) from exc


def _tool_budget(data: Mapping[str, Any]) -> Any:
    tool = data.get("tool")
    mh = tool.get("mhaudit") if isinstance(tool, Mapping) else None
    return mh.get("budget") if isinstance(mh, Mapping) else None


def load_budget(path: str | Path | None = None, *, start: str | Path | None = None) -> Budget:
    """Read ``[budget]`` (or ``[tool.mhaudit.budget]``) from ``path``.

    Without a path, use the nearest pyproject.toml from ``start`` (default: the
    current folder) upward that has a ``[tool.mhaudit.budget]`` table.
    """
    if path is None:
        found = find_pyproject_budget(start)
        if found is None:
            raise ConfigError("no budget given and no pyproject.toml with [tool.mhaudit.budget] "
                              "found from this folder upward",
                              "Pass --budget FILE or add a [tool.mhaudit.budget] table.")
        return found
    path = Path(path)
    data = _read_toml(path)
    if "budget" in data:
        table, section = data["budget"], "budget"
    else:
        table, section = _tool_budget(data), "tool.mhaudit.budget"
    if not isinstance(table, Mapping):
        raise ConfigError(f"{path} has no [budget] table",
                          'Put the limits under a [budget] header, e.g. max_params = "20k".')
    return parse_budget(table, str(path), section)


def find_pyproject_budget(start: str | Path | None = None) -> Budget | None:
    """The budget in the nearest pyproject.toml (from ``start`` upward) that has one."""
    folder = Path(start if start is not None else Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file():
            table = (tool_table(pyproject) or {}).get("budget")
            if table is not None:
                if not isinstance(table, Mapping):
                    raise ConfigError(f"{pyproject}: tool.mhaudit.budget must be a table",
                                      "Write it as a [tool.mhaudit.budget] header.")
                return parse_budget(table, str(pyproject), "tool.mhaudit.budget")
    return None


def metrics_from(get: Callable[[str], float | None]) -> dict[str, float | None]:
    """Metrics from a field getter; every metric but peak memory is a Totals field.

    Peak memory is the report's estimate (parameters + buffers + activations); reports
    made before it existed give the measured peak, else activations plus parameters.
    """
    peak = get("peak_memory_bytes")
    activations = get("peak_activation_bytes")
    if peak is None:
        peak = get("measured_peak_memory_bytes")
    if peak is None and activations is not None:
        peak = activations + (get("param_bytes") or 0)
    return {m: peak if m == "peak_memory_bytes" else get(m) for m in METRICS}


def phase_metrics(training: Mapping[str, Any] | None, decode: Mapping[str, Any] | None
                  ) -> dict[str, float | None]:
    """The phase metrics from the JSON ``training`` and ``decode`` sections (None if absent)."""
    step_s = decode.get("time_per_step_s") if decode else None
    return {
        "train_peak_bytes": training.get("peak_bytes") if training else None,
        "decode_step_ms": step_s * 1e3 if isinstance(step_s, (int, float)) else None,
        "decode_kv_cache_bytes": decode.get("kv_cache_bytes") if decode else None,
        **per_device_metrics(training, decode),
    }


def phases_needed(budget: Budget) -> set[str]:
    """``train`` and/or ``decode`` when the budget limits a metric of that phase."""
    limited = {limit.metric for limit in budget.limits} | set(budget.increase_percent)
    return {PHASE_METRICS[m] for m in limited if m in PHASE_METRICS}


def metric_values(report: Report) -> dict[str, float | None]:
    """The gate's metrics from a report; None where the report has no figure.

    Peak memory is the measured peak, else estimated activations plus parameter bytes.
    """
    values = metrics_from(lambda key: getattr(report.totals, key, None))
    values.update(phase_metrics(*phase_sections(report.training, report.decode)))
    return values


def _judge(metric: str, value: float | None, bounds: list[tuple[Decimal, str, float | None]],
           baseline: float | None, severity: Severity) -> BudgetResult:
    limit, bound, pct = min(bounds, key=lambda b: b[0])
    integral = bound == "budget" and limit == limit.to_integral_value()
    cap = int(limit) if integral else float(limit)  # growth over a baseline is a float
    if value is None:
        return BudgetResult(metric, None, cap, baseline, severity, False, bound, pct)
    passed = Decimal(value) <= limit
    return BudgetResult(metric, value, cap, baseline, severity, passed, bound, pct)


def evaluate_metrics(values: Mapping[str, float | None], budget: Budget,
                     baseline: Mapping[str, float | None] | None = None,
                     findings: Iterable[Finding] = ()) -> GateOutcome:
    """Judge metric values against the budget's limits and, when given, a baseline.

    Limits and allowed growth are computed exactly (Decimal); the result carries numbers
    only, and renderers word them.
    """
    limits = {limit.metric: limit for limit in budget.limits}
    results: list[BudgetResult] = []
    for metric in METRICS:
        bounds: list[tuple[Decimal, str, float | None]] = []
        if metric in limits:
            bounds.append((Decimal(limits[metric].limit), "budget", None))
        base = baseline.get(metric) if baseline is not None else None
        pct = budget.increase_percent.get(metric, budget.default_increase_percent)
        if baseline is not None and pct is not None and base is not None:
            allowed = Decimal(base) * (1 + Decimal(pct) / 100)
            bounds.append((allowed, "baseline", pct))
        if bounds:
            severity = budget.severity(metric)
            results.append(_judge(metric, values.get(metric), bounds, base, severity))
    return GateOutcome(tuple(results), failing_findings(findings, budget.fail_on), budget.fail_on)


def failing_findings(findings: Iterable[Finding], fail_on: str) -> tuple[Finding, ...]:
    """The findings at or above the ``fail_on`` severity (none for ``never``)."""
    if fail_on == "never":
        return ()
    threshold = Severity(fail_on).rank
    return tuple(f for f in findings if f.severity.rank >= threshold)


def report_findings(report: Report) -> tuple[Finding, ...]:
    """Every finding in a report (model flags, then block flags), each once."""
    seen: dict[tuple[str, str | None, str, str], Finding] = {}
    for f in (*report.findings, *(f for block in report.blocks for f in block.findings)):
        seen.setdefault((f.code, f.block, f.severity.value, f.message), f)
    return tuple(seen.values())


def evaluate(report: Report, budget: Budget,
             baseline: Mapping[str, float | None] | None = None) -> GateOutcome:
    """The gate's verdict on a report, with how many ops that can be attention are in no
    block and how many declared layout attributes the blocks contradict."""
    outcome = evaluate_metrics(metric_values(report), budget, baseline,
                               report_findings(report))
    return replace(outcome, unread_cores=len(report.coverage.unread_cores),
                   declared_mismatch=len(report.coverage.declared_mismatch))
