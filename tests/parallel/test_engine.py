"""The plan as torch runs it on a fake world: per-rank states equal FSDPMemTracker's,
collectives equal CommDebugMode's, and the fake process group is always torn down."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from mhaudit.api import audit
from mhaudit.cost.devices import get_profile
from mhaudit.parallel import plan_costs
from mhaudit.parallel.roles import fsdp_units, tp_modules
from tests.parallel.torch_oracle import fsdp_states, tp_comm_counts

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

H100 = get_profile("h100")


def _llama(**config: int) -> tuple[torch.nn.Module, torch.Tensor]:
    cfg = transformers.LlamaConfig(**{
        "hidden_size": 256, "intermediate_size": 520, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 1003, **config})
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    return model, torch.zeros((2, 64), dtype=torch.long, device="meta")


@pytest.fixture(scope="module")
def llama() -> tuple[torch.nn.Module, torch.Tensor, tuple]:  # type: ignore[type-arg]
    model, ids = _llama()
    return model, ids, audit(model, (ids,)).blocks


def test_fsdp_states_equal_fsdp_mem_tracker(llama) -> None:  # type: ignore[no-untyped-def]
    model, ids, blocks = llama
    units = [u for u in fsdp_units(model, blocks) if u]
    ref = fsdp_states(model, ids, units, 8)
    got = plan_costs(model, (ids,), {}, blocks, "fsdp=8", H100, precision="fp32",
                     use_torch=False)
    held = got.per_device_bytes
    # 1,003 vocabulary rows pad to 1,008 over 8 ranks: the shards carry FSDP2's padding
    assert (held.params, held.grads, held.optimizer_states) == (
        ref["Sharded Param"], ref["Sharded Grad"], ref["OptState"])
    # gathered parameters at the peak: the root (not resharded) and a layer running plus
    # one prefetched, against FSDPMemTracker's unsharded parameters and all-gather buffers
    torch_temps = ref["peak Unsharded Param"] + ref["peak All Gather"]
    assert abs(held.temporaries - torch_temps) <= 0.05 * torch_temps
    assert got.source == "analytic"
    measured = plan_costs(model, (ids,), {}, blocks, "fsdp=8", H100, precision="fp32")
    assert measured.source == "torch.distributed"
    assert measured.per_device_bytes.params == held.params
    assert measured.comm_calls_per_step == got.comm_calls_per_step
    assert measured.comm_bytes_per_step == got.comm_bytes_per_step
    assert not dist.is_initialized()


def test_tp8_collectives_equal_comm_debug_mode(llama) -> None:  # type: ignore[no-untyped-def]
    model, ids, blocks = llama
    modules = tp_modules(model, blocks)
    assert {m.name.rsplit(".", 1)[1]: m.role for m in modules} == {
        "q_proj": "colwise", "k_proj": "colwise", "v_proj": "colwise", "o_proj": "rowwise",
        "gate_proj": "colwise", "up_proj": "colwise", "down_proj": "rowwise"}
    ref = tp_comm_counts(model, ids, {m.name: m.role for m in modules}, 8)
    got = plan_costs(model, (ids,), {}, blocks, "tp=8", H100, use_torch=False)
    # per layer: O and down all-reduce their outputs in the forward (2), Q, K, V, gate and up
    # their input gradients in the backward (5): 14 over 2 layers
    assert ref == {"c10d_functional.all_reduce": 14}
    assert got.comm_calls_per_step.all_reduce == 14 and got.comm_calls_per_step.total == 14
    # each is a (2, 64, 256) fp32 tensor, 131,072 B: a ring all-reduce over 8 sends
    # 2·7/8·131,072 = 229,376 B, 14 of them 3,211,264 B
    assert got.comm_bytes_per_step.all_reduce == 3211264
    measured = plan_costs(model, (ids,), {}, blocks, "tp=8", H100)
    assert measured.source == "torch.distributed"
    assert measured.comm_bytes_per_step == got.comm_bytes_per_step
    assert measured.per_device_bytes.params == got.per_device_bytes.params
    assert not dist.is_initialized()


def test_2d_plan_matches_torch(llama) -> None:  # type: ignore[no-untyped-def]
    model, ids, blocks = llama
    got = plan_costs(model, (ids,), {}, blocks, "tp=2,fsdp=4", H100, use_torch=False)
    measured = plan_costs(model, (ids,), {}, blocks, "tp=2,fsdp=4", H100)
    assert measured.source == "torch.distributed"
    for name in ("params", "grads", "optimizer_states"):
        assert getattr(measured.per_device_bytes, name) == getattr(got.per_device_bytes, name)
    assert measured.comm_calls_per_step == got.comm_calls_per_step
    assert measured.comm_bytes_per_step == got.comm_bytes_per_step


def test_bf16_mixed_gathers_bf16_and_reduces_fp32(llama) -> None:  # type: ignore[no-untyped-def]
    model, ids, blocks = llama
    got = plan_costs(model, (ids,), {}, blocks, "tp=2,fsdp=4", H100, precision="bf16-mixed",
                     use_torch=False)
    measured = plan_costs(model, (ids,), {}, blocks, "tp=2,fsdp=4", H100,
                          precision="bf16-mixed")
    assert measured.source == "torch.distributed"
    assert measured.comm_bytes_per_step == got.comm_bytes_per_step
    fp32 = plan_costs(model, (ids,), {}, blocks, "tp=2,fsdp=4", H100, use_torch=False)
    # the gathers and TP all-reduces move bf16, half of fp32; the gradients stay fp32
    sent, full = got.comm_bytes_per_step, fp32.comm_bytes_per_step
    assert 2 * sent.all_gather == full.all_gather and 2 * sent.all_reduce == full.all_reduce
    assert sent.reduce_scatter == full.reduce_scatter


def test_every_split_of_the_gpus(llama) -> None:  # type: ignore[no-untyped-def]
    from mhaudit.parallel import sweep_plans

    model, ids, blocks = llama
    costs = [plan_costs(model, (ids,), {}, blocks, plan, H100, use_torch=False)
             for plan in sweep_plans(16, max_tp=8)]
    assert [(c.plan.tp, c.plan.fsdp) for c in costs] == [(1, 16), (2, 8), (4, 4), (8, 2)]
    assert all(c.source == "analytic" and c.fits for c in costs)
    # more TP, fewer FSDP ranks: each rank holds more of the (replicated) embeddings and
    # head, so parameters per rank grow while TP traffic appears
    params = [c.per_device_bytes.params for c in costs]
    assert params == sorted(params) and costs[0].comm_bytes_per_step.all_reduce == 0


def test_unshardable_plans_fall_back_and_say_why(llama) -> None:  # type: ignore[no-untyped-def]
    model, ids, blocks = llama
    got = plan_costs(model, (ids,), {}, blocks, "tp=16", H100)
    assert got.source == "analytic" and any("t = 16" in n for n in got.notes)
    cp = plan_costs(model, (ids,), {}, blocks, "tp=2,cp=2", H100)
    assert cp.source == "analytic" and any("context" in n for n in cp.notes)


def test_fake_world_is_torn_down_after_a_failure() -> None:
    from mhaudit.data import ParallelPlan
    from mhaudit.parallel.world import fake_world

    with pytest.raises(ZeroDivisionError), fake_world(ParallelPlan(fsdp=4)):
        assert dist.get_world_size() == 4
        _ = 1 / 0
    assert not dist.is_initialized()


def test_a_model_torch_cannot_shard_falls_back_and_leaves_no_world() -> None:
    from fixtures.small_models import TextbookMHA, TinyGPT

    # the textbook module views its projections with a fixed head count, which the local
    # (split) widths of a TP rank cannot take: torch fails, the analytic model answers
    model = TextbookMHA(64, 8)
    x = torch.zeros(2, 16, 64)
    got = plan_costs(model, (x,), {}, audit(model, (x,)).blocks, "tp=2", H100)
    assert got.source == "analytic"
    assert any("torch could not run the plan" in n for n in got.notes), got.notes
    assert not dist.is_initialized()
    fsdp = plan_costs(model, (x,), {}, audit(model, (x,)).blocks, "fsdp=2", H100)
    assert fsdp.source == "torch.distributed"  # FSDP needs no change to the forward
    # torch sharded a meta copy: the user's model keeps its real, unsharded weights
    weight = model.q.weight
    assert type(weight) is torch.nn.Parameter and weight.device.type == "cpu"
    assert weight.shape == (64, 64)
    gpt = TinyGPT()
    ids = torch.zeros(1, 16, dtype=torch.long)
    fused = plan_costs(gpt, (ids,), {}, audit(gpt, (ids,)).blocks, "tp=2", H100)
    assert fused.source == "analytic" and any("fused" in n for n in fused.notes)


def test_torch_runs_give_torch_activations_beside_the_analytic(llama) -> None:  # type: ignore[no-untyped-def]
    model, ids, blocks = llama
    one = plan_costs(model, (ids,), {}, blocks, "fsdp=2", H100)
    split = plan_costs(model, (ids,), {}, blocks, "tp=2,fsdp=2", H100)
    assert one.source == split.source == "torch.distributed"
    assert one.analytic_activations is not None and split.analytic_activations is not None
    # FSDP leaves a rank's micro-batch whole; TP splits the column-wise outputs over t
    assert split.per_device_bytes.activations < one.per_device_bytes.activations
    assert split.analytic_activations < one.analytic_activations
    assert "activations" in split.notes[0]
    analytic = plan_costs(model, (ids,), {}, blocks, "tp=2,fsdp=2", H100, use_torch=False)
    assert analytic.analytic_activations is None
    assert analytic.per_device_bytes.activations == split.analytic_activations


def test_fake_inputs_take_the_weights_dtype() -> None:
    from mhaudit.fake.mode import FakeMode
    from mhaudit.parallel.engine import _fake_inputs

    with FakeMode(allow_non_fake_inputs=True):
        made = _fake_inputs({"x": torch.zeros(2, 3), "ids": torch.zeros(2, dtype=torch.long)},
                            torch.bfloat16)
    assert made["x"].dtype == torch.bfloat16 and made["ids"].dtype == torch.long
