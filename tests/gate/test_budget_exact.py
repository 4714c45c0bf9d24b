"""Budget arithmetic is exact: Decimal limits and growth, units per metric, magnitudes capped."""

from __future__ import annotations

import pytest

from mhaudit.errors import ConfigError
from mhaudit.gate.budget import MAX_QUANTITY, evaluate_metrics, parse_budget, parse_quantity


def test_growth_over_a_baseline_is_exact() -> None:
    # 1,000 · (1 + 0.1/100) = 1,001 exactly; in floats 1.001 · 1000 = 1000.9999999999999
    budget = parse_budget({"max_increase_percent": 0.1}, section="")
    outcome = evaluate_metrics({"params_total": 1001}, budget, {"params_total": 1000})
    assert outcome.passed
    assert evaluate_metrics({"params_total": 1002}, budget, {"params_total": 1000}).passed is False


def test_suffixes_are_exact_integers() -> None:
    assert parse_quantity("1.5Gi", "k") == 1_610_612_736  # 1.5 · 2**30
    assert parse_quantity("0.1k", "k") == 100  # not 100.00000000000001


@pytest.mark.parametrize("value", ["9" * 350, 10**31, "2e40", 1e300])
def test_absurd_magnitudes_are_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="absurdly large"):
        parse_quantity(value, "max_params")


def test_the_cap_itself_is_accepted() -> None:
    assert parse_quantity(MAX_QUANTITY, "max_flops") == MAX_QUANTITY


def test_bytes_suffix_only_for_byte_metrics() -> None:
    assert parse_budget({"max_kv_cache_bytes_per_token": "96KiB"}, section="").limits[0].limit \
        == 96 * 1024
    with pytest.raises(ConfigError, match="not counted in bytes"):
        parse_budget({"max_params": "20kB"}, section="")


def test_an_empty_budget_is_refused() -> None:
    with pytest.raises(ConfigError, match="empty"):
        parse_budget({}, section="")


def test_not_a_number_is_refused() -> None:
    with pytest.raises(ConfigError, match="finite"):
        parse_quantity(float("nan"), "max_params")
