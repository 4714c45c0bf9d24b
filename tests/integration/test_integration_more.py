"""More third-party layouts: QK-norm, late biases, tied modules, extra inputs to O."""

from __future__ import annotations

from typing import Any

import torch
import transformers as tf

from mhaudit.api import audit
from mhaudit.data import Report


def _audit(model_cls: Any, config: Any, impl: str | None = None, **inputs: Any) -> Report:
    if impl is not None:
        config._attn_implementation = impl
    with torch.device("meta"):
        model = model_cls(config)
        batch = {k: torch.zeros(*v, dtype=torch.long) for k, v in inputs.items()}
    return audit(model, batch)


def _explained(report: Report) -> None:
    for block in report.blocks:
        assert not any(d.reason.startswith("not explained") for d in block.params.deviations)
        assert block.params.textbook + sum(d.params for d in block.params.deviations) == (
            block.params.total
        )


def test_falcon_new_architecture_gqa_broadcasts_kv_heads() -> None:
    config = tf.FalconConfig(hidden_size=64, num_attention_heads=4, num_kv_heads=2,
                             new_decoder_architecture=True, num_hidden_layers=1, vocab_size=100)
    for impl in ("eager", "sdpa"):
        block = _audit(tf.FalconModel, config, impl, input_ids=(2, 16)).blocks[0]
        # d = 64, h = 4, h_kv = 2, d_k = 16, no bias: q 64·64, k = v = 64·2·16, o 64·64
        assert (block.layout.num_heads, block.layout.num_kv_heads) == (4, 2)
        assert not block.layout.kv_shared
        assert block.params.total == 4_096 + 2 * 2_048 + 4_096


def test_persimmon_per_head_layernorm_is_walked_through() -> None:
    config = tf.PersimmonConfig(hidden_size=64, num_attention_heads=4, qk_layernorm=True,
                                num_hidden_layers=1, intermediate_size=128, vocab_size=100)
    report = _audit(tf.PersimmonModel, config, "sdpa", input_ids=(2, 16))
    lay = report.blocks[0].layout
    assert (lay.d_model, lay.num_heads, lay.num_kv_heads, lay.head_dim) == (64, 4, 4, 16)
    # fused query_key_value 64 → 192 with bias, dense 64 → 64 with bias: 4·64² + 4·64
    assert report.blocks[0].params.total == 16_640
    _explained(report)


def test_deberta_biases_added_after_the_fused_split_are_counted() -> None:
    config = tf.DebertaConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1,
                              intermediate_size=128, vocab_size=100, max_position_embeddings=64,
                              relative_attention=False)
    params = _audit(tf.DebertaModel, config, "eager", input_ids=(2, 16)).blocks[0].params
    # in_proj has no bias; q_bias and v_bias (64 each) are added after chunk; K has none
    assert (params.q, params.k, params.v) == (4_160, 4_096, 4_160)
    assert params.total == 4_160 + 4_096 + 4_160 + 4_160


def test_nystromformer_context_plus_conv_still_reaches_the_output_projection() -> None:
    config = tf.NystromformerConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1,
                                    intermediate_size=128, vocab_size=100,
                                    max_position_embeddings=64, num_landmarks=16,
                                    segment_means_seq_len=16)
    report = _audit(tf.NystromformerModel, config, "eager", input_ids=(2, 16))
    block = report.blocks[0]
    assert block.layout.name == "encoder.layer.0.attention"
    assert block.layout.o is not None and block.params.o == 64 * 64 + 64


def test_tied_shared_block_is_named_where_it_runs() -> None:
    config = tf.ZambaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                            num_hidden_layers=4, attn_layer_period=2, attn_layer_offset=0,
                            intermediate_size=128, vocab_size=100, mamba_d_state=8,
                            attention_head_dim=32, use_mamba_kernels=False)
    report = _audit(tf.ZambaModel, config, None, input_ids=(2, 16))
    assert [b.name for b in report.blocks] == [
        "layers.2.shared_transf.self_attn", "layers.3.shared_transf.self_attn"
    ]


def test_convbert_output_projection_reading_a_second_branch_is_explained() -> None:
    config = tf.ConvBertConfig(hidden_size=64, num_attention_heads=4, head_ratio=2,
                               embedding_size=64, num_hidden_layers=1, intermediate_size=128,
                               vocab_size=100, max_position_embeddings=64)
    report = _audit(tf.ConvBertModel, config, "eager", input_ids=(2, 16))
    block = report.blocks[0]
    # head_ratio 2 halves the attention heads: h = 2 of d_k = 16; O reads 32 + 32 conv features
    assert (block.layout.num_heads, block.layout.head_dim) == (2, 16)
    assert any("also reads 32 features" in d.reason for d in block.params.deviations)
    _explained(report)


def test_causal_masks_built_from_position_indices_are_recognised() -> None:
    config = tf.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                            num_attention_heads=4, num_key_value_heads=4, vocab_size=100,
                            use_cache=False)
    for impl in ("eager", "sdpa"):
        report = _audit(tf.LlamaForCausalLM, config, impl, input_ids=(2, 16))
        assert report.blocks[0].layout.causal is True
    bert = tf.BertConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                         intermediate_size=128, vocab_size=100)
    assert _audit(tf.BertModel, bert, "sdpa", input_ids=(2, 16)).blocks[0].layout.causal is False


def test_a_projection_bias_added_separately_is_counted_once() -> None:
    # Falcon's linear layers compute x @ Wᵀ and then add the bias of the whole fused output.
    config = tf.FalconConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1,
                             multi_query=False, new_decoder_architecture=False, alibi=True,
                             bias=True, vocab_size=100)
    report = _audit(tf.FalconModel, config, "sdpa", input_ids=(2, 16))
    # fused query_key_value 64 → 192 with bias, dense 64 → 64 with bias: 4·64² + 4·64
    assert report.blocks[0].params.total == 16_640
    _explained(report)


def test_block_sparse_attention_pieces_are_one_block() -> None:
    # BigBird's block-sparse path runs several softmax(QKᵀ)V pieces that read one Q/K/V.
    config = tf.BigBirdConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1,
                              intermediate_size=128, vocab_size=100, max_position_embeddings=64,
                              attention_type="block_sparse", block_size=2, num_random_blocks=1)
    report = _audit(tf.BigBirdModel, config, "eager", input_ids=(2, 32))
    assert len(report.blocks) == 1
    lay = report.blocks[0].layout
    assert (lay.num_heads, lay.num_kv_heads, lay.head_dim, lay.kv_shared) == (4, 4, 16, False)
    assert lay.core_count > 1
    # query/key/value/output.dense, each 64 → 64 with bias: 4·64² + 4·64
    assert report.blocks[0].params.total == 16_640
    _explained(report)
