"""Budgets and baselines that must not slip through the gate: each one a clear exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hostile_helpers import assert_one_error, invoke, model_file, snapshot


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return model_file(tmp_path, "def build_model():\n    return Attention()\n")


def _budget(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "budget.toml"
    path.write_text(f"[budget]\n{body}\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("max_params = " + "9" * 350, "absurdly large"),
        ('max_params = "' + "9" * 350 + '"', "absurdly large"),
        ('max_params = "20kB"', "not counted in bytes"),
        ('max_flops = "2GB"', "not counted in bytes"),
        ("", "empty"),
        ("max_latency_ms = 20", "meta device"),
        ('max_increase_percent = "10kB"', "percentage"),
    ],
)
def test_bad_budgets_exit_2(model: Path, tmp_path: Path, body: str, needle: str) -> None:
    assert_one_error(invoke("check", model, "--budget", _budget(tmp_path, body)), 2, needle)


def _baseline(tmp_path: Path, model: Path, change: dict[str, Any] | None = None,
              text: str | None = None) -> Path:
    path = tmp_path / "baseline.json"
    budget = _budget(tmp_path, "max_increase_percent = 10")
    written = invoke("check", model, "--budget", budget, "--baseline", path, "--update-baseline")
    assert written.code == 0, written.stderr
    if text is not None:
        path.write_text(text, encoding="utf-8")
    elif change:
        data = json.loads(path.read_text(encoding="utf-8"))
        for dotted, value in change.items():
            node = data
            *parents, last = dotted.split(".")
            for key in parents:
                node = node[key]
            node[last] = value
        path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"schema_version": 99}, "schema_version 99"),
        ({"totals.params_total": -5}, "finite value >= 0"),
        ({"model.source": "other_model.py"}, "--allow-other-model"),
        ({"model.class": "SomethingElse"}, "SomethingElse"),
    ],
)
def test_bad_baselines_exit_2(model: Path, tmp_path: Path, change: dict[str, Any],
                              needle: str) -> None:
    baseline = _baseline(tmp_path, model, change)
    budget = _budget(tmp_path, "max_increase_percent = 10")
    before = snapshot(tmp_path)
    run = invoke("check", model, "--budget", budget, "--baseline", baseline)
    assert_one_error(run, 2, needle)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("constant", ["Infinity", "NaN", "-Infinity"])
def test_non_finite_baselines_exit_2(model: Path, tmp_path: Path, constant: str) -> None:
    baseline = _baseline(tmp_path, model)
    text = baseline.read_text(encoding="utf-8").replace('"params_total": 4224',
                                                        f'"params_total": {constant}', 1)
    baseline.write_text(text, encoding="utf-8")
    budget = _budget(tmp_path, "max_increase_percent = 10")
    assert_one_error(invoke("check", model, "--budget", budget, "--baseline", baseline), 2,
                     constant)


def test_another_models_baseline_is_accepted_when_allowed(model: Path, tmp_path: Path) -> None:
    baseline = _baseline(tmp_path, model, {"model.source": "other_model.py"})
    budget = _budget(tmp_path, "max_increase_percent = 10")
    run = invoke("check", model, "--budget", budget, "--baseline", baseline,
                 "--allow-other-model")
    assert run.code == 0, run.stderr


def test_output_and_baseline_on_one_file_is_refused(model: Path, tmp_path: Path) -> None:
    budget = _budget(tmp_path, 'max_params = "1M"')
    same = tmp_path / "same.json"
    run = invoke("check", model, "--budget", budget, "--baseline", same, "--update-baseline",
                 "--output", same)
    assert_one_error(run, 2, "two different files")
    assert not same.exists()
