"""Text layouts of real transformers models: ESMC's QK-norm over Q's whole width,
ProphetNet's n-gram predict streams and Perception Encoder's pair rotations keep the
config's heads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mhaudit.api import audit, audit_target

tf = pytest.importorskip("transformers")


def test_esmc_layer_norm_over_all_query_features() -> None:
    config = tf.EsmcConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128,
                           num_hidden_layers=1, vocab_size=64)
    with torch.device("meta"):
        report = audit(tf.EsmcModel(config).eval(), (torch.zeros(1, 8, dtype=torch.long),))
    (block,) = report.blocks
    lay = block.layout
    assert (lay.num_heads, lay.num_kv_heads, lay.head_dim, lay.d_model, lay.kind) == (
        4, 4, 16, 64, "self")
    assert block.params.total == 4 * 64 * 64  # no biases; q_norm/k_norm stay the norms'


def test_pe_audio_pair_rotations_keep_the_kv_heads(tmp_path: Path) -> None:
    # PeAudioEncoderAttention's apply_rotary_pos_emb: (k.reshape(..., 8, 1, 2) * freqs_cis)
    # .sum(5).flatten(3), freqs_cis (…, 16 / 2, 2, 2): a 2×2 matmul per pair of features,
    # so K keeps its 2 heads of head_dim 16 (k_proj 64 → 2 · 16) for 4 query heads.
    data = {"model_type": "pe_audio_encoder", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "dac_config": {"encoder_hidden_size": 8}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    (block,) = audit_target(str(path), seq_len=8).blocks
    lay = block.layout
    assert (lay.num_heads, lay.num_kv_heads, lay.head_dim, lay.d_model, lay.kind) == (
        4, 2, 16, 64, "self")
    # q_proj and o_proj 64·64, k_proj and v_proj 64·32, no biases (attention_bias False).
    assert [p.params for p in (lay.q, lay.k, lay.v, lay.o)] == [64 * 64, 64 * 32, 64 * 32,
                                                                 64 * 64]


def test_prophetnet_predict_streams_keep_the_decoder_heads() -> None:
    config = tf.ProphetNetConfig(
        hidden_size=64, num_encoder_attention_heads=4, num_decoder_attention_heads=4,
        num_encoder_layers=1, num_decoder_layers=1, encoder_ffn_dim=128, decoder_ffn_dim=128,
        vocab_size=64, ngram=2, num_buckets=32, max_position_embeddings=64)
    ids = torch.zeros(1, 8, dtype=torch.long)
    with torch.device("meta"):
        model = tf.ProphetNetModel(config).eval()
        report = audit(model, {"input_ids": ids, "decoder_input_ids": ids})
    assert [b.layout.num_heads for b in report.blocks] == [4] * len(report.blocks)
    names = [b.layout.name for b in report.blocks]
    assert "decoder.layers.0.self_attn#2" in names  # the predict streams' attention
    by_name = {b.layout.name: b for b in report.blocks}
    # The relative-position projection (64 → 32 buckets · 4 heads) is a score bias, counted
    # in the main stream's block; the predict streams read the same weight.
    assert by_name["decoder.layers.0.self_attn"].params.score_bias == 64 * 128 + 128
    assert by_name["decoder.layers.0.self_attn#2"].params.score_bias == 0


@pytest.mark.slow
def test_glm5_next_latent_keys_without_rotary_features() -> None:
    # qk_rope_head_dim = 0: expand_kv copies the shared rotary part into an empty slice of K;
    # K is kv_b_proj's per-head part alone, 4 heads of qk_nope_head_dim = 16.
    config = tf.Glm5NextTextConfig(
        hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2,
        kv_lora_rank=32, q_lora_rank=32, qk_rope_head_dim=0, qk_nope_head_dim=16,
        v_head_dim=16, vocab_size=64, pad_token_id=0, max_position_embeddings=64,
        index_head_dim=16, index_n_heads=4, linear_head_dim=16, linear_num_heads=4,
        layer_types=["linear_attention", "indexed_attention"], indexer_types=["full", "full"],
        mlp_layer_types=["dense", "sparse"])
    with torch.device("meta"):
        model = tf.Glm5NextTextModel(config).eval()
        report = audit(model, (torch.zeros(1, 16, dtype=torch.long),))
    softmax = [b for b in report.blocks if b.layout.name == "layers.1.self_attn"]
    (block,) = softmax
    lay = block.layout
    assert (lay.num_heads, lay.num_kv_heads, lay.head_dim, lay.v_head_dim, lay.d_model) == (
        4, 4, 16, 16, 64)
    # q_a 64·32 + q_b 32·(4·16); kv_a 64·32 + kv_b 32·(4·(16 + 16)); o 64·64 (norms excluded).
    assert lay.q is not None and lay.k is not None and lay.v is not None
    assert lay.q.params + lay.k.params + lay.v.params == 64 * 32 + 32 * 64 + 64 * 32 + 32 * 128


@pytest.mark.slow
def test_zaya_keys_keep_the_config_kv_heads() -> None:
    # ZAYA's CCA: K = conv(cat(q_proj, k_proj))[..., 64:] + the mean over each group of
    # 4 // 2 = 2 heads of (q + repeat_kv(k)) / 2: 2 KV heads of head_dim 16, 4 query heads.
    config = tf.ZayaConfig(
        hidden_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=1,
        router_hidden_size=64, vocab_size=64, layer_types=["hybrid"], pad_token_id=0,
        bos_token_id=1, eos_token_id=2, max_position_embeddings=64, cca_time0=2, cca_time1=2)
    with torch.device("meta"):
        report = audit(tf.ZayaModel(config).eval(), (torch.zeros(1, 16, dtype=torch.long),))
    (block,) = report.blocks
    lay = block.layout
    assert (lay.num_heads, lay.num_kv_heads, lay.head_dim, lay.v_head_dim, lay.d_model) == (
        4, 2, 16, 16, 64)


@pytest.mark.slow
def test_inkling2_full_layer_keys_read_their_projection_not_the_conv_kernels() -> None:
    # Inkling2DynamicShortConvolution: taps = weight_proj(x) (64 → 2 heads · 4 taps) plus a
    # static (4, 32) kernel broadcast over each head's 16 features; K is k_proj.linear
    # (64 → 2 · 16) mixed by those taps: 2 KV heads of 16 for 4 query heads.
    config = tf.Inkling2TextConfig(
        vocab_size=256, unpadded_vocab_size=250, hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, swa_num_attention_heads=4,
        swa_num_key_value_heads=2, swa_head_dim=16, d_rel=16, layer_types=[
            "hybrid_sliding", "hybrid"], max_position_embeddings=128, moe_intermediate_size=32,
        n_routed_experts=4, num_experts_per_tok=2, eos_token_id=2)
    with torch.device("meta"):
        report = audit(tf.Inkling2TextModel(config).eval(),
                       (torch.zeros(1, 16, dtype=torch.long),))
    by_name = {b.layout.name: b.layout for b in report.blocks}
    full = by_name["layers.1.self_attn"]
    assert (full.num_heads, full.num_kv_heads, full.head_dim) == (4, 2, 16)
    assert full.k is not None and full.k.weight.endswith("k_proj.linear.weight")
    # attention_input (num_queries=3) gives Q, K and V their own mixes of the same tokens.
    assert full.kind == "self"
