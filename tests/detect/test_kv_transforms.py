"""K/V transforms: a learned map over positions after the K/V projections is not W_K/W_V."""

from __future__ import annotations

import pytest
import torch
from fixtures.zoo_kv_transforms import AbsorbedLatent, BlockHeads, CompressedKeys
from torch.utils.flop_counter import FlopCounterMode

from mhaudit.cost.block import block_flops
from mhaudit.cost.scaling import at_length
from mhaudit.detect.blocks import detect
from mhaudit.detect.params import count
from mhaudit.trace.export import trace

B, D, H, BLOCK = 2, 32, 4, 4
DK = D // H


def _layout(model: torch.nn.Module, n: int):  # type: ignore[no-untyped-def]
    (layout,) = detect(trace(model.eval(), (torch.randn(B, n, D),), {}), model)
    return layout


def _counted(model: torch.nn.Module, n: int) -> int:
    """FlopCounterMode's FLOPs of a real CPU forward."""
    with FlopCounterMode(display=False) as counter:
        model.eval()(torch.randn(B, n, D))
    return int(counter.get_total_flops())


@pytest.mark.parametrize("fused_kv", [False, True])
def test_a_compressor_over_blocks_of_positions_is_a_kv_transform(fused_kv: bool) -> None:
    model = CompressedKeys(D, H, BLOCK, fused_kv)
    layout = _layout(model, 16)
    # Heads come from the projections: 4 KV heads of 8; 16 positions in blocks of 4: 4 keys.
    assert (layout.kind, layout.num_heads, layout.num_kv_heads, layout.head_dim,
            layout.seq_len_q, layout.seq_len_kv) == ("self", H, H, DK, 16, 4)
    assert layout.k is not None and layout.v is not None
    # K and V: half of kv each, 32·32 = 1,024 weights; the compressors are not W_K / W_V.
    assert layout.k.params == layout.v.params == D * D
    # Two compressors of (4·8)·8 + 8 = 264: 528, outside W_Q/W_K/W_V/W_O, named.
    assert layout.kv_transform_params == 2 * (BLOCK * DK * DK + DK) == 528
    params = count(layout)
    assert params.kv_transform == 528
    assert params.total == sum(p.numel() for p in model.parameters())
    assert any("K/V transforms over positions" in d.reason and d.params == 528
               for d in params.deviations)
    # K/V are projected over all 2·16 rows before the map: 2·32·32·64 = 131,072 FLOPs.
    assert layout.kv_rows == B * 16


@pytest.mark.parametrize("n", [16, 32])
def test_block_flops_of_a_compressed_block_match_a_real_forward(n: int) -> None:
    model = CompressedKeys(D, H, BLOCK)
    layout = at_length(_layout(model, 16), n)
    assert layout.seq_len_kv == n // BLOCK
    cost = block_flops(layout)
    # FlopCounterMode counts the linears here (its CPU SDPA kernel has no formula): the
    # compressors' FLOPs are K's and V's, over K/V projected at every position.
    assert cost.q_proj + cost.k_proj + cost.v_proj + cost.o_proj == _counted(model, n)
    # scores: 2·b·h·n·(n/4)·d_k = 2·2·4·n·(n/4)·8
    assert cost.scores == 2 * B * H * n * (n // BLOCK) * DK


def test_per_head_linears_of_unprojected_heads_stay_the_projections() -> None:
    model = BlockHeads(D, H)
    layout = _layout(model, 8)
    assert layout.seq_len_kv == 8
    assert layout.kv_transform_params == 0 and layout.kv_rows == 0
    assert layout.k is not None and layout.k.params == DK * DK + DK


def test_absorbed_latent_attention_runs_h_heads_over_the_latent() -> None:
    model = AbsorbedLatent(D, H, rank=16, nope=8, rope=4, v_head=8).eval()
    layout = _layout(model, 6)
    # 4 heads over one latent key (16 wide) beside one shared rope key (4): d_k = 20;
    # the heads axis comes after the positions in 'bsht', and the queries are the 6 s.
    assert (layout.kind, layout.num_heads, layout.num_kv_heads, layout.head_dim,
            layout.seq_len_q, layout.seq_len_kv, layout.causal) == ("self", H, 1, 20, 6, 6, True)
    params = count(layout)
    # Q: wq 32·4·(8 + 4) = 1,536; K: wkv_a 32·(16 + 4) = 640 (V reads K's latent); O: wo
    # 4·8·32 = 1,024; W_UK and W_UV, per-head slices of wkv_b: 4·8·16 each, 1,024 in all.
    assert (params.q, params.k, params.v, params.o) == (1536, 640, 0, 1024)
    assert params.absorbed == 1024 == model.wkv_b.weight.numel()
    assert params.total == sum(p.numel() for p in model.parameters()) - model.kv_norm.weight.numel()
    assert any("absorbed per-head maps" in d.reason for d in params.deviations)


def test_absorbed_latent_block_flops_match_a_real_forward() -> None:
    model = AbsorbedLatent(D, H, rank=16, nope=8, rope=4, v_head=8).eval()
    cost = block_flops(_layout(model, 6))
    # Every matmul of the forward is the block's (FlopCounterMode has no softmax).
    assert cost.total - cost.softmax == _counted(model, 6)
