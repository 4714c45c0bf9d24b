"""``--verify``: the audit's FLOPs and peak beside FlopCounterMode and MemTracker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from torch import nn

import mhaudit
from mhaudit.cli import main as cli
from mhaudit.data import Agreement
from tests.parallel.test_cli_parallel import MODEL


def test_agreement_arithmetic() -> None:
    # (110 - 100) / 100 = 10%: inside a 10% tolerance, outside 5%
    assert Agreement("x", 110, 100, "MemTracker", 0.10).agrees
    assert not Agreement("x", 110, 100, "MemTracker", 0.05).agrees
    assert Agreement("x", 0, 0, "FlopCounterMode", 0.0).difference == 0.0
    assert not Agreement("x", 1, 0, "FlopCounterMode", 0.0).agrees


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_gqa_sdpa_model_agrees_with_torch_on_meta(dtype: str) -> None:
    namespace: dict[str, object] = {}
    exec(MODEL, namespace)  # the tiny GQA model of the parallel CLI tests
    with torch.device("meta"):
        model = namespace["build_model"]()  # type: ignore[operator]
    assert isinstance(model, nn.Module)
    with torch.device("meta"):
        inputs = (torch.zeros(2, 16, 64),)
    report = mhaudit.audit(model, inputs, verify=True, dtype=dtype)
    checked = report.verification
    assert checked is not None and checked.agrees, checked
    (flops, peak) = checked.rows
    assert flops.tolerance == 0 and flops.ours == flops.reference  # SDPA counted by torch
    assert peak.counter == "MemTracker" and abs(peak.difference) <= 0.10


def test_cli_prints_agreement_and_the_json_carries_it(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    done = CliRunner().invoke(cli, ["report", str(path), "--verify"])
    assert done.exit_code == 0, done.output
    assert "matmul + conv flops" in done.stdout and "agrees" in done.stdout
    data = json.loads(CliRunner().invoke(cli, ["report", str(path), "--verify", "--format",
                                               "json"]).stdout)
    assert data["verification"]["agrees"] is True
    assert {r["counter"] for r in data["verification"]["rows"]} == {"FlopCounterMode",
                                                                   "MemTracker"}


def test_disagreement_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mhaudit.verify import checks

    path = tmp_path / "model.py"
    path.write_text(MODEL)
    real = checks._counted_flops
    monkeypatch.setattr(checks, "_counted_flops",
                        lambda *a: real(*a) + 1)  # torch counts one more
    done = CliRunner().invoke(cli, ["report", str(path), "--verify"])
    assert done.exit_code == 1
    assert "DISAGREES" in done.stdout and "--verify" in done.stderr
