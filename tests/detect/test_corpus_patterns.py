"""Corpus patterns: K/V that derive from the query's own tokens, and parameter attribution."""

from __future__ import annotations

import pytest
import torch
from fixtures.zoo_kv_sources import (
    CachedDecode,
    ConvMemory,
    HaloBlocks,
    HaloFusedKV,
    JoinedInProjection,
    QueryResidual,
    ReducedKeys,
    ReducedMemory,
)
from torch import nn

from mhaudit.data import Layout
from mhaudit.detect.blocks import detect
from mhaudit.trace.export import trace

B, D, H = 2, 32, 4
DK = D // H


def _detect(model: nn.Module, *inputs: torch.Tensor) -> Layout:
    (layout,) = detect(trace(model.eval(), inputs, {}), model)
    return layout


def _numel(*modules: nn.Module) -> int:
    return sum(p.numel() for m in modules for p in m.parameters())


def _figures(layout: Layout) -> tuple[str, int, int, int, int, int]:
    return (layout.kind, layout.num_heads, layout.num_kv_heads, layout.head_dim,
            layout.seq_len_q, layout.seq_len_kv)


@pytest.mark.parametrize(("reduced", "pool", "n_kv"), [
    (D, 0, (8 // 2) ** 2),   # 8×8 grid, conv stride 2: 4×4 = 16 keys
    (16, 0, (8 // 2) ** 2),  # the conv narrows the tokens to 16 features before kv
    (D, 2, 2 * 2),           # adaptive pool to 2×2, 1×1 conv, norm, GELU: 4 keys
])
def test_keys_from_a_strided_reduction_of_the_queries_tokens_are_self_attention(
        reduced: int, pool: int, n_kv: int) -> None:
    model = ReducedKeys(D, H, 2, 8, reduced, pool)
    layout = _detect(model, torch.randn(B, 64, D))
    assert _figures(layout) == ("self", H, H, DK, 64, n_kv)
    # The fused kv linear splits in half: each of K and V has reduced·D + D parameters.
    assert layout.k is not None and layout.v is not None
    assert layout.k.weight_params + layout.k.bias_params == _numel(model.kv) // 2
    assert layout.v.weight_params + layout.v.bias_params == _numel(model.kv) // 2


@pytest.mark.parametrize("tensor_unfold", [False, True])
def test_overlapping_key_windows_gathered_by_unfold_are_self_attention(
        tensor_unfold: bool) -> None:
    model = HaloBlocks(D, H, block=8, halo=2, tensor_unfold=tensor_unfold)
    layout = _detect(model, torch.randn(B, 32, D))
    # Blocks of 8 queries, each against its block and 2 neighbours a side: 8 + 2·2 = 12 keys.
    assert _figures(layout) == ("self", H, H, DK, 8, 12)
    assert layout.k is not None and layout.k.weight_params + layout.k.bias_params == (
        _numel(model.k))


@pytest.mark.parametrize("split", ["chunk", "split"])
@pytest.mark.parametrize("gather", ["im2col", "last", "middle"])
def test_windows_of_one_fused_kv_projection_split_after_the_unfold(
        gather: str, split: str) -> None:
    model = HaloFusedKV(D, H, block=8, halo=2, gather=gather, split=split)
    layout = _detect(model, torch.randn(B, 32, D))
    # Blocks of 8 queries against 8 + 2·2 = 12 keys; 4 K/V heads of 32 / 4 = 8.
    assert _figures(layout) == ("self", H, H, DK, 8, 12)
    # kv is Linear(32, 64): K and V each read half, 32·32 weights + 32 biases = 1,056.
    assert (_total(layout, "k"), _total(layout, "v")) == (32 * 32 + 32, 32 * 32 + 32)
    assert _total(layout, "k") + _total(layout, "v") == _numel(model.kv)
    assert not layout.kv_shared


def test_keys_over_a_cache_joined_with_the_new_positions_are_self_attention() -> None:
    model = CachedDecode(D, H)
    layout = _detect(model, torch.randn(B, 1, D), torch.randn(B, 12, D))
    # One new position against 12 cached and itself: 13 keys.
    assert _figures(layout) == ("self", H, H, DK, 1, 13)


def test_keys_from_a_reduction_of_a_second_input_stay_cross_attention() -> None:
    model = ReducedMemory(D, H, 2)
    layout = _detect(model, torch.randn(B, 16, D), torch.randn(B, 32, D))
    # 32 memory positions, conv stride 2: 16 keys from the second input.
    assert _figures(layout) == ("cross", H, H, DK, 16, 16)


def _total(layout: Layout, role: str) -> int:
    projection = getattr(layout, role)
    assert projection is not None, role
    return projection.weight_params + projection.bias_params


@pytest.mark.parametrize("separate", [False, True])
def test_biases_joined_into_one_in_proj_bias_count_for_their_roles(separate: bool) -> None:
    model = JoinedInProjection(D, H, separate)
    layout = _detect(model, torch.randn(B, 16, D))
    # Each role keeps its own linear's weight and bias: D·D + D = 1,056.
    got = [_total(layout, r) for r in "qkvo"]
    assert got == [_numel(m) for m in (model.q, model.k, model.v, model.o)]


def test_learned_queries_added_back_after_the_output_projection_are_no_bias() -> None:
    model = QueryResidual(D, H, queries=8)
    layout = _detect(model, torch.randn(B, 16, D))
    # O is a bias-free D×D linear: 1,024, not 1,024 + the 8·D queries added to its output.
    assert layout.o is not None and layout.o.bias_params == 0
    assert _total(layout, "o") == _numel(model.o)
    assert (layout.kind, layout.seq_len_q, layout.seq_len_kv) == ("cross", 8, 16)


def test_kernel_3_conv1d_keys_and_values_over_a_channels_first_memory() -> None:
    model = ConvMemory(D, H, d_mem=24, kernel=3)
    layout = _detect(model, torch.randn(B, 16, D), torch.randn(B, 24, 20))
    # K and V: Conv1d(24 → 32, k=3), 32·24·3 + 32 = 2,336 each; 32 channels = 4 heads of 8.
    assert _figures(layout) == ("cross", H, H, DK, 16, 20)
    assert [_total(layout, r) for r in "kv"] == [_numel(model.k), _numel(model.v)]
    assert layout.k is not None and layout.k.in_features == 24
