"""``--verify --parallel``: the analytic per-GPU figures beside torch's fake process group."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import mhaudit
from mhaudit.data import Report
from mhaudit.verify.plans import plan_checks

transformers = pytest.importorskip("transformers")


def _audit(plan: str) -> tuple[Report, torch.nn.Module, dict[str, torch.Tensor]]:
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=4, vocab_size=300)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
        ids = torch.zeros(2, 16, dtype=torch.long)
    inputs = {"input_ids": ids, "labels": ids}
    return mhaudit.audit(model, inputs, train=True, parallel=plan), model, inputs


def test_a_plan_torch_ran_meets_the_analytic_model_and_a_changed_one_does_not() -> None:
    report, model, inputs = _audit("tp=2,fsdp=2")
    states, sent = plan_checks(report, model, (), inputs)
    assert states.counter == "FSDPMemTracker" and sent.counter == "CommDebugMode"
    assert states.agrees and sent.agrees and states.ours == states.reference > 0
    # torch holding one more parameter byte per rank than the analytic model says
    assert report.training is not None and report.training.parallel is not None
    measured = report.training.parallel
    held = replace(measured.per_device_bytes, params=measured.per_device_bytes.params + 1)
    training = replace(report.training, parallel=replace(measured, per_device_bytes=held))
    (states, _) = plan_checks(replace(report, training=training), model, (), inputs)
    assert not states.agrees


def test_sp_and_hsdp_plans_torch_ran_meet_the_analytic_model_named_by_every_axis() -> None:
    report, model, inputs = _audit("tp=2,sp,fsdp=2,dp=2")
    states, sent = plan_checks(report, model, (), inputs)
    assert states.agrees and sent.agrees and sent.ours == sent.reference > 0
    assert "(tp=2,sp,fsdp=2,dp=2,pp=1)" in states.figure and "tp=2,sp" in sent.figure
    report, model, inputs = _audit("tp=2,sp")
    states, sent = plan_checks(report, model, (), inputs)
    assert states.counter == "MemTracker" and states.agrees and sent.agrees


def test_a_plan_only_the_analytic_model_answered_is_not_checked_and_says_why() -> None:
    report, model, inputs = _audit("tp=2,cp=2")
    (unchecked,) = plan_checks(report, model, (), inputs)
    assert "torch did not run it" in unchecked.reason and "cp=2" in unchecked.figure
