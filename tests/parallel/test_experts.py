"""Expert parallelism against torch: a tiny Mixtral at ep = 4, its routed layers run the way
torchtitan's ``ExpertParallel`` runs them (token counts exchanged, tokens dispatched and
combined by ``all_to_all_single_autograd``) on a fake process group under CommDebugMode, and
one rank's expert shard stepped by AdamW under MemTracker.

The oracle routes by a fixed balanced rule (copy j of token i goes to expert (i·k + j) mod
E, so each expert receives tokens·k/E copies): mhaudit assumes balanced routing, and a fixed
router makes the comparison exact. The fake group moves no data, so each rank's receive
splits are its send splits, as balanced routing makes them on every rank."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from mhaudit.api import audit
from mhaudit.cost.devices import get_profile
from mhaudit.data import ExpertLayer
from mhaudit.data.parallel import ParallelPlan
from mhaudit.errors import ConfigError
from mhaudit.parallel import plan_costs
from mhaudit.parallel.experts import (
    dispatched_rows,
    experts_per_rank,
    local_shape,
    remote_rows,
    shard_group,
)

tf = pytest.importorskip("transformers")

D, FFN, E, K, LAYERS = 32, 64, 8, 2, 2
BATCH, SEQ = 2, 16


@pytest.fixture(scope="module")
def mixtral() -> Iterator[tuple[nn.Module, tuple[torch.Tensor], Any]]:
    config = tf.MixtralConfig(hidden_size=D, intermediate_size=FFN, num_hidden_layers=LAYERS,
                              num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                              num_local_experts=E, num_experts_per_tok=K)
    torch.manual_seed(0)
    model = tf.MixtralForCausalLM(config)
    ids = (torch.zeros(BATCH, SEQ, dtype=torch.long),)
    yield model, ids, audit(model, ids)


class _AllToAllBytes(dist.tensor.debug.CommDebugMode):  # type: ignore[misc]
    """CommDebugMode that also adds up, per all-to-all it counts, the bytes rank 0 sends to
    the other ranks: the rows of every split but its own."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0
        self.calls = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        before = self.get_total_counts()
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if self.get_total_counts() > before and "all_to_all" in str(func._overloadpacket):
            tensor, input_splits = args[0], args[2]
            row = tensor.numel() // tensor.shape[0] * tensor.element_size()
            self.sent += row * (sum(input_splits) - input_splits[0])
            self.calls += 1
        return out


def _ep_layer(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, ep: int) -> torch.Tensor:
    """One routed layer on rank 0 as torchtitan runs it: count exchange, dispatch, the
    local experts, combine, then each token's k outputs summed."""
    from torch.distributed import _functional_collectives as funcol

    group = dist.group.WORLD
    tokens = x.shape[0]
    ids = (torch.arange(tokens * K) % E).view(tokens, K)  # (T, k): balanced fixed routing
    counts = torch.bincount(ids.flatten(), minlength=E)  # (E,) tokens·k/E each
    with torch.no_grad():
        torch.ops._c10d_functional.wait_tensor(funcol.all_to_all_single(counts, None, None, group))
    splits = counts.view(ep, -1).sum(dim=1).tolist()  # copies bound for each EP rank
    order = ids.flatten().argsort(stable=True)
    routed = x.repeat_interleave(K, dim=0)[order]  # (T·k, d), grouped by expert
    got = funcol.all_to_all_single_autograd(routed, splits, splits, group)
    local = gate_up.shape[0]
    per = got.shape[0] // (ep * local)
    h = got.view(ep, local, per, D).transpose(0, 1).reshape(local, ep * per, D)
    gate, up = torch.bmm(h, gate_up.transpose(1, 2)).chunk(2, dim=-1)  # (E_l, rows, ffn)
    y = torch.bmm(nn.functional.silu(gate) * up, down.transpose(1, 2))  # (E_l, rows, d)
    y = y.view(local, ep, per, D).transpose(0, 1).reshape(-1, D)
    back = funcol.all_to_all_single_autograd(y, splits, splits, group)
    out = torch.zeros_like(back).index_copy(0, order, back)
    return out.view(tokens, K, D).sum(dim=1)


class _Shard(nn.Module):
    """Rank 0's expert shards, (gate_up, down) per layer, run as one module (MemTracker
    sorts parameters and gradients by the modules it sees run)."""

    def __init__(self, weights: Iterator[nn.Parameter]) -> None:
        super().__init__()
        self.weights = nn.ParameterList(weights)

    def forward(self, x: torch.Tensor, ep: int) -> torch.Tensor:
        w = self.weights
        return sum((_ep_layer(x, w[2 * i], w[2 * i + 1], ep).sum() for i in range(LAYERS)),
                   torch.zeros(()))


