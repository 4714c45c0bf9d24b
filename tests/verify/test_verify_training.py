"""``--verify --train``: the step's peak beside MemTracker on one real CPU step."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from torch import nn

import mhaudit
from mhaudit.cli import main as cli
from mhaudit.data import Agreement, Report

transformers = pytest.importorskip("transformers")


def _gpt2() -> nn.Module:
    # dropout 0.1 as GPT-2 ships: the target's cuDNN kernel keeps no scores
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=4, n_embd=64, n_head=4, vocab_size=500, n_positions=128))


def _llama() -> nn.Module:
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=2, vocab_size=500, max_position_embeddings=256))


def _audit(build: Callable[[], nn.Module], device: str = "meta", **options: Any) -> Report:
    with torch.device(device):
        model = build()
        ids = torch.zeros(2, 64, dtype=torch.long)
    return mhaudit.audit(model, {"input_ids": ids, "labels": ids}, train=True, verify=True,
                         **options)


def _step_row(report: Report) -> Agreement:
    assert report.verification is not None and report.training is not None
    (row,) = [r for r in report.verification.rows if r.figure == "training step peak bytes"]
    return row


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
@pytest.mark.parametrize("build", [_gpt2, _llama], ids=["gpt2", "llama"])
def test_the_training_peak_agrees_with_a_real_step(build: Callable[[], nn.Module],
                                                   optimizer: str) -> None:
    report = _audit(build, optimizer=optimizer)
    row = _step_row(report)
    assert report.training is not None
    assert row.counter == "MemTracker" and row.tolerance == 0.05
    assert row.agrees and abs(row.difference) <= 0.001, row
    # the CPU keeps AdamW's step counters with the rest: the report's peak plus them
    counters = 4 * len(list(build().parameters())) if optimizer == "adamw" else 0
    assert report.training.host_state_bytes == counters
    assert row.ours == report.training.peak_bytes + counters
    assert f"real steady-state {optimizer} step" in row.how
    assert "values drawn at random" in row.how  # built on meta: no values to copy


@pytest.mark.slow
@pytest.mark.parametrize("options", [{"precision": "bf16-mixed"}, {"checkpointing": "layers"}],
                         ids=["bf16-mixed", "checkpointing"])
def test_the_report_options_reach_the_real_step(options: dict[str, str]) -> None:
    # GPT-2's dropout with checkpointing: SDPA recomputes as the fused kernel it ran as
    report = _audit(_gpt2, **options)
    row = _step_row(report)
    assert row.agrees, row
    assert f"({options.get('precision', 'fp32')}," in row.how
    if "checkpointing" in options:
        assert "torch.utils.checkpoint" in row.how and "flash kernel" in row.how


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("build", [_gpt2, _llama], ids=["gpt2", "llama"])
def test_checkpointing_agrees_with_a_real_step(build: Callable[[], nn.Module],
                                              optimizer: str) -> None:
    # the cache is off, as transformers turns it off to checkpoint: on fake position ids
    # transformers cannot tell the sequences are not packed and would build the causal
    # mask (and repeat Llama's K/V for it), which a real step never does (+2.2% on Llama)
    report = _audit(build, optimizer=optimizer, checkpointing="layers")
    row = _step_row(report)
    assert report.training is not None and report.training.checkpointing == "layers"
    assert abs(row.difference) <= 0.001, row


@pytest.mark.slow
def test_a_real_model_is_left_as_it_was() -> None:
    torch.manual_seed(0)
    model = _llama()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.randint(0, 500, (2, 32))
    report = mhaudit.audit(model, {"input_ids": ids, "labels": ids}, train=True, verify=True,
                           optimizer="adamw")
    assert _step_row(report).agrees and "the model's own values" in _step_row(report).how
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in model.parameters()) and model.training


def test_a_step_over_the_limit_is_not_run_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from mhaudit.verify import training

    monkeypatch.setattr(training, "STEP_LIMIT_BYTES", 1024)
    monkeypatch.setattr(training, "memtracker_step", lambda *a, **k: pytest.fail("ran"))
    report = _audit(_gpt2)
    checked = report.verification
    assert checked is not None and checked.agrees  # not checked is no disagreement
    (unchecked,) = checked.unchecked
    assert unchecked.figure == "training step peak bytes"
    assert "over the 1 KiB limit" in unchecked.reason
    assert all(r.figure != unchecked.figure for r in checked.rows)


@pytest.mark.slow
def test_cli_reports_the_step_and_fails_on_disagreement(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "model.py"
    path.write_text(
        "import torch, transformers\n"
        "def build_model():\n"
        "    return transformers.LlamaForCausalLM(transformers.LlamaConfig(hidden_size=64,"
        " intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,"
        " num_key_value_heads=2, vocab_size=100))\n"
        "def example_inputs():\n"
        "    ids = torch.zeros(1, 32, dtype=torch.long)\n"
        "    return {'input_ids': ids, 'labels': ids}\n")
    done = CliRunner().invoke(cli, ["report", str(path), "--train", "--optimizer", "sgd",
                                    "--verify", "--format", "json"])
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout)["verification"]["rows"]
    step = next(r for r in rows if r["figure"] == "training step peak bytes")
    assert step["agrees"] and step["tolerance"] == 0.05

    from mhaudit.verify import training

    real = training.memtracker_step
    monkeypatch.setattr(training, "memtracker_step", lambda *a, **k: {
        **real(*a, **k), "Total": real(*a, **k)["Total"] * 9 // 10})  # torch sees 10% less
    done = CliRunner().invoke(cli, ["report", str(path), "--train", "--verify"])
    assert done.exit_code == 1
    assert "training step peak bytes" in done.stdout and "DISAGREES" in done.stdout
