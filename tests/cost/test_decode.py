"""The decode step: hand arithmetic on GQA, MQA, latent, sliding-window and cross layouts."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import mhaudit
from mhaudit.cost.devices import get_profile
from mhaudit.data import AttentionBlock
from mhaudit.errors import ConfigError
from mhaudit.phases.decode import decode_step, experts_touched, kv_read_bytes
from tests.fixtures.blocks import make_block

H100 = get_profile("h100")
PEAK, BANDWIDTH = 989e12, 3350e9


def _prefill_core(block: AttentionBlock) -> int:
    return block.flops.scores + block.flops.softmax + block.flops.context


def _step(block: AttentionBlock, context: int, per_token: int = 5000, weights: int = 10_000,
          batch: int = 1) -> tuple[int, int, float]:
    tokens = block.layout.batch_size * block.layout.seq_len_q
    cost = decode_step([block], forward_flops=_prefill_core(block) + per_token * tokens,
                       tokens=tokens, batch_size=batch, context=context, weight_bytes=weights,
                       param_bytes=weights, element_bytes=2, profile=H100)
    return cost.flops_per_step, cost.bytes_per_step, cost.time_per_step_s


def test_gqa_step_by_hand() -> None:
    # h 8, h_kv 2, d_k 32 at bf16: K and V per token 2·2·32·2 B = 256 B.
    block = make_block(heads=8, kv_heads=2, head_dim=32, d_model=256, seq=128, causal=True)
    assert block.memory.kv_cache_bytes_per_token == 256
    flops, moved, time_s = _step(block, context=1000)
    # core: QKᵀ 2·8·1000·32 + softmax 3·8·1000 + PV 2·8·1000·32 = 512,000 + 24,000 + 512,000
    assert flops == 5000 + 1_048_000
    # weights 10,000 + cache read 1000·256 + the new token's K/V 256
    assert moved == 10_000 + 256_000 + 256
    assert time_s == pytest.approx(max(flops / PEAK, moved / BANDWIDTH))


def test_mqa_reads_one_head_of_cache() -> None:
    block = make_block(heads=8, kv_heads=1, head_dim=32, d_model=256, seq=128, causal=True)
    _, moved, _ = _step(block, context=1000)
    # K and V of one head: 2·32·2 B = 128 B per token; 1000 read + 1 written
    assert moved == 10_000 + 128 * 1001


def test_latent_cache_reads_the_latent() -> None:
    block = make_block(heads=8, head_dim=32, d_model=256, seq=128, causal=True)
    layout = replace(block.layout, cached_width=576)  # kv_lora_rank 512 + rope 64
    from mhaudit.cost.block import block_memory

    latent = AttentionBlock(layout, block.params, block.flops, block_memory(layout, 2, False))
    assert latent.memory.kv_cache_bytes_per_token == 1152  # 576 elements · 2 B
    _, moved, _ = _step(latent, context=4096)
    assert moved == 10_000 + 1152 * 4096 + 1152


def test_sliding_window_caps_reads_and_work() -> None:
    block = make_block(heads=8, kv_heads=2, head_dim=32, d_model=256, seq=128, causal=True)
    windowed = replace(block, layout=replace(block.layout, window=256))
    flops, moved, _ = _step(windowed, context=1000)
    # 256 keys, not 1000: 2·8·256·32·2 + 3·8·256 = 262,144 + 6,144
    assert flops == 5000 + 268_288
    assert moved == 10_000 + 256 * 256 + 256
    assert kv_read_bytes(windowed, batch=3, context=100) == 3 * 100 * 256  # under the window


def test_cross_attention_reads_its_static_cache_and_writes_nothing() -> None:
    block = make_block(heads=4, head_dim=16, d_model=64, seq=50, kind="cross")
    cross = replace(block, memory=replace(block.memory, kv_cache_bytes_static=12_800))
    cost = decode_step([cross], forward_flops=_prefill_core(cross) + 50 * 100, tokens=50,
                       batch_size=2, context=10, weight_bytes=1000, param_bytes=1000,
                       element_bytes=2, profile=H100)
    assert cost.kv_read_bytes == 2 * 12_800 and cost.kv_write_bytes == 0
    assert cost.kv_cache_bytes == 2 * 12_800
    # 50 source keys: 2·2·4·50·16·2 + 3·2·4·50 = 25,600 + 1,200; the MLP stand-in 100 per token
    assert cost.flops_per_step == 2 * 100 + 26_800


def test_experts_touched_uniform_top_k() -> None:
    # E = 8, k = 2: one token touches 2 experts; 2 tokens 8·(1 − 0.75²) = 3.5
    assert experts_touched(8, 2, 1) == pytest.approx(2.0)
    assert experts_touched(8, 2, 2) == pytest.approx(3.5)
    assert experts_touched(8, 2, 10_000) == pytest.approx(8.0)
    with pytest.raises(ConfigError):
        experts_touched(8, 9, 1)


@given(st.integers(1, 64), st.integers(1, 8), st.integers(1, 200))
def test_experts_touched_is_between_k_and_e(experts: int, k: int, tokens: int) -> None:
    k = min(k, experts)
    touched = experts_touched(experts, k, tokens)
    # at least the k experts of one token, at most every expert or k per token
    assert k - 1e-9 <= touched <= min(k * tokens, experts) + 1e-9


@pytest.mark.slow
def test_llama_shape_decode_matches_the_closed_form() -> None:
    # The Llama-2-70B arithmetic on a scaled-down shape: 4 layers, d 512, 8 heads of 64,
    # 2 KV heads; 2·N_non-embedding + L·4·h·c·d_k FLOPs, 2 B·N + L·2·h_kv·d_k·2 B·c bytes.
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=2, vocab_size=1000, max_position_embeddings=4096)
    with torch.device("meta"):
        model = transformers.LlamaModel(config)
        ids = torch.zeros(1, 256, dtype=torch.long)
    report = mhaudit.audit(model, (ids,), decode=True, context=4096)
    d = report.decode
    assert d is not None
    n_non_embedding = sum(p.numel() for p in model.parameters()) - 1000 * 512
    layers, h, h_kv, d_k, c = 4, 8, 2, 64, 4096
    flops = 2 * n_non_embedding + layers * 4 * h * c * d_k
    moved = 2 * n_non_embedding + layers * 2 * h_kv * d_k * 2 * c
    assert d.flops_per_step == pytest.approx(flops, rel=0.02)
    assert d.bytes_per_step == pytest.approx(moved, rel=0.02)
    assert d.time_per_step_s == pytest.approx(max(flops / PEAK, moved / BANDWIDTH), rel=0.02)
    assert d.kv_cache_bytes == layers * 2 * h_kv * d_k * 2 * c
    assert d.bound == "memory" and d.fits
    assert [b.name for b in d.blocks] == [b.name for b in report.blocks]
    assert sum(b.kv_read_bytes for b in d.blocks) == d.kv_read_bytes


def test_decode_needs_a_self_attention_block() -> None:
    from mhaudit.data import ModelInfo, Report, Totals
    from mhaudit.phases.decode import decode_for_report

    cross = make_block(kind="cross")
    report = Report(ModelInfo("m", "M", 10, "t", "meta", "bfloat16", {}), (cross,),
                    Totals(1, 10, 10, 1.0, 100, 10, 0))
    with pytest.raises(ConfigError, match="self-attention"):
        decode_for_report(report, 100, 2, H100, None)


@pytest.mark.slow
def test_moe_step_reads_only_the_experts_it_touches() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.MixtralConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2, vocab_size=100)
    with torch.device("meta"):
        model = transformers.MixtralForCausalLM(config)
        ids = torch.zeros(1, 16, dtype=torch.long)
    d = mhaudit.audit(model, (ids,), decode=True).decode
    assert d is not None
    # one expert: gate_up 256·64 + down 64·128 = 24,576 elements, 49,152 B at bf16; one
    # token touches 2 of 8, so 6 idle experts in each of 4 layers are not read
    idle = 4 * 6 * 49_152
    gathered = 100 * 64 * 2 - 64 * 2  # the embedding table but the one row gathered
    assert d.weight_bytes == d.param_bytes - gathered - idle
    assert "E·(1 − (1 − k/E)^tokens)" in d.convention


def test_whatif_columns_and_the_report_decode_share_one_block_builder() -> None:
    from mhaudit.cost.builder import build_block
    from mhaudit.phases.whatif_columns import phase_columns
    from mhaudit.whatif import LayoutSpec, layout_for

    spec = LayoutSpec(d_model=256, heads=8, kv_heads=2, seq_len=128)
    lay = layout_for(spec, 8, 2)
    block = build_block(lay, "bfloat16", H100)
    cost = decode_step([block], forward_flops=_prefill_core(block), tokens=128, batch_size=1,
                       context=128, weight_bytes=0, param_bytes=0, element_bytes=2,
                       profile=H100)
    columns = phase_columns(lay, "bfloat16", H100)
    assert columns.decode_step_s == cost.blocks[0].time_s
    assert columns.decode_kv_read_bytes == cost.kv_read_bytes == cost.blocks[0].kv_read_bytes


def _latent(block: AttentionBlock, rank: int, rope: int) -> AttentionBlock:
    """``block`` as multi-head latent attention caching rank + rope elements per position."""
    from mhaudit.cost.block import block_memory

    assert block.layout.k is not None
    layout = replace(block.layout, latent_width=rank + rope, cached_width=rank + rope,
                     k=replace(block.layout.k, low_rank_width=rank))
    return AttentionBlock(layout, block.params, block.flops, block_memory(layout, 2, False))


def test_latent_decode_is_absorbed_by_default() -> None:
    # DeepSeek-V2-Lite's attention: 16 heads, QK head dim 192 (128 + rope 64), V 128,
    # kv_lora_rank d_c 512 + rope d_r 64 = the 576-wide latent, at 4096 cached tokens
    block = _latent(make_block(heads=16, head_dim=192, v_head_dim=128, d_model=2048, seq=64,
                               causal=True), rank=512, rope=64)
    tokens = block.layout.batch_size * block.layout.seq_len_q
    cost = decode_step([block], forward_flops=_prefill_core(block) + 5000 * tokens,
                       tokens=tokens, batch_size=1, context=4096, weight_bytes=10_000,
                       param_bytes=10_000, element_bytes=2, profile=H100)
    pairs = 16 * 4096  # 65,536 (head, key) pairs for one new token
    # absorbed: QKᵀ 2·65,536·576 = 75,497,472, softmax 3·65,536 = 196,608,
    # PV 2·65,536·512 = 67,108,864
    assert cost.flops_per_step == 5000 + 75_497_472 + 196_608 + 67_108_864
    # per-head dims: QKᵀ 2·65,536·192 = 25,165,824, PV 2·65,536·128 = 16,777,216
    assert cost.flops_per_step_non_absorbed == 5000 + 25_165_824 + 196_608 + 16_777_216
    assert pairs * 2 * 576 == 75_497_472
    assert cost.kv_read_bytes == 4096 * 576 * 2  # the latent, not per-head K/V


def test_dense_decode_has_no_latent_form() -> None:
    block = make_block(heads=8, kv_heads=2, head_dim=32, d_model=256, seq=128, causal=True)
    cost = decode_step([block], forward_flops=_prefill_core(block) + 5000 * 128, tokens=128,
                       batch_size=1, context=1000, weight_bytes=10_000, param_bytes=10_000,
                       element_bytes=2, profile=H100)
    assert cost.flops_per_step_non_absorbed is None


@pytest.mark.slow
def test_latent_model_names_its_decode_form() -> None:
    transformers = pytest.importorskip("transformers")
    # d_c 32 ≠ d_nope 16 and d_v 16, so the two forms differ
    config = transformers.DeepseekV3Config(
        vocab_size=128, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
        intermediate_size=96, moe_intermediate_size=32, n_routed_experts=4,
        num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=2, q_lora_rank=32,
        kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, n_group=1,
        topk_group=1, num_key_value_heads=4)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
        ids = torch.zeros(1, 16, dtype=torch.long)
    report = mhaudit.audit(model, (ids,), decode=True, context=1000)
    d = report.decode
    assert d is not None and d.flops_per_step_non_absorbed is not None
    layers, h, c = 2, 4, 1000
    # absorbed minus per-head, per layer: QKᵀ 2·h·c·((32 + 8) − 24), PV 2·h·c·(32 − 16)
    assert d.flops_per_step - d.flops_per_step_non_absorbed == layers * (
        2 * h * c * 16 + 2 * h * c * 16)
    data = report.to_dict()
    assert data["conventions"]["latent_attention_decode"].startswith("absorbed")
    assert data["decode"]["flops_per_step_non_absorbed"] == d.flops_per_step_non_absorbed
    assert "latent_attention_decode" not in mhaudit.audit(
        model, (ids,)).to_dict()["conventions"]


def _moe(name: str, implementation: str | None) -> Any:
    transformers = pytest.importorskip("transformers")
    small = {"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2}
    configs = {
        "phimoe": lambda: transformers.PhimoeConfig(
            **small, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2),
        "mixtral": lambda: transformers.MixtralConfig(
            **small, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2),
        "qwen2_moe": lambda: transformers.Qwen2MoeConfig(
            **small, intermediate_size=64, moe_intermediate_size=16, num_experts=4,
            num_experts_per_tok=2, shared_expert_intermediate_size=32),
    }
    config = configs[name]()
    if implementation is not None:
        config._experts_implementation = implementation
    return transformers.AutoModelForCausalLM.from_config(config)


# one expert, d = 32: PhiMoE and Mixtral gate_up 2·64·32 + down 32·64 = 6,144 elements,
# Qwen2-MoE (moe_intermediate 16) 2·16·32 + 32·16 = 1,536; at bf16 12,288 B and 3,072 B
@pytest.mark.parametrize(("name", "implementation", "expert_bytes"), [
    ("phimoe", None, 12_288),          # sparsemixer: a sampled selection, no topk
    ("mixtral", None, 12_288),         # top-k, grouped_mm
    ("qwen2_moe", "batched_mm", 3_072),  # expert rows gathered by the router's ids
    ("qwen2_moe", "eager", 3_072),     # a loop over the experts the router hit
])
def test_decode_reads_k_experts_per_token_whatever_the_router(
        name: str, implementation: str | None, expert_bytes: int) -> None:
    # the eager loop runs over the experts the router hit (``nonzero``): it traces with
    # real weights, where the values fix the shapes
    torch.manual_seed(0)
    with torch.device("cpu" if implementation == "eager" else "meta"):
        model = _moe(name, implementation)
        ids = torch.randint(0, 100, (1, 8))
    report = mhaudit.audit(model, (ids,), decode=True, dtype="bf16")
    d = report.decode
    assert d is not None and d.batch_size == 1
    # one token per step picks k = 2 of E = 4 experts: 2 idle experts in each of 2 layers
    # are not read, 2 · 2 · expert_bytes
    idle = 2 * 2 * expert_bytes
    gathered = 100 * 32 * 2 - 32 * 2  # the embedding table but the one row gathered
    assert d.weight_bytes == d.param_bytes - gathered - idle
    assert [(e.num_experts, e.top_k) for e in report.experts] == [(4, 2), (4, 2)]
    # params_active follows the same experts: (E − k)/E of each layer's expert elements
    totals = report.totals
    assert totals.params_active == report.model.params_total - 2 * 2 * expert_bytes // 2