def _torch_ep_step(model: nn.Module, ep: int) -> dict[str, int]:
    """Rank 0 of a fake world of ``ep``: its expert shards (torchtitan's Shard(0)
    partition), every routed layer forward and backward under CommDebugMode, then AdamW
    under MemTracker."""
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=0, world_size=ep, store=FakeStore())
    try:
        mesh = init_device_mesh("cpu", (ep,))
        shard = _Shard(nn.Parameter(distribute_tensor(w.detach(), mesh, [Shard(0)]).to_local())
                       for layer in model.model.layers
                       for w in (layer.mlp.experts.gate_up_proj, layer.mlp.experts.down_proj))
        opt = torch.optim.AdamW(shard.parameters())
        tracker, comm = MemTracker(), _AllToAllBytes()
        tracker.track_external(shard, opt)
        with tracker, comm:
            # the layer input is an activation: its gradient runs the dispatch backward
            shard(torch.randn(BATCH * SEQ, D, requires_grad=True), ep).backward()
            opt.step()
        (device,) = tracker.get_tracker_snapshot().values()
    finally:
        dist.destroy_process_group()
    held = {str(getattr(k, "name", k)): int(v) for k, v in device.items()}
    return {"sent": comm.sent, "calls": comm.calls, "local": int(shard.weights[0].shape[0]),
            **held}


def test_ep4_all_to_all_and_expert_states_equal_torchs(mixtral: Any) -> None:
    model, ids, report = mixtral
    assert [(x.num_experts, x.top_k) for x in report.experts] == [(E, K)] * LAYERS
    cost = plan_costs(model, ids, {}, report.blocks, "fsdp=4,ep=4", get_profile("h100"),
                      "train", experts=report.experts)
    torch_ = _torch_ep_step(model, 4)
    experts = cost.experts
    assert experts is not None
    # per layer: counts (8 − 2)·8 B = 48; 64 copies, 48 remote, ·32·4 B = 6,144, four times
    # (dispatch and combine, forward and backward): 24,624; two layers 49,248
    assert experts.all_to_all_bytes == torch_["sent"] == 49_248
    assert cost.comm_bytes_per_step.all_to_all == torch_["sent"]
    assert experts.all_to_all_calls == torch_["calls"] == 10
    assert experts.experts_per_rank == torch_["local"] == 2
    # 2 experts · (128·32 + 32·64) · 4 B = 49,152 per layer; two layers 98,304
    assert experts.params == torch_["PARAM"] == 98_304
    assert experts.grads == torch_["GRAD"] == 98_304
    # AdamW: exp_avg and exp_avg_sq (2 · 98,304) and a 4-byte step per tensor (4 tensors)
    assert experts.optimizer_states == torch_["OPT"] == 196_624


def test_uneven_split_names_the_busiest_rank() -> None:
    # 6 experts over 4 ranks: torch's Shard(0) chunks 2, 2, 2, 0: rank 0 holds ⌈6/4⌉ = 2
    assert experts_per_rank(6, 4) == 2
    # 24 copies, each expert 4 of them; rank 0 keeps 2 experts' 8: 16 leave it
    assert remote_rows(24, 6, 4) == 16


def test_capacity_factor_pads_each_experts_buffer() -> None:
    layer = ExpertLayer("m", "r", num_experts=8, top_k=2, tokens=32, weights=())
    assert dispatched_rows(32, layer, 1.0) == 64  # dropless: 32 tokens · k = 2
    # capacity ⌈1.25 · 64 / 8⌉ = 10 per expert, 8 experts: 80 rows
    assert dispatched_rows(32, layer, 1.25) == 80


def test_capacity_factor_scales_the_all_to_all(mixtral: Any) -> None:
    model, ids, report = mixtral
    one, padded = (plan_costs(model, ids, {}, report.blocks, "fsdp=4,ep=4",
                              get_profile("h100"), "train", experts=report.experts,
                              capacity_factor=cf).experts for cf in (1.0, 1.25))
    assert one is not None and padded is not None
    # 80 rows instead of 64: 60 remote · 32 · 4 B · 4 passes + 48 = 30,768 per layer
    assert padded.all_to_all_bytes == 2 * (60 * 32 * 4 * 4 + 48) == 61_536
    with pytest.raises(ConfigError):
        plan_costs(model, ids, {}, report.blocks, "fsdp=4,ep=4", get_profile("h100"),
                   "train", experts=report.experts, capacity_factor=0)


