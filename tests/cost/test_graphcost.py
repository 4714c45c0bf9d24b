"""graph_flops against hand counts and torch's FlopCounterMode; peak activations by hand."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from fixtures.small_models import TextbookMHA
from torch import Tensor, nn
from torch.export import ExportedProgram
from torch.utils.flop_counter import FlopCounterMode

from mhaudit.cost.formulas import softmax_flops
from mhaudit.flops.graph import GraphFlops, graph_flops
from mhaudit.memory.lifetimes import exported_param_names, peak_activation_bytes


class LastHidden(nn.Module):
    """Returns only ``last_hidden_state`` so HF models export without a cache."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor) -> Tensor:
        return self.model(input_ids, use_cache=False).last_hidden_state  # type: ignore[no-any-return]


class SelfMHA(nn.Module):
    """nn.MultiheadAttention used as self-attention."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(64, 4, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.attn(x, x, x, need_weights=False)[0]


def _export(build: Any, *shape: int, dtype: torch.dtype = torch.float32) -> tuple[
        ExportedProgram, tuple[Tensor, ...]]:
    with torch.device("meta"):
        model = build().eval()
        x = torch.zeros(*shape, dtype=dtype)
    return torch.export.export(model, (x,), strict=False), (x,)


def _gpt2(attn_implementation: str) -> nn.Module:
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=100,
                        attn_implementation=attn_implementation)
    return LastHidden(GPT2Model(config))


def _flop_counter_total(program: ExportedProgram, args: tuple[Tensor, ...]) -> int:
    with FlopCounterMode(display=False) as counter:
        program.module()(*args)
    return counter.get_total_flops()


def _matmul_like(program: ExportedProgram, flops: GraphFlops) -> int:
    """What FlopCounterMode counts: matmuls, convs and SDPA's two matmuls (no softmax)."""
    sdpa_softmax = 0
    for node in program.graph.nodes:
        if "scaled_dot_product" in str(node.target):
            q, k = node.args[0].meta["val"], node.args[1].meta["val"]
            sdpa_softmax += softmax_flops(math.prod(q.shape[:-1]) * k.shape[-2])
    families = flops.family_flops
    return (families.get("matmul", 0) + families.get("conv", 0)
            + families.get("attention", 0) - sdpa_softmax)


def test_textbook_mha_by_hand() -> None:
    program, args = _export(TextbookMHA, 32, 10, 64)
    flops = graph_flops(program.graph)
    # 4 linears · 2 · 320 rows · 64 · 64 = 10,485,760; 2 matmuls · 2·256·10·10·8 = 819,200
    assert flops.family_flops["matmul"] == 11_304_960
    # 3 · 32·8·10·10 = 76,800 ; the / √d_k is 1 per score: 25,600
    assert flops.family_flops["softmax"] == 76_800
    assert flops.family_flops["elementwise"] == 25_600
    # 11,304,960 + 76,800 + 25,600 = 11,407,360
    assert flops.flops == 11_407_360
    assert flops.ops_without_formula == {}
    assert flops.node_flops["linear"] == 2_621_440
    assert sum(flops.node_flops.values()) == flops.flops
    assert _flop_counter_total(program, args) == 11_304_960


@pytest.mark.parametrize(
    "build",
    [TextbookMHA, SelfMHA, lambda: _gpt2("sdpa"), lambda: _gpt2("eager")],
    ids=["textbook", "nn.MultiheadAttention", "gpt2-sdpa", "gpt2-eager"],
)
def test_matmul_family_matches_flop_counter(build: Any) -> None:
    if build in (TextbookMHA, SelfMHA):
        program, args = _export(build, 32, 10, 64)
    else:
        program, args = _export(build, 2, 16, dtype=torch.long)
    flops = graph_flops(program.graph)
    assert flops.ops_without_formula == {}
    assert _matmul_like(program, flops) == _flop_counter_total(program, args)


