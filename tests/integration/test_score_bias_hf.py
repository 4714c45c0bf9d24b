"""Score-bias parameters of real transformers models: every relative-position scheme's
learned terms are listed per block (a shared table once), none inside Q, K, V or O."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from mhaudit.api import audit
from mhaudit.data import Report

tf = pytest.importorskip("transformers")


def _audit(model: Any, *inputs: Any) -> Report:
    return audit(model.eval(), tuple(inputs))


def _numel(model: Any, *names: str) -> int:
    params = dict(model.named_parameters())
    return sum(params[n].numel() for n in names)


def _roles(report: Report) -> list[int]:
    return [b.params.total for b in report.blocks]


def test_t5_bucket_table_counts_in_the_layer_that_holds_it() -> None:
    config = tf.T5Config(d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=2,
                         vocab_size=64, relative_attention_num_buckets=8)
    with torch.device("meta"):
        model = tf.T5EncoderModel(config)
        report = _audit(model, torch.zeros(1, 8, dtype=torch.long))
    # 8 buckets · 4 heads = 32, in block 0; block 1 reuses block 0's bias.
    assert [b.params.score_bias for b in report.blocks] == [32, 0]
    assert _roles(report) == [4 * 32 * 32] * 2


def test_deberta_relative_embeddings_position_projections_and_norm() -> None:
    config = tf.DebertaV2Config(
        hidden_size=32, num_attention_heads=4, intermediate_size=64, num_hidden_layers=2,
        vocab_size=64, max_position_embeddings=64, position_buckets=8,
        relative_attention=True, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm")
    with torch.device("meta"):
        model = tf.DebertaV2Model(config)
        report = _audit(model, torch.zeros(1, 8, dtype=torch.long))
    shared = _numel(model, "encoder.rel_embeddings.weight", "encoder.LayerNorm.weight",
                    "encoder.LayerNorm.bias")  # 16·32 + 2·32 = 576
    per_layer = [_numel(model, *(f"encoder.layer.{i}.attention.self.pos_{r}_proj.{p}"
                                 for r in ("key", "query") for p in ("weight", "bias")))
                 for i in range(2)]  # 2·(32·32 + 32) = 2,112
    assert [b.params.score_bias for b in report.blocks] == [shared + per_layer[0],
                                                            per_layer[1]]
    assert _roles(report) == [4 * (32 * 32 + 32)] * 2


def test_deberta_shared_key_projection_stays_in_k() -> None:
    config = tf.DebertaV2Config(
        hidden_size=32, num_attention_heads=4, intermediate_size=64, num_hidden_layers=1,
        vocab_size=64, max_position_embeddings=64, position_buckets=8,
        relative_attention=True, pos_att_type=["p2c", "c2p"], share_att_key=True)
    with torch.device("meta"):
        model = tf.DebertaV2Model(config)
        report = _audit(model, torch.zeros(1, 8, dtype=torch.long))
    (block,) = report.blocks
    # Only the 16·32 relative embeddings: K and Q project them with their own weights.
    assert block.params.score_bias == 16 * 32
    assert block.params.total == 4 * (32 * 32 + 32)


def test_xlnet_content_and_position_biases_are_both_score_biases() -> None:
    config = tf.XLNetConfig(d_model=32, n_head=4, d_inner=64, n_layer=2, vocab_size=64)
    with torch.device("meta"):
        model = tf.XLNetModel(config)
        report = _audit(model, torch.zeros(1, 8, dtype=torch.long))
    for i, block in enumerate(report.blocks):
        # r (32·32), r_w_bias and r_r_bias (4·8 each); segment terms need token types.
        want = _numel(model, *(f"layer.{i}.rel_attn.{n}" for n in ("r", "r_w_bias", "r_r_bias")))
        assert block.params.score_bias == want == 1088
        assert (block.params.q, block.params.q_bias) == (32 * 32, 0)


def test_swin_window_tables_per_stage() -> None:
    config = tf.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                           num_heads=[2, 4], window_size=4)
    with torch.device("meta"):
        model = tf.SwinModel(config)
        report = _audit(model, torch.zeros(1, 3, 32, 32))
    # (2·4 − 1)² offsets · heads: 49·2 and 49·4.
    assert [b.params.score_bias for b in report.blocks] == [98, 196]


def test_report_names_the_rule() -> None:
    config = tf.T5Config(d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=1,
                         vocab_size=64, relative_attention_num_buckets=8)
    with torch.device("meta"):
        report = _audit(tf.T5EncoderModel(config), torch.zeros(1, 8, dtype=torch.long))
    data = report.to_dict()
    assert "params.score_bias" in data["conventions"]["score_bias"]
    assert data["blocks"][0]["params"]["score_bias"] == 32
    assert data["blocks"][0]["params"]["total"] == 4 * 32 * 32
