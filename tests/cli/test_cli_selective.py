"""``--checkpointing selective`` on ``report --train``, with a plan: accepted, carried into the
JSON, and costed by the plan model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mhaudit.cli import main

MODEL = """
import torch
from tests.parallel.korthikanti import KorthikantiStack

def build_model():
    return KorthikantiStack(2, 64, 4)

def example_inputs():
    return (torch.zeros(1, 32, 64),)
"""


@pytest.mark.slow
def test_report_train_selective_with_a_plan(tmp_path: Path) -> None:
    model = tmp_path / "paper_layer.py"
    model.write_text(MODEL, encoding="utf-8")
    result = CliRunner().invoke(main, [
        "report", str(model), "--train",
        "--checkpointing", "selective", "--parallel", "tp=2,sp", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    training = json.loads(result.stdout)["training"]
    assert training["checkpointing"] == "selective"
    assert all(b["scores_saved_bytes"] == 0 for b in training["blocks"])
    assert any("checkpointing selective" in n for n in training["parallel"]["notes"])


def test_the_help_names_selective() -> None:
    result = CliRunner().invoke(main, ["report", "--help"])
    assert "selective" in result.stdout and "Korthikanti" in result.stdout
