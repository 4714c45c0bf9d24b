"""Replicas beside the shards: HSDP (fully_shard over (dp_replicate, dp_shard)), DDP-style
replication (FSDP2's replicate) and both with TP and SP, per-rank states and collectives
equal to what torch runs on the fake world."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from mhaudit.api import audit
from mhaudit.cost.devices import get_profile
from mhaudit.cost.stepspec import TRAIN, StepSpec
from mhaudit.data import ParallelPlan
from mhaudit.parallel import plan_costs
from mhaudit.parallel.collectives import collectives
from mhaudit.parallel.inventory import UnitShard
from mhaudit.parallel.world import fake_world, mesh_axes

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

H100 = get_profile("h100")
IDS = torch.zeros((2, 16), dtype=torch.long, device="meta")
SPEC = StepSpec(TRAIN, 4, 4, "adamw", batch=2, tokens=64, context=0, activation_bytes=None,
                flops=1)
# the GQA Llama below: per layer q 64·64, k and v 64·32, o 64·64, gate, up and down
# 64·128, two norms 64 = 36,992 elements; embedding and head 128·64 each, final norm 64:
# 2·36,992 + 16,448 = 90,432 elements, 361,728 B in fp32
WHOLE = 361728


@pytest.fixture(scope="module")
def llama() -> tuple[torch.nn.Module, tuple]:  # type: ignore[type-arg]
    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=128,
                                      num_hidden_layers=2, vocab_size=128)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    return model, audit(model, (IDS,)).blocks


def _both(llama, plan: str) -> tuple:  # type: ignore[no-untyped-def,type-arg]
    model, blocks = llama
    analytic = plan_costs(model, (IDS,), {}, blocks, plan, H100, precision="fp32",
                          use_torch=False)
    measured = plan_costs(model, (IDS,), {}, blocks, plan, H100, precision="fp32")
    assert measured.source == "torch.distributed", measured.notes
    assert not dist.is_initialized()
    for name in ("params", "grads", "optimizer_states"):
        assert getattr(analytic.per_device_bytes, name) == getattr(
            measured.per_device_bytes, name), name
    assert analytic.comm_bytes_per_step == measured.comm_bytes_per_step
    assert analytic.comm_calls_per_step == measured.comm_calls_per_step
    return analytic, measured


def test_replica_all_reduce_formula() -> None:
    shards = (UnitShard("layers.0", 1000, 2000, 2), UnitShard("", 500, 1000, 1))
    comm = collectives((), shards, 64, SPEC, ParallelPlan(fsdp=2, dp=4))
    # each unit's fp32 gradient shard all-reduced over 4 replicas: 2·3/4·4,000 = 6,000 and
    # 2·3/4·2,000 = 3,000; the shards' own gathers and scatters are unchanged
    assert comm.calls.all_reduce == 2 and comm.sent.all_reduce == 9000
    assert comm.sent.reduce_scatter == 1000 * 4 + 500 * 4
    ddp = collectives((), shards, 64, SPEC, ParallelPlan(dp=4))
    assert ddp.sent.all_gather == ddp.sent.reduce_scatter == 0
    assert ddp.sent.all_reduce == 9000


def test_mesh_names_the_dims_the_plan_uses() -> None:
    plan = ParallelPlan(tp=2, sp=True, fsdp=2, dp=3, pp=2)
    assert mesh_axes(plan) == (("pp", 2), ("dp_replicate", 3), ("dp_shard", 2), ("tp", 2))
    with fake_world(ParallelPlan(tp=2, fsdp=2, dp=2)) as mesh:
        assert mesh.mesh_dim_names == ("dp_replicate", "dp_shard", "tp")
        assert dist.get_world_size() == 8
    assert not dist.is_initialized()


def test_hsdp_fsdp2_dp2(llama) -> None:  # type: ignore[no-untyped-def]
    _, measured = _both(llama, "fsdp=2,dp=2")
    held, sent = measured.per_device_bytes, measured.comm_bytes_per_step
    # every dim even: each replica's rank holds half of every tensor, 361,728 / 2
    assert held.params == held.grads == WHOLE // 2
    # gradients reduce-scattered in the shard group (1/2 of 361,728), then the shard
    # all-reduced across the 2 replicas: 2·1/2·180,864 = 180,864, one per unit (3)
    assert sent.reduce_scatter == sent.all_reduce == 180864
    assert measured.comm_calls_per_step.all_reduce == 3


def test_ddp_dp4(llama) -> None:  # type: ignore[no-untyped-def]
    _, measured = _both(llama, "dp=4")
    held, sent = measured.per_device_bytes, measured.comm_bytes_per_step
    # whole copies on every replica, gradients all-reduced: 2·3/4·361,728 = 542,592
    assert held.params == held.grads == WHOLE and held.temporaries == 0
    assert sent.all_reduce == 542592 and sent.all_gather == sent.reduce_scatter == 0


def test_tp2_sp_fsdp2(llama) -> None:  # type: ignore[no-untyped-def]
    _, measured = _both(llama, "tp=2,sp,fsdp=2")
    # the SP plan's 181,504 B per TP rank (test_seqpar), sharded again over 2
    assert measured.per_device_bytes.params == 181504 // 2
    _, hsdp = _both(llama, "tp=2,sp,fsdp=2,dp=2")
    assert hsdp.per_device_bytes.params == 181504 // 2
    # the replicas add one all-reduce per unit of the 90,752 B shard: 2·1/2·90,752
    extra = hsdp.comm_bytes_per_step.all_reduce - measured.comm_bytes_per_step.all_reduce
    assert extra == 90752
