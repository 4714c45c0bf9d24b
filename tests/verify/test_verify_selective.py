"""``--verify --train --checkpointing selective``: the reference step checkpoints alike."""

from __future__ import annotations

import pytest
import torch

import mhaudit
from mhaudit.data import Agreement, Report
from tests.parallel.korthikanti import KorthikantiStack


def _step_row(report: Report) -> Agreement:
    assert report.verification is not None
    (row,) = [r for r in report.verification.rows if r.figure == "training step peak bytes"]
    return row


@pytest.mark.slow
def test_selective_agrees_with_a_real_selective_step() -> None:
    with torch.device("meta"):
        model = KorthikantiStack(4, 64, 4)
    report = mhaudit.audit(model, (torch.zeros(2, 64, 64, device="meta"),), train=True,
                           checkpointing="selective", verify=True)
    row = _step_row(report)
    assert row.ours == row.reference, row  # 6,405,384 B both
    assert "selective activation checkpointing" in row.how


@pytest.mark.slow
def test_selective_on_a_fused_kernel_agrees_with_the_plain_step() -> None:
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=128))
        ids = torch.zeros(2, 64, dtype=torch.long)
    report = mhaudit.audit(model, {"input_ids": ids, "labels": ids}, train=True,
                           checkpointing="selective", verify=True)
    assert report.training is not None and "changes nothing" in report.training.convention
    row = _step_row(report)
    assert row.agrees and abs(row.difference) <= 0.001, row
