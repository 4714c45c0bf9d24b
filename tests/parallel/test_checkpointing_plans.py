"""Activation checkpointing in the plan model: none, selective and full (Korthikanti et al.
2022, table 2), from one training step; GPT-3 175B at t = 8 with SP and selective
recomputation, beside torch's count on a two-layer copy."""

from __future__ import annotations

import pytest
import torch
from fixtures.blocks import make_block

import mhaudit
from mhaudit.cost.devices import get_profile
from mhaudit.cost.stepspec import TRAIN, StepSpec
from mhaudit.data import ParallelPlan
from mhaudit.errors import ConfigError
from mhaudit.parallel import analytic, plan_costs
from tests.parallel import gpt3
from tests.parallel.korthikanti import KorthikantiStack

H100 = get_profile("h100")
SPEC = StepSpec(TRAIN, 2, 2, "adamw", batch=1, tokens=128, context=0,
                activation_bytes=None, flops=0)


def test_each_mode_per_layer() -> None:
    block = make_block(heads=8, head_dim=64, seq=128, implementation="eager", dtype="bfloat16")
    # s·b·h = 128·1·512 = 65,536; scores 5·a·s²·b = 5·8·128² = 655,360 (16-bit bytes)
    assert analytic.korthikanti_bytes(block, 1, 2, checkpointing="none") == (
        24 * 65536 + 655360, 655360)
    # selective: the score term goes, 24·s·b·h split and 10·s·b·h whole: 34·s·b·h in all
    assert analytic.korthikanti_bytes(block, 1, 2, checkpointing="selective") == (1572864, 655360)
    # full (layers): the layer's input alone, 2·s·b·h = 131,072, whole on every rank
    assert analytic.korthikanti_bytes(block, 1, 2, checkpointing="full") == (0, 131072)
    assert analytic.korthikanti_bytes(block, 1, 2, checkpointing="layers") == (0, 131072)
    per_rank = {(m, sp): analytic.activation_bytes([block], SPEC, ParallelPlan(tp=8, sp=sp), m)
                for m in ("none", "selective", "full") for sp in (False, True)}
    assert per_rank["selective", True] == 34 * 65536 // 8  # 278,528
    assert per_rank["selective", False] == 1572864 // 8 + 655360  # 851,968
    assert per_rank["full", True] == 131072 // 8  # 16,384
    assert per_rank["full", False] == 131072  # Megatron keeps the input whole without SP


def test_gpt3_175b_selective_at_t8_with_sp() -> None:
    with torch.device("meta"):
        model, inputs = gpt3.build_model(), gpt3.example_inputs()
    blocks = mhaudit.audit(model, inputs, dtype="bfloat16").blocks
    assert len(blocks) == gpt3.LAYERS == 96
    cost = plan_costs(model, inputs, {}, blocks, "tp=8,sp", H100, precision="bf16",
                      checkpointing="selective")
    # Korthikanti et al.: 34·s·b·h/t = 34·2048·1·12288/8 = 106,954,752 B per layer per rank
    per_layer = cost.per_device_bytes.activations / 96
    assert per_layer == pytest.approx(106954752, rel=0.02)
    assert cost.source == "analytic" and "checkpointing selective" in cost.notes[0]
    # beside it, torch's count: the training step under torch's selective activation
    # checkpointing on a two-layer copy, what each layer saves for the backward over t.
    # It is 46·s·b·h, not 34: torch's SAC keeps every output it does not recompute,
    # read by the backward or not (P·V's and O's outputs, both residual dropouts' outputs
    # and the MLP's down projection, 5 × 2·s·b·h), and on CPU tensors each of the two
    # dropout masks is bf16, 2 bytes, where the paper's is 1 (+2·s·b·h): 34 + 10 + 2
    with torch.device("meta"):
        reduced = gpt3.build_reduced()
    training = mhaudit.audit(reduced, inputs, dtype="bfloat16", train=True, precision="bf16",
                             checkpointing="selective", gpu="h100").training
    assert training is not None
    torch_per_layer = [b.saved_bytes / 8 for b in training.blocks]
    sbh = 2048 * 12288
    # 46·s·b·h/8 = 144,703,488 B per layer per rank, and the layer norms' fp32 statistics
    assert torch_per_layer == [pytest.approx(46 * sbh / 8, rel=1e-4)] * 2
    assert torch_per_layer[0] / per_layer == pytest.approx(46 / 34, rel=1e-3)  # 1.353