def test_gpt2_sdpa_attention_by_hand() -> None:
    program, _ = _export(lambda: _gpt2("sdpa"), 2, 16, dtype=torch.long)
    flops = graph_flops(program.graph)
    # per layer, b·h = 2·4: 2·8·16·16·16 (scores) · 2 (context) + 3·8·16·16 = 137,216; 2 layers
    assert flops.family_flops["attention"] == 274_432


class Unknown(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: Tensor) -> Tensor:
        y = self.lin(x)  # (4, 8)
        with torch.no_grad():
            z = self.lin(y) * 2  # runs inside a wrap_with_set_grad_enabled submodule
        return F.avg_pool1d(z + y, 2)  # (4, 4): no formula


def test_ops_without_formula_and_wrapped_submodules() -> None:
    program, _ = _export(Unknown, 4, 8)
    flops = graph_flops(program.graph)
    assert flops.ops_without_formula == {"aten.avg_pool1d": 1}
    assert flops.coverage().ops_without_formula == {"aten.avg_pool1d": 1}
    # 2 linears · 2·4·8·8 = 1,024 ; mul and add 32 each
    assert flops.family_flops == {"matmul": 1_024, "elementwise": 64}
    assert flops.flops == 1_088


def test_non_aten_graph_is_reported_not_zero() -> None:
    traced = torch.fx.symbolic_trace(TextbookMHA())
    flops = graph_flops(traced.graph)
    assert flops.ops_without_formula["module.Linear"] == 4
    assert sum(flops.ops_without_formula.values()) > 4  # torch functions without meta vals


class Chain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 16, bias=False)  # weight 16·8·4 B = 512 B

    def forward(self, x: Tensor) -> Tensor:  # x (4, 8) fp32: 128 B, alive to the end
        h = self.lin(x)  # (4, 16): 256 B -> live x + h = 384
        v = h.view(8, 8).transpose(0, 1)  # views of h: 0 B
        e = torch.exp(v)  # (8, 8): 256 B -> live x + h + e = 640, then h dies
        s = e.sum(dim=0)  # (8,): 32 B -> live x + e + s = 416, then e dies
        return x + s.view(1, 8)  # (4, 8): 128 B -> live x + s + out = 288


def test_peak_activation_bytes_chain() -> None:
    program, _ = _export(Chain, 4, 8)
    graph = program.graph
    assert peak_activation_bytes(graph, exported_param_names(program)) == 640
    assert peak_activation_bytes(graph, is_param=lambda n: n.name.startswith("p_")) == 640
    # counting the weight as an activation: at the linear, w + x + h = 512 + 128 + 256 = 896
    assert peak_activation_bytes(graph) == 896


class SplitViews(nn.Module):
    def forward(self, x: Tensor) -> Tensor:  # x (4, 8): 128 B
        y = torch.cat([x, x], dim=1)  # (4, 16): 256 B -> live x + y = 384, then x dies
        a, b = y.split(8, dim=1)  # two views of y: 0 B (512 if they allocated)
        c = a * b  # (4, 8): 128 B -> live y + c = 384, then y dies
        return c.exp()  # 128 B -> live c + out = 256


class CopyingReshape(nn.Module):
    def forward(self, x: Tensor) -> Tensor:  # x (4, 8): 128 B
        r = x.t().reshape(32)  # not viewable: a 128 B copy -> live x + r = 256
        return torch.cat([r, x.view(32)])  # 256 B -> live x + r + out = 512


class ViewingReshape(nn.Module):
    def forward(self, x: Tensor) -> Tensor:  # x (4, 8): 128 B
        r = x.reshape(32)  # contiguous: a view, 0 B
        return torch.cat([r, x.view(32)])  # 256 B -> live x + out = 384


@pytest.mark.parametrize(
    ("build", "expected"), [(SplitViews, 384), (CopyingReshape, 512), (ViewingReshape, 384)]
)
def test_peak_activation_bytes_aliasing(build: Any, expected: int) -> None:
    program, _ = _export(build, 4, 8)
    assert peak_activation_bytes(program.graph, exported_param_names(program)) == expected
