"""Hand-computed tests for block-level FLOPs, memory, bytes moved and the roofline."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mhaudit.cost.block import (
    SCORE_PASSES,
    block_bytes_moved,
    block_flops,
    block_memory,
    causal_pairs,
    causal_tile_pairs,
    kv_bytes_per_position,
    roofline,
)
from mhaudit.cost.devices import get_profile
from mhaudit.cost.formulas import SOFTMAX_FLOPS_PER_ELEMENT
from mhaudit.data import Layout, Projection
from tests.fixtures.blocks import make_block


def _proj(name: str, d_in: int, d_out: int, bias: bool) -> Projection:
    return Projection(name, f"{name}.weight", d_in, d_out, d_out, d_in * d_out,
                      d_out if bias else 0)


def _layout(
    *, d_model: int, h: int, h_kv: int, d_k: int, b: int, n_q: int, n_kv: int,
    bias: bool = True, kind: str = "self", causal: bool | None = None,
) -> Layout:
    return Layout(
        name="attn", module_type="Attention", kind=kind, implementation="eager",
        d_model=d_model, num_heads=h, num_kv_heads=h_kv, head_dim=d_k, v_head_dim=d_k,
        batch_size=b, seq_len_q=n_q, seq_len_kv=n_kv, d_out=d_model, causal=causal,
        scale=None,
        q=_proj("q", d_model, h * d_k, bias), k=_proj("k", d_model, h_kv * d_k, bias),
        v=_proj("v", d_model, h_kv * d_k, bias), o=_proj("o", h * d_k, d_model, bias),
    )


# The seed article's layer: d_model 64, 8 heads of 8, batch 32, 10 tokens.
TEXTBOOK = _layout(d_model=64, h=8, h_kv=8, d_k=8, b=32, n_q=10, n_kv=10)
# A Llama-style GQA layer: 32 query heads, 8 KV heads of 128, no biases, causal.
GQA = _layout(d_model=4096, h=32, h_kv=8, d_k=128, b=1, n_q=16, n_kv=16, bias=False,
              causal=True)


def test_softmax_convention_is_three_per_score() -> None:
    # exp, add into the row sum, divide (Chinchilla, Table A4)
    assert SOFTMAX_FLOPS_PER_ELEMENT == 3


def test_block_flops_textbook() -> None:
    flops = block_flops(TEXTBOOK)
    # 2 · 32·10 rows · 64 in · 64 out = 2,621,440 per projection
    assert flops.q_proj == flops.k_proj == flops.v_proj == flops.o_proj == 2_621_440
    # 2 · 32·8 (b·h) · 10 · 10 · 8 = 409,600
    assert flops.scores == flops.context == 409_600
    # 3 · 32·8·10·10 = 76,800
    assert flops.softmax == 76_800
    # 4 · 2,621,440 + 2 · 409,600 + 76,800 = 11,381,760
    assert flops.total == 11_381_760
    assert flops.causal_total is None


def test_block_flops_gqa_causal() -> None:
    flops = block_flops(GQA)
    # 2 · 16 · 4096 · 4096 = 536,870,912
    assert flops.q_proj == flops.o_proj == 536_870_912
    # 2 · 16 · 4096 · (8·128 = 1024) = 134,217,728
    assert flops.k_proj == flops.v_proj == 134_217_728
    # 2 · 1·32 · 16 · 16 · 128 = 2,097,152 (all 32 query heads)
    assert flops.scores == flops.context == 2_097_152
    # 3 · 32 · 16 · 16 = 24,576
    assert flops.softmax == 24_576
    # causal pairs 16·17/2 = 136 per head, 32·136 = 4,352 in all:
    # 2·4,352·128 (scores) + 3·4,352 + 2·4,352·128 (context) = 2,241,280
    # + projections 2·536,870,912 + 2·134,217,728 = 1,342,177,280 → 1,344,418,560
    assert flops.causal_total == 1_344_418_560


def test_block_flops_cross_attention_uses_n_kv_for_k_and_v() -> None:
    layout = _layout(d_model=64, h=4, h_kv=4, d_k=16, b=2, n_q=7, n_kv=11, kind="cross")
    flops = block_flops(layout)
    # 2 · 2·7 · 64 · 64 = 114,688 ; 2 · 2·11 · 64 · 64 = 180,224
    assert flops.q_proj == flops.o_proj == 114_688
    assert flops.k_proj == flops.v_proj == 180_224
    # 2 · 2·4 · 7 · 11 · 16 = 19,712
    assert flops.scores == flops.context == 19_712


def test_absent_and_shared_projections_cost_nothing() -> None:
    layout = replace(TEXTBOOK, q=None, o=None, kv_shared=True)
    flops = block_flops(layout)
    assert flops.q_proj == flops.o_proj == flops.v_proj == 0
    assert flops.k_proj == 2_621_440


@pytest.mark.parametrize(
    ("n_q", "n_kv", "offset", "window", "pairs"),
    [
        (4, 4, 0, None, 10),  # 4·5/2
        (1, 5, 0, None, 1),  # top-left (is_causal): row 0 sees key 0 only
        (1, 5, 4, None, 5),  # bottom-right: one decoded token sees all 5 keys
        (2, 5, 3, None, 9),  # bottom-right rows keep 4 and 5 keys
        (64, 256, 0, None, 2_080),  # top-left: 1 + 2 + ... + 64 = 64·65/2
        (64, 256, 192, None, 14_368),  # bottom-right: 64·192 + 2,080
        (5, 2, -3, None, 3),  # bottom-right, n_q > n_kv: rows 0-2 none, rows 3, 4 keep 1, 2
        (8, 8, 0, 3, 21),  # window 3: rows keep 1, 2, 3, 3, 3, 3, 3, 3
    ],
)
def test_causal_pairs(n_q: int, n_kv: int, offset: int, window: int | None, pairs: int) -> None:
    assert causal_pairs(n_q, n_kv, offset, window) == pairs
    brute = sum(1 for i in range(n_q) for j in range(n_kv)
                if j <= i + offset and (window is None or j > i + offset - window))
    assert brute == pairs


@pytest.mark.parametrize(
    ("n_q", "n_kv", "offset", "window", "pairs"),
    [
        (256, 256, 0, None, 49_152),  # tiles (0,0), (1,0), (1,1): 3·128·128
        (100, 100, 0, None, 10_000),  # one partial tile computed in full
        (384, 384, 0, 128, 5 * 16_384),  # window 128: (0,0) (1,0) (1,1) (2,1) (2,2)
        (64, 256, 192, None, 64 * 256),  # bottom-right: one query tile reaches every key tile
    ],
)
def test_causal_tile_pairs(
    n_q: int, n_kv: int, offset: int, window: int | None, pairs: int
) -> None:
    assert causal_tile_pairs(n_q, n_kv, offset, window) == pairs
    assert causal_tile_pairs(n_q, n_kv, offset, window) >= causal_pairs(n_q, n_kv, offset, window)

    def kept(i: int, j: int) -> bool:
        return j <= i + offset and (window is None or j > i + offset - window)

    tiles = [(r, c) for r in range(0, n_q, 128) for c in range(0, n_kv, 128)
             if any(kept(i, j) for i in range(r, min(n_q, r + 128))
                    for j in range(c, min(n_kv, c + 128)))]
    assert sum((min(n_q, r + 128) - r) * (min(n_kv, c + 128) - c) for r, c in tiles) == pairs


def test_block_memory_gqa_bf16() -> None:
    mem = block_memory(GQA, element_bytes=2, materializes_scores=False)
    # 1 · 16 · 32 · 128 · 2 B = 131,072
    assert mem.q_bytes == 131_072
    # 1 · 16 · 8 · 128 · 2 B = 32,768
    assert mem.k_bytes == mem.v_bytes == 32_768
    assert mem.scores_bytes is None
    # 1 · 32 · 16 · 16 · 2 B = 16,384
    assert mem.scores_bytes_if_materialized == 16_384
    # (8·128 + 8·128) · 2 B = 4,096 per token; 80 layers → 327,680 (Llama-3-70B)
    assert mem.kv_cache_bytes_per_token == 4_096
    assert 80 * mem.kv_cache_bytes_per_token == 327_680
    # 4,096 · 1 · 16 = 65,536
    assert mem.kv_cache_bytes == 65_536


def test_block_memory_fp32_scores_for_math_fallback() -> None:
    mem = block_memory(GQA, element_bytes=2, materializes_scores=True, scores_element_bytes=4)
    # 1 · 32 · 16 · 16 · 4 B = 32,768
    assert mem.scores_bytes == mem.scores_bytes_if_materialized == 32_768


def test_block_memory_cross_attention_cache() -> None:
    layout = _layout(d_model=64, h=4, h_kv=4, d_k=16, b=2, n_q=7, n_kv=11, kind="cross")
    mem = block_memory(layout, element_bytes=2, materializes_scores=True)
    # per encoder token: (4·16 + 4·16) · 2 B = 256, but nothing grows per generated token
    assert kv_bytes_per_position(layout, 2) == 256
    assert mem.kv_cache_bytes_per_token == 0
    # 256 · 2 · 11 = 5,632, built once from the encoder
    assert mem.kv_cache_bytes == 5_632


def test_kv_shared_caches_k_only() -> None:
    # 8 · 8 · 4 B = 256 (K only) instead of 512
    assert kv_bytes_per_position(replace(TEXTBOOK, kv_shared=True), 4) == 256
    assert kv_bytes_per_position(TEXTBOOK, 4) == 512


def test_block_bytes_moved_textbook_fp32() -> None:
    # per projection: (4,096 + 64 params + 320 rows · (64 + 64)) · 4 B = 180,480; × 4 = 721,920
    # Q, K, V read: 3 · 32·10·8·8 · 4 B = 245,760 ; context written: 81,920
    # scores: 32·8·10·10 · 4 B = 102,400, × SCORE_PASSES (4) = 409,600
    # 721,920 + 245,760 + 81,920 + 409,600 = 1,459,200
    assert SCORE_PASSES == 4
    assert block_bytes_moved(TEXTBOOK, 4, materializes_scores=True) == 1_459_200
    assert block_bytes_moved(TEXTBOOK, 4, materializes_scores=False) == 1_459_200 - 409_600


def test_roofline_compute_bound() -> None:
    h100 = get_profile("h100")
    # 989e9 FLOP / 989e12 FLOP/s = 1 ms ; 1.675e9 B / 3350e9 B/s = 0.5 ms
    result = roofline(989_000_000_000, 1_675_000_000, h100)
    assert result.bound == "compute"
    assert result.time_s == pytest.approx(1e-3)
    assert result.memory_time_s == pytest.approx(5e-4)
    assert result.arithmetic_intensity == pytest.approx(989 / 1.675)


def test_roofline_memory_bound_and_no_bytes() -> None:
    h100 = get_profile("h100")
    # 3.35e9 B / 3350e9 B/s = 1 ms ≫ 1e9 / 989e12 s
    result = roofline(1_000_000_000, 3_350_000_000, h100)
    assert result.bound == "memory"
    assert result.time_s == pytest.approx(1e-3)
    assert roofline(10, 0, h100).arithmetic_intensity is None


def test_cross_attention_cache_is_static() -> None:
    layout = _layout(d_model=64, h=4, h_kv=4, d_k=16, b=2, n_q=7, n_kv=11, kind="cross")
    mem = block_memory(layout, element_bytes=2, materializes_scores=True)
    # 256 B per encoder position · 2 · 11, once per source sequence
    assert mem.kv_cache_bytes_static == mem.kv_cache_bytes == 5_632


def test_encoder_self_attention_caches_nothing() -> None:
    mem = block_memory(TEXTBOOK, element_bytes=2, materializes_scores=True)
    assert (mem.kv_cache_bytes_per_token, mem.kv_cache_bytes, mem.kv_cache_bytes_static) == (
        0, 0, 0)


def test_window_caps_the_cache_and_the_causal_work() -> None:
    windowed = replace(GQA, window=4)
    mem = block_memory(windowed, element_bytes=2, materializes_scores=False)
    # still 4,096 B per generated token, but only 4 of the 16 positions are held
    assert mem.kv_cache_bytes_per_token == 4_096
    assert mem.kv_cache_bytes == 4_096 * 4
    flops = block_flops(windowed)
    # rows keep 1, 2, 3, then 4 keys: 6 + 13·4 = 58 pairs per head, 32 heads
    projections = flops.q_proj + flops.k_proj + flops.v_proj + flops.o_proj
    per_pair = 2 * 128 + SOFTMAX_FLOPS_PER_ELEMENT + 2 * 128
    assert flops.causal_total == projections + 32 * 58 * per_pair
    # one 128×128 tile holds every pair: 16·16 computed
    assert flops.causal_tiles_total == projections + 32 * 256 * per_pair


def test_latent_width_is_what_is_cached() -> None:
    latent = replace(GQA, latent_width=576)
    # DeepSeek-V3: kv_lora_rank 512 + rope 64 = 576 elements, 1,152 B at bf16
    assert kv_bytes_per_position(latent, 2) == 1_152
    assert block_memory(latent, 2, False).kv_cache_bytes_per_token == 1_152


def test_scaling_keeps_fp32_math_scores_and_caps_windows() -> None:
    from mhaudit.cost.builder import build_block
    from mhaudit.cost.scaling import project

    t4 = get_profile("t4")
    # d_k = 20 in fp16 on a T4 runs the math fallback: scores at 4 B
    odd = replace(GQA, implementation="sdpa", head_dim=20, v_head_dim=20, window=1024)
    block = build_block(odd, "float16", t4)
    (point,) = project([block], [2048], element_bytes=2)
    # 1 · 32 · 2048 · 2048 · 4 B; cache (8·20 + 8·20) · 2 B per token, 1,024 positions held
    assert point.scores_bytes == 32 * 2048 * 2048 * 4
    assert point.kv_cache_bytes == (8 * 20 * 2) * 2 * 1024


def test_one_core_helper_splits_into_scores_softmax_context() -> None:
    from mhaudit.cost.arithmetic import attention_flops, attention_parts
    from mhaudit.cost.block import core_flops

    # bh=2, n_q=3, n_kv=5, d_k=4, d_v=6: scores 2·2·3·5·4 = 240, softmax 3·2·3·5 = 90,
    # context 2·2·3·5·6 = 360
    assert attention_parts(2, 3, 5, 4, 6) == (240, 90, 360)
    assert attention_flops(2, 3, 5, 4, 6) == 690
    assert attention_flops(2, 3, 5, 4, 6, with_softmax=False) == 600
    block = make_block(heads=4, kv_heads=2, head_dim=16, seq=32, batch=2)
    f = block.flops
    assert core_flops(block.layout, 2, 32, 32) == f.scores + f.softmax + f.context
