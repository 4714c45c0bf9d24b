"""Inputs are never outputs: an output naming any file mhaudit reads is exit 2, nothing replaced."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hostile_helpers import TINY_LLAMA, assert_one_error, invoke, model_file, snapshot

GOOD_BODY = "def build_model():\n    return Attention()\n"


def _unchanged(tmp_path: Path, *args: str | Path, code: int = 2, needle: str = "") -> None:
    before = snapshot(tmp_path)
    run = invoke(*args)
    assert_one_error(run, code, "never writes over a file it reads", needle)
    assert run.stdout == ""
    assert snapshot(tmp_path) == before


def test_report_output_onto_the_model_file(tmp_path: Path, model: Path) -> None:
    _unchanged(tmp_path, "report", model, "--output", model, needle="model file")


def test_report_output_onto_the_model_file_named_with_a_factory(tmp_path: Path,
                                                               model: Path) -> None:
    _unchanged(tmp_path, "report", f"{model}:build_model", "--output", model)


def test_report_output_through_another_spelling(tmp_path: Path, model: Path) -> None:
    (tmp_path / "sub").mkdir()
    _unchanged(tmp_path, "report", model, "--output", tmp_path / "sub" / ".." / "model.py")


def test_report_output_onto_a_hard_link_of_the_model(tmp_path: Path, model: Path) -> None:
    os.link(model, tmp_path / "copy.py")
    _unchanged(tmp_path, "report", model, "--output", tmp_path / "copy.py")


def test_report_output_onto_a_symlink_to_the_model(tmp_path: Path, model: Path) -> None:
    (tmp_path / "link.txt").symlink_to(model)
    _unchanged(tmp_path, "report", model, "--output", tmp_path / "link.txt")


def test_report_output_onto_the_second_target(tmp_path: Path, model: Path) -> None:
    other = model_file(tmp_path, GOOD_BODY, "other.py")
    _unchanged(tmp_path, "report", model, other, "--format", "json", "--output", other)


def test_report_output_onto_the_config(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA), encoding="utf-8")
    _unchanged(tmp_path, "report", config, "--format", "json", "--output", config)


def test_report_output_onto_the_config_of_a_model_folder(tmp_path: Path) -> None:
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA), encoding="utf-8")
    _unchanged(tmp_path, "report", folder, "--output", folder / "config.json")


def test_report_output_onto_pyproject(tmp_path: Path, model: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.mhaudit]\nignore = []\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    _unchanged(tmp_path, "report", model, "--output", "pyproject.toml", needle="settings file")


def test_check_output_onto_the_budget(tmp_path: Path, model: Path, budget: Path) -> None:
    _unchanged(tmp_path, "check", model, "--budget", budget, "--output", budget,
               needle="budget file")


def test_check_output_onto_the_baseline_without_update(tmp_path: Path, model: Path,
                                                       budget: Path) -> None:
    baseline = tmp_path / "baseline.json"
    baseline.write_text('{"schema_version": 1, "totals": {}}', encoding="utf-8")
    _unchanged(tmp_path, "check", model, "--budget", budget, "--baseline", baseline,
               "--format", "json", "--output", baseline, needle="baseline")


def test_check_update_baseline_onto_the_model_file(tmp_path: Path, model: Path,
                                                   budget: Path) -> None:
    _unchanged(tmp_path, "check", model, "--budget", budget, "--baseline", model,
               "--update-baseline", needle="model file")


def test_check_output_onto_the_model_file(tmp_path: Path, model: Path, budget: Path) -> None:
    _unchanged(tmp_path, "check", model, "--budget", budget, "--format", "junit",
               "--output", model)


def test_check_output_onto_pyproject_budget(tmp_path: Path, model: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.mhaudit.budget]\nmax_params = "1M"\n',
                                             encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    _unchanged(tmp_path, "check", model, "--output", tmp_path / "pyproject.toml")


def test_whatif_output_onto_the_model_file(tmp_path: Path, model: Path) -> None:
    _unchanged(tmp_path, "whatif", model, "--output", model)


def test_whatif_plot_and_output_on_one_file_is_refused(tmp_path: Path) -> None:
    before = snapshot(tmp_path)
    run = invoke("whatif", "--d-model", "64", "--heads", "4", "--output", tmp_path / "x.png",
                 "--plot", tmp_path / "x.png")
    assert_one_error(run, 2, "both name")
    assert snapshot(tmp_path) == before


def test_update_baseline_still_writes_the_baseline(tmp_path: Path, model: Path,
                                                   budget: Path) -> None:
    baseline = tmp_path / "baseline.json"
    run = invoke("check", model, "--budget", budget, "--baseline", baseline, "--update-baseline")
    assert run.code == 0, run.stderr
    assert json.loads(baseline.read_text(encoding="utf-8"))["schema_version"] == 1
