"""Budget parsing, validation, evaluation and baselines (no model is built here)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from mhaudit.data import (
    BudgetLimit,
    Finding,
    GateOutcome,
    ModelInfo,
    Report,
    Severity,
    Totals,
)
from mhaudit.errors import ConfigError
from mhaudit.gate.baseline import load_baseline, metric_values_from_dict, write_baseline
from mhaudit.gate.budget import (
    METRICS,
    Budget,
    evaluate_metrics,
    failing_findings,
    find_pyproject_budget,
    load_budget,
    metric_values,
    parse_budget,
    parse_quantity,
    report_findings,
)
from mhaudit.render.gate import budget_message

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ci"

# The seed textbook model: d = 64, h = 8 -> 4·64² + 4·64 = 16,640 parameters.
TEXTBOOK: dict[str, float | None] = {
    "params_total": 16_640,
    "attention_params": 16_640,
    "flops": 11_000_000,
    "kv_cache_bytes_per_token": 256,
    "peak_memory_bytes": None,
    "latency_ms": None,
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (20000, 20000),
        (2.5, 2.5),
        (0, 0),
        ("20000", 20000),
        ("20k", 20_000),
        ("20K", 20_000),
        ("16k", 16_000),
        ("1.5k", 1_500),
        ("125M", 125_000_000),
        ("2G", 2_000_000_000),
        ("3T", 3_000_000_000_000),
        ("1Ki", 1024),
        ("64KiB", 64 * 1024),
        ("1.5Mi", 1_572_864),
        ("2GiB", 2 * 1024**3),
        ("2 GiB", 2 * 1024**3),
        ("1TiB", 1024**4),
        ("512B", 512),
        ("1_000_000", 1_000_000),
        ("1e9", 1_000_000_000),
        (" 7M ", 7_000_000),
    ],
)
def test_quantity_suffixes(text: Any, expected: float) -> None:
    assert parse_quantity(text, "max_params") == expected


@pytest.mark.parametrize(
    "bad", ["abc", "-1", -1, True, "2GB x", "1kb", "1_.5", "", [1], float("inf"), float("nan")]
)
def test_bad_quantity_names_the_key(bad: Any) -> None:
    with pytest.raises(ConfigError) as err:
        parse_quantity(bad, "budget.max_flops", "b.toml")
    assert "budget.max_flops" in err.value.message
    assert "b.toml" in err.value.message
    assert "20k" in err.value.tip


def test_typo_key_is_named_with_a_suggestion() -> None:
    with pytest.raises(ConfigError) as err:
        parse_budget({"max_parms": 20000}, "budget.toml")
    assert "budget.max_parms" in err.value.message
    assert "budget.toml" in err.value.message
    assert "max_params" in err.value.tip
    assert err.value.exit_code == 2


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ({"max_flops": {"limt": "2G"}}, "budget.max_flops.limt"),
        ({"max_flops": {"severity": "warning"}}, "budget.max_flops"),
        ({"max_flops": {"limit": "2G", "severity": "fatal"}}, "budget.max_flops.severity"),
        ({"fail_on": "sometimes"}, "budget.fail_on"),
        ({"max_increase_percent": "ten"}, "budget.max_increase_percent"),
        ({"max_increase_percent": {"flop": 5}}, "budget.max_increase_percent.flop"),
        ({"max_latency_ms": "fast"}, "budget.max_latency_ms"),
    ],
)
def test_bad_values_name_the_key(table: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_budget(table, "budget.toml")
    assert named in err.value.message


def test_full_budget_parses() -> None:
    budget = parse_budget(
        {
            "max_params": "125M",
            "max_attention_params": 40_000_000,
            "max_flops": {"limit": "2G", "severity": "warning"},
            "max_kv_cache_bytes_per_token": "320KiB",
            "max_peak_activation_bytes": "1GiB",
            "max_peak_memory_bytes": "2GiB",
            "max_latency_ms": 12.5,
            "max_train_peak_bytes": "40GiB",
            "max_decode_step_ms": 25,
            "max_decode_kv_cache_bytes": "8GiB",
            "max_train_peak_bytes_per_device": "40GiB",
            "max_decode_peak_bytes_per_device": "60GiB",
            "max_train_comm_bytes_per_step": "100GiB",
            "fail_on": "warning",
            "max_increase_percent": {"default": 10, "flops": "5%", "max_params": 0},
        }
    )
    limits = {limit.metric: limit for limit in budget.limits}
    assert set(limits) == set(METRICS)
    assert limits["params_total"] == BudgetLimit("params_total", 125_000_000)
    assert limits["flops"] == BudgetLimit("flops", 2_000_000_000, Severity.WARNING)
    assert limits["kv_cache_bytes_per_token"].limit == 320 * 1024
    assert limits["peak_memory_bytes"].limit == 2 * 1024**3
    assert limits["latency_ms"].limit == 12.5
    assert budget.fail_on == "warning"
    assert budget.default_increase_percent == 10
    assert dict(budget.increase_percent) == {"flops": 5.0, "params_total": 0.0}


def test_sample_budget_in_examples_parses() -> None:
    budget = load_budget(EXAMPLES / "mhaudit-budget.toml")
    assert budget.fail_on == "error"
    assert {limit.metric for limit in budget.limits} >= {"params_total", "flops"}


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_malformed_toml_names_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "budget.toml", "[budget]\nmax_params = 20k\n")
    with pytest.raises(ConfigError) as err:
        load_budget(path)
    assert str(path) in err.value.message
    assert "TOML" in err.value.message
    assert "line 2" in err.value.message


def test_missing_budget_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_budget(tmp_path / "nope.toml")
    assert "nope.toml" in err.value.message
    assert err.value.exit_code == 2


def test_file_without_budget_table(tmp_path: Path) -> None:
    path = _write(tmp_path / "budget.toml", "max_params = 20000\n")
    with pytest.raises(ConfigError, match=r"no \[budget\] table"):
        load_budget(path)


def test_budget_file_may_use_the_tool_table(tmp_path: Path) -> None:
    path = _write(tmp_path / "pyproject.toml", '[tool.mhaudit.budget]\nmax_params = "20k"\n')
    assert load_budget(path).limits == (BudgetLimit("params_total", 20_000),)


def test_pyproject_discovery_walks_upward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "pyproject.toml", '[tool.mhaudit.budget]\nmax_params = "16k"\n')
    inner = tmp_path / "pkg" / "sub"
    inner.mkdir(parents=True)
    _write(tmp_path / "pkg" / "pyproject.toml", "[tool.other]\nx = 1\n")
    monkeypatch.chdir(inner)
    budget = load_budget()
    assert budget.limits == (BudgetLimit("params_total", 16_000),)
    assert budget.source == str(tmp_path.resolve() / "pyproject.toml")


def test_pyproject_typo_names_the_tool_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path / "pyproject.toml", "[tool.mhaudit.budget]\nmax_flop = 1\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_budget()
    assert "tool.mhaudit.budget.max_flop" in err.value.message
    assert "max_flops" in err.value.tip


def test_no_budget_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if find_pyproject_budget(tmp_path) is not None:
        pytest.skip("a pyproject.toml above the temp folder has a budget")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="no budget"):
        load_budget()


def _outcome(table: dict[str, Any], baseline: dict[str, float | None] | None = None,
             values: dict[str, float | None] | None = None) -> GateOutcome:
    return evaluate_metrics(values or TEXTBOOK, parse_budget(table), baseline)


@pytest.mark.parametrize(
    ("limit", "passed"),
    [(20000, True), ("20k", True), (16640, True), (10000, False), ("16k", False)],
)
def test_textbook_params_limit(limit: Any, passed: bool) -> None:
    outcome = _outcome({"max_params": limit})
    assert outcome.passed is passed
    (result,) = outcome.results
    assert result.metric == "params_total"
    assert result.actual == 16_640
    assert result.passed is passed


def test_breach_message_has_metric_limit_actual_and_delta() -> None:
    (result,) = _outcome({"max_params": "16k"}).results
    # 16,640 - 16,000 = +640, which is +4.0% of the limit.
    assert budget_message(result) == "params_total 16,640 exceeds budget 16,000 (+640, +4.0%)"


def test_within_message() -> None:
    (result,) = _outcome({"max_params": 20000}).results
    # 16,640 - 20,000 = -3,360, -16.8% of the limit.
    assert budget_message(result) == "params_total 16,640 within budget 20,000 (-3,360, -16.8%)"


def test_warning_severity_breach_does_not_fail_the_gate() -> None:
    outcome = _outcome({"max_flops": {"limit": "10M", "severity": "warning"}, "max_params": 20000})
    flops = next(r for r in outcome.results if r.metric == "flops")
    assert not flops.passed
    assert flops.severity is Severity.WARNING
    assert outcome.passed


def test_missing_measurement_fails_with_a_tip() -> None:
    (result,) = _outcome({"max_latency_ms": 5}).results
    assert not result.passed
    assert result.actual is None
    assert "--device" in budget_message(result)


def test_baseline_growth_global_and_per_metric() -> None:
    # d = 96: 4·96² + 4·96 = 37,248 parameters, +123.8% over 16,640.
    grown = {**TEXTBOOK, "params_total": 37_248, "attention_params": 37_248}
    outcome = _outcome({"max_increase_percent": 10}, baseline=TEXTBOOK, values=grown)
    assert not outcome.passed
    failed = {r.metric for r in outcome.results if not r.passed}
    assert failed == {"params_total", "attention_params"}
    params = next(r for r in outcome.results if r.metric == "params_total")
    assert params.baseline == 16_640
    assert params.limit == pytest.approx(18_304)  # 16,640 · 1.10
    assert params.delta_percent == pytest.approx(123.846, abs=1e-3)
    assert "baseline 16,640 +10% = 18,304" in budget_message(params)
    assert "+123.8% vs baseline" in budget_message(params)
    # Metrics the baseline lacks (latency, peak memory) are not checked.
    assert {r.metric for r in outcome.results} == {
        "params_total", "attention_params", "flops", "kv_cache_bytes_per_token"}
    per_metric = _outcome({"max_increase_percent": {"flops": 5}}, baseline=TEXTBOOK, values=grown)
    assert per_metric.passed
    assert [r.metric for r in per_metric.results] == ["flops"]


def test_tighter_of_limit_and_baseline_binds() -> None:
    outcome = _outcome({"max_params": {"limit": "1M", "max_increase_percent": 0}},
                       baseline={**TEXTBOOK, "params_total": 16_000})
    (result,) = outcome.results
    assert result.limit == 16_000
    assert not result.passed


def _finding(code: str, severity: Severity, block: str | None = "attn") -> Finding:
    return Finding(code, "some-rule", severity, f"{code} message", "fix it", block)


@pytest.mark.parametrize(
    ("fail_on", "codes"),
    [("error", ["E"]), ("warning", ["E", "W"]), ("info", ["E", "W", "I"]), ("never", [])],
)
def test_fail_on_threshold(fail_on: str, codes: list[str]) -> None:
    flags = [_finding("E", Severity.ERROR), _finding("W", Severity.WARNING),
             _finding("I", Severity.INFO)]
    assert [f.code for f in failing_findings(flags, fail_on)] == codes
    outcome = evaluate_metrics(TEXTBOOK, Budget(fail_on=fail_on), None, flags)
    assert outcome.passed is (not codes)


def _report(**totals: Any) -> Report:
    base: dict[str, Any] = {
        "num_blocks": 1, "attention_params": 16_640, "params_total": 16_640,
        "attention_params_share": 1.0, "flops": 11_000_000, "attention_flops": 11_000_000,
        "kv_cache_bytes_per_token": 256, "param_bytes": 33_280,
    }
    info = ModelInfo("m.py", "MHA", 16_640, "export", "meta", "bfloat16", {})
    flag = _finding("MHA005", Severity.WARNING)
    return Report(info, (), Totals(**{**base, **totals}), (flag, flag))


def test_metric_values_from_report() -> None:
    values = metric_values(_report(peak_activation_bytes=1_000))
    assert values["params_total"] == 16_640
    assert values["peak_memory_bytes"] == 1_000 + 33_280  # activations + parameter bytes
    assert values["latency_ms"] is None
    measured = metric_values(_report(peak_activation_bytes=1_000, measured_peak_memory_bytes=5))
    assert measured["peak_memory_bytes"] == 5
    assert metric_values(_report())["peak_memory_bytes"] is None
    # the report's own estimate, parameters + buffers + activations, is what the gate bounds
    estimated = metric_values(_report(peak_activation_bytes=1_000, peak_memory_bytes=34_400,
                                      measured_peak_memory_bytes=5))
    assert estimated["peak_memory_bytes"] == 34_400
    assert estimated["peak_activation_bytes"] == 1_000


def test_report_findings_counts_each_flag_once() -> None:
    assert len(report_findings(_report())) == 1


def _report_json(**totals: Any) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "model": {"source": "m.py", "params_total": 16_640},
        "totals": {"params_total": 16_640, "attention_params": 16_640, "flops": 11_000_000,
                   "kv_cache_bytes_per_token": 256, "param_bytes": 33_280,
                   "peak_activation_bytes": 1_000, "measured_peak_memory_bytes": None,
                   "latency_ms": None, **totals},
    }


def test_baseline_round_trip_is_atomic(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    path.write_text("old", encoding="utf-8")
    write_baseline(_report_json(), path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["baseline.json"]
    values = load_baseline(path)
    assert values == {
        "params_total": 16_640, "attention_params": 16_640, "flops": 11_000_000,
        "kv_cache_bytes_per_token": 256, "peak_activation_bytes": 1_000,
        "peak_memory_bytes": 34_280, "latency_ms": None,
        "train_peak_bytes": None, "decode_step_ms": None, "decode_kv_cache_bytes": None,
        "train_peak_bytes_per_device": None, "decode_peak_bytes_per_device": None,
        "train_comm_bytes_per_step": None,
    }
    current = {**TEXTBOOK, "peak_activation_bytes": 1_000, "peak_memory_bytes": 34_280}
    outcome = evaluate_metrics(current,
                               parse_budget({"max_increase_percent": 0}), values)
    assert outcome.passed


def test_baseline_falls_back_to_model_and_budget_sections() -> None:
    data = _report_json(params_total=None, latency_ms=None)
    data["budget"] = {"metrics": {"latency_ms": 3.5}}
    values = metric_values_from_dict(data)
    assert values["params_total"] == 16_640
    assert values["latency_ms"] == 3.5


@pytest.mark.parametrize(
    ("content", "match"),
    [(None, "cannot read baseline"), ("{not json", "not valid JSON"), ("[1]", "not a JSON object"),
     ('{"totals": 3}', "not an mhaudit JSON report"),
     ('{"totals": {"flops": "many"}}', "flops")],
)
def test_bad_baselines(tmp_path: Path, content: str | None, match: str) -> None:
    path = tmp_path / "baseline.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=match) as err:
        load_baseline(path)
    assert "baseline.json" in err.value.message


def test_json_dump_of_values_is_plain() -> None:
    assert json.loads(json.dumps(metric_values(_report())))["flops"] == 11_000_000


def test_new_baseline_is_readable_by_others(tmp_path: Path) -> None:
    path = tmp_path / "fresh.json"
    write_baseline(_report_json(), path)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # not a temp file's 0600


def test_unwritable_baseline_folder_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot write"):
        write_baseline(_report_json(), tmp_path / "missing" / "baseline.json")