def test_ep_with_tp_splits_each_expert_and_keeps_the_exchange(mixtral: Any) -> None:
    plan = ParallelPlan(tp=2, fsdp=4, ep=2)
    # gate_up (8, 128, 32): 4 experts, 128 → 64 rows; down (8, 32, 64): 64 → 32 columns
    assert local_shape((8, 128, 32), D, plan) == (4, 64, 32)
    assert local_shape((8, 32, 64), D, plan) == (4, 32, 32)
    assert shard_group(plan) == 2  # fsdp 4 / gcd(2, 4)
    model, ids, report = mixtral
    cost = plan_costs(model, ids, {}, report.blocks, plan, get_profile("h100"), "train",
                      experts=report.experts)
    assert cost.experts is not None
    # per layer (4·64·32 + 4·32·32) = 12,288 elements over 2 FSDP ranks: 6,144 · 4 B;
    # two layers 49,152
    assert cost.experts.params == 49_152
    # counts (8 − 4)·8 = 32; 64 copies, 32 remote · 32 · 4 B · 4 = 16,384; two layers
    assert cost.experts.all_to_all_bytes == 2 * (32 + 16_384)


def test_decode_sends_the_forward_only(mixtral: Any) -> None:
    model, ids, report = mixtral
    cost = plan_costs(model, ids, {}, report.blocks, "fsdp=4,ep=4", get_profile("h100"),
                      "decode", experts=report.experts, context=16)
    assert cost.experts is not None
    # b = 2 tokens · k = 4 copies, 3 remote · 32 · 2 B (bf16), dispatch and combine, + 48 B
    # of counts: 432 per layer
    assert cost.experts.all_to_all_bytes == 2 * (3 * 32 * 2 * 2 + 48) == 864
    assert cost.experts.grads == cost.experts.optimizer_states == 0


def test_cli_carries_the_all_to_all_and_the_experts_states() -> None:
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from mhaudit.cli import main as cli

    fixture = Path(__file__).parent.parent / "fixtures" / "tiny_moe.py"
    done = CliRunner().invoke(cli, ["report", str(fixture), "--train", "--parallel",
                                    "fsdp=4,ep=4", "-f", "json"])
    assert done.exit_code == 0, done.output
    section = json.loads(done.stdout)["training"]["parallel"]
    # the same figures as the library's at this shape (see the torch test above)
    assert section["comm_bytes_per_step"]["all_to_all"] == 49_248
    assert section["plan"]["ep"] == 4
    experts = section["experts"]
    assert (experts["experts_per_rank"], experts["params"], experts["grads"],
            experts["optimizer_states"]) == (2, 98_304, 98_304, 196_624)
    text = CliRunner().invoke(cli, ["report", str(fixture), "--train", "--parallel",
                                    "fsdp=4,ep=4"])
    assert "2 of 8 experts per rank" in " ".join(text.stdout.split())


def _mixtral(layers: int) -> tuple[nn.Module, tuple[torch.Tensor], Any]:
    config = tf.MixtralConfig(hidden_size=D, intermediate_size=FFN, num_hidden_layers=layers,
                              num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                              num_local_experts=E, num_experts_per_tok=K)
    torch.manual_seed(0)
    model = tf.MixtralForCausalLM(config)
    ids = (torch.zeros(BATCH, SEQ, dtype=torch.long),)
    return model, ids, audit(model, ids)


@pytest.mark.parametrize("layers", [4, 3])
def test_with_pipeline_stages_the_experts_are_the_worst_stages(layers: int) -> None:
    model, ids, report = _mixtral(layers)
    cost, dense = (plan_costs(model, ids, {}, report.blocks, plan, get_profile("h100"),
                              "train", experts=report.experts)
                   for plan in ("fsdp=2,ep=2,pp=2", "fsdp=2,pp=2"))
    experts, pipe = cost.experts, cost.pipeline
    assert experts is not None and pipe is not None
    worst = pipe.stages[pipe.worst_stage]
    # 4 layers split 2 + 2, 3 layers 2 + 1: the worst stage (the per-device bytes') runs 2
    assert (experts.stage, experts.layers, len(worst.layers)) == (pipe.worst_stage, 2, 2)
    # fsdp 2, ep 2: 4 of 8 experts per rank, shard group 2 / gcd(2, 2) = 1; per layer
    # 4 · (128·32 + 32·64) = 24,576 elements · 4 B = 98,304 B; two layers 196,608
    assert experts.params == experts.grads == 2 * 98_304
    # AdamW: exp_avg and exp_avg_sq, and a 4-byte step per tensor (2 per layer)
    assert experts.optimizer_states == 2 * 2 * 98_304 + 4 * 4
    # per layer: counts (8 − 4)·8 B = 32; 64 copies, 32 remote · 32 · 4 B · 4 passes
    assert experts.all_to_all_bytes == 2 * (32 + 32 * 32 * 4 * 4) == 32_832
    # the same layers without ep: 8 experts' 49,152 elements over fsdp 2 = 24,576 a
    # layer, as many bytes as ep's 4 whole experts: the stage holds what ep holds
    assert cost.per_device_bytes.params == dense.per_device_bytes.params
    assert cost.per_device_bytes.params > experts.params  # the stage's dense layers too
