"""Targets do not leak into each other; several targets always give the JSON list; SARIF URIs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest
import torch
from hostile_helpers import invoke, model_file

GOOD_BODY = "def build_model():\n    return Attention()\n"


def _pair(tmp_path: Path, first: str, second: str = GOOD_BODY) -> tuple[Path, Path]:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    return (model_file(tmp_path / "a", first, "a.py"), model_file(tmp_path / "b", second, "b.py"))


def _reports(tmp_path: Path, *targets: Path) -> list[dict[str, object]]:
    run = invoke("report", *targets, "--format", "json")
    assert run.code == 0, run.stderr
    data = json.loads(run.stdout)
    assert isinstance(data, list)
    return data


def test_default_dtype_set_by_one_target_does_not_reach_the_next(tmp_path: Path) -> None:
    a, b = _pair(tmp_path, "torch.set_default_dtype(torch.float64)\n" + GOOD_BODY)
    second = _reports(tmp_path, a, b)[1]
    assert "float64" not in json.dumps(second["model"]), second["model"]
    assert torch.get_default_dtype() == torch.float32


def test_grad_mode_turned_off_by_one_target_is_restored(tmp_path: Path) -> None:
    check = "assert torch.is_grad_enabled(), 'grad mode leaked'\n" + GOOD_BODY
    a, b = _pair(tmp_path, "torch.set_grad_enabled(False)\n" + GOOD_BODY, check)
    _reports(tmp_path, a, b)
    assert torch.is_grad_enabled()


def test_default_device_set_by_one_target_is_restored(tmp_path: Path) -> None:
    check = "assert torch.get_default_device().type == 'cpu', 'device leaked'\n" + GOOD_BODY
    a, b = _pair(tmp_path, "torch.set_default_device('meta')\n" + GOOD_BODY, check)
    _reports(tmp_path, a, b)
    assert torch.get_default_device().type == "cpu"


def test_deterministic_flags_set_by_one_target_are_restored(tmp_path: Path) -> None:
    a, b = _pair(tmp_path, "torch.use_deterministic_algorithms(True, warn_only=True)\n"
                 + GOOD_BODY)
    before = torch.are_deterministic_algorithms_enabled()
    _reports(tmp_path, a, b)
    assert torch.are_deterministic_algorithms_enabled() == before


def test_sibling_modules_of_one_target_do_not_shadow_the_next(tmp_path: Path) -> None:
    a, b = _pair(tmp_path, "import helper\nassert helper.WHO == 'a'\n" + GOOD_BODY,
                 "import helper\nassert helper.WHO == 'b', helper.WHO\n" + GOOD_BODY)
    (a.parent / "helper.py").write_text("WHO = 'a'\n", encoding="utf-8")
    (b.parent / "helper.py").write_text("WHO = 'b'\n", encoding="utf-8")
    _reports(tmp_path, a, b)


def _failing(tmp_path: Path) -> tuple[Path, Path]:
    return _pair(tmp_path, GOOD_BODY, "def build_model():\n    raise ValueError('broken b')\n")


def test_report_json_of_several_targets_lists_the_failed_one(tmp_path: Path) -> None:
    a, b = _failing(tmp_path)
    run = invoke("report", a, b, "--format", "json")
    assert run.code == 3
    data = json.loads(run.stdout)
    assert isinstance(data, list) and len(data) == 2
    assert data[0]["schema_version"] == 1
    assert data[1]["source"] == str(b) and data[1]["exit_code"] == 3
    assert "broken b" in data[1]["error"]


def test_check_json_of_several_targets_lists_the_failed_one(tmp_path: Path) -> None:
    a, b = _failing(tmp_path)
    budget = tmp_path / "budget.toml"
    budget.write_text('[budget]\nmax_params = "1M"\n', encoding="utf-8")
    run = invoke("check", b, a, "--budget", budget, "--format", "json")
    assert run.code == 3
    data = json.loads(run.stdout)
    assert data[0].get("exit_code") == 3
    assert len(data) == 2 and "exit_code" not in data[1]


def test_json_of_several_targets_that_all_fail_is_a_list(tmp_path: Path) -> None:
    bad = "def build_model():\n    raise ValueError('broken')\n"
    a, b = _pair(tmp_path, bad, bad)
    run = invoke("report", a, b, "--format", "json")
    assert run.code == 3
    assert [entry["exit_code"] for entry in json.loads(run.stdout)] == [3, 3]


def test_one_failing_target_in_json_prints_nothing(tmp_path: Path) -> None:
    model = model_file(tmp_path, "def build_model():\n    raise ValueError('broken')\n")
    run = invoke("report", model, "--format", "json")
    assert run.code == 3 and run.stdout == ""


@pytest.mark.parametrize("folder", ["my models", "a#b", "what?", "100%", "ü"])
def test_sarif_uris_are_rfc3986_references(tmp_path: Path, folder: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / folder).mkdir()
    model = model_file(tmp_path / folder, "class Wide(Attention):\n    pass\n\n"
                       "def build_model():\n    return Wide(d=48, h=3)\n")
    monkeypatch.chdir(tmp_path)
    run = invoke("report", Path(folder) / model.name, "--format", "sarif")
    assert run.code == 0, run.stderr
    uris = [loc["physicalLocation"]["artifactLocation"]
            for result in json.loads(run.stdout)["runs"][0]["results"]
            for loc in result.get("locations", [])]
    assert uris, "no located result"
    for artifact in uris:
        uri = artifact["uri"]
        assert re.fullmatch(r"[A-Za-z0-9\-._~/%]+", uri), uri
        assert unquote(uri).endswith(f"{folder}/model.py") or folder in unquote(uri)
        if not uri.startswith("/"):
            assert artifact["uriBaseId"] == "%SRCROOT%"
