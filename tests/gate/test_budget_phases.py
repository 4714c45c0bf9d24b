"""Budgets on the training and decode steps: parsing, values from reports and baselines."""

from __future__ import annotations

from typing import Any

import pytest

from mhaudit.gate.baseline import metric_values_from_dict
from mhaudit.gate.budget import evaluate_metrics, parse_budget, phases_needed
from mhaudit.render.gate import budget_message


def test_phase_budgets_parse_and_name_their_phase() -> None:
    budget = parse_budget({"max_train_peak_bytes": "40GiB", "max_decode_step_ms": 25,
                           "max_decode_kv_cache_bytes": "8GiB"})
    limits = {b.metric: b.limit for b in budget.limits}
    assert limits == {"train_peak_bytes": 40 * 2**30, "decode_step_ms": 25,
                      "decode_kv_cache_bytes": 8 * 2**30}
    assert phases_needed(budget) == {"train", "decode"}
    assert phases_needed(parse_budget({"max_params": "1M"})) == set()


def _report(training: dict[str, Any] | None, decode: dict[str, Any] | None) -> dict[str, Any]:
    data: dict[str, Any] = {"totals": {"flops": 10}}
    if training is not None:
        data["training"] = training
    if decode is not None:
        data["decode"] = decode
    return data


def test_values_come_from_the_phase_sections() -> None:
    values = metric_values_from_dict(_report({"peak_bytes": 123}, {
        "time_per_step_s": 0.0125, "kv_cache_bytes": 456}))
    assert values["train_peak_bytes"] == 123
    assert values["decode_step_ms"] == pytest.approx(12.5)
    assert values["decode_kv_cache_bytes"] == 456
    missing = metric_values_from_dict(_report(None, None))
    assert missing["train_peak_bytes"] is None and missing["decode_step_ms"] is None


def test_a_breach_and_a_missing_phase() -> None:
    budget = parse_budget({"max_decode_step_ms": 10, "max_train_peak_bytes": "1KiB"})
    values = metric_values_from_dict(_report(None, {"time_per_step_s": 0.02,
                                                    "kv_cache_bytes": 1}))
    outcome = evaluate_metrics(values, budget)
    by_metric = {r.metric: r for r in outcome.results}
    assert not by_metric["decode_step_ms"].passed
    assert "20 ms exceeds budget 10 ms" in budget_message(by_metric["decode_step_ms"])
    assert not by_metric["train_peak_bytes"].passed
    assert "add --train" in budget_message(by_metric["train_peak_bytes"])