def _stack_training(checkpointing: str) -> tuple[object, tuple[torch.Tensor], object]:
    with torch.device("meta"):
        model = KorthikantiStack(2, 64, 4)
    x = (torch.zeros(2, 64, 64, device="meta"),)
    report = mhaudit.audit(model, x, train=True, checkpointing=checkpointing, gpu="h100")
    return model, x, report


def test_one_training_step_serves_every_mode() -> None:
    model, x, report = _stack_training("none")
    training = report.training
    assert training is not None and training.peak_phase != "optimizer"
    costs = {m: plan_costs(model, x, {}, report.blocks, "tp=2,sp", H100, training=training,
                           checkpointing=m) for m in ("none", "selective", "full")}
    acts = {m: c.per_device_bytes.activations for m, c in costs.items()}
    # none: the measured activations over t = 2
    assert acts["none"] == training.breakdown.activations // 2
    # selective: the measured ones less the score tensors the blocks saved, over t:
    # each block 2·4·64·64·(4 + 4 + 4) = 393,216 B (softmax out, dropout mask and out, fp32)
    scores = sum(b.scores_saved_bytes for b in training.blocks)
    assert scores == 2 * 393216
    assert acts["selective"] == (training.breakdown.activations - scores) // 2
    # full from a step without checkpointing: the paper's count, 2·s·b·h per layer at
    # 16 bits scaled to fp32: 2·(2·64·64)·2·2 layers = 65,536, over t = 2
    assert acts["full"] == 65536 // 2
    assert acts["none"] > acts["selective"] > acts["full"]
    # the training step's own mode by default
    assert plan_costs(model, x, {}, report.blocks, "tp=2,sp", H100, training=training
                      ).per_device_bytes.activations == acts["none"]
    with pytest.raises(ConfigError, match="unknown checkpointing 'some'"):
        plan_costs(model, x, {}, report.blocks, "tp=2,sp", H100, checkpointing="some")


def test_a_plan_with_checkpointing_is_not_run_by_torch() -> None:
    model, x, report = _stack_training("selective")
    cost = plan_costs(model, x, {}, report.blocks, "tp=2", H100, training=report.training)
    # torch's run of the plan recomputes nothing; the analytic model answers
    assert cost.source == "analytic"
    assert any("does not recompute (selective checkpointing asked)" in n for n in cost.notes)


def test_recomputation_costs_time_and_not_mfu() -> None:
    """Full recomputation runs every layer's forward again: 4/3 of the step's FLOPs;
    selective runs the attention cores' forward again. MFU counts the model's FLOPs only,
    so it falls by the same factor as the step grows."""
    model = KorthikantiStack(2, 64, 4)
    x = torch.zeros(2, 32, 64)  # (b, s, h)
    report = mhaudit.audit(model, (x,))
    costs = {m: plan_costs(model, (x,), {}, report.blocks, "tp=2", H100, "train",
                           checkpointing=m, use_torch=False)
             for m in ("none", "selective", "layers")}
    none, selective, layers = costs["none"], costs["selective"], costs["layers"]
    assert none.mfu is not None and layers.mfu is not None and selective.mfu is not None
    assert layers.step_time_s > selective.step_time_s > none.step_time_s
    # the same model work over a longer step: MFU falls in proportion
    assert layers.mfu * layers.step_time_s == pytest.approx(none.mfu * none.step_time_s)
    assert selective.mfu * selective.step_time_s == pytest.approx(none.mfu * none.step_time_s)
