"""Longformer's and LED's sliding chunks: one block per layer with the config's heads and
window, costed as the chunks compute it (tiny configs, built on meta, no downloads)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mhaudit.api import audit, audit_target
from mhaudit.data import Report

tf = pytest.importorskip("transformers")

SEQ = 16
"""Tokens; a multiple of the window, so nothing is padded."""


def _report(tmp_path: Path, config: Any) -> Report:
    path = tmp_path / "config.json"
    config.to_json_file(str(path))  # audited from its config: the CPU twin answers .item()
    return audit_target(str(path), seq_len=SEQ, batch_size=1)


def _counted(model: Any, **inputs: torch.Tensor) -> int:
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model.eval()(**inputs)
    return int(counter.get_total_flops())


@pytest.mark.slow
def test_longformer_sliding_chunks_are_one_block_per_layer(tmp_path: Path) -> None:
    config = tf.LongformerConfig(vocab_size=64, hidden_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=128,
                                 attention_window=4, max_position_embeddings=64)
    report = _report(tmp_path, config)
    assert [b.layout.name for b in report.blocks] == [
        "encoder.layer.0.attention", "encoder.layer.1.attention"]
    for block in report.blocks:
        lay = block.layout
        # config: 4 heads of 64 / 4 = 16; attention_window 4 = w = 2 keys either side
        assert (lay.num_heads, lay.num_kv_heads, lay.head_dim, lay.d_model) == (4, 4, 16, 64)
        assert (lay.seq_len_q, lay.seq_len_kv, lay.window, lay.window_chunk) == (16, 16, 4, 4)
        assert (lay.kind, bool(lay.causal)) == ("self", False)
        # c = 16/2 − 1 = 7 chunks of 4: scores 2·4·7·4·4·16 = 14,336; context over
        # 16/2 = 8 chunks of 2 queries by 6 keys: 2·4·8·2·6·16 = 12,288
        assert (block.flops.scores, block.flops.context) == (14336, 12288)
    families = report.totals.flops_by_family
    model = tf.LongformerModel(config)
    counted = _counted(model, input_ids=torch.zeros(1, SEQ, dtype=torch.long))
    assert abs(families["matmul"] + families["conv"] - counted) <= 0.01 * counted


def test_led_encoder_layers_are_banded_and_the_decoder_dense(tmp_path: Path) -> None:
    config = tf.LEDConfig(vocab_size=64, d_model=64, encoder_layers=1, decoder_layers=1,
                          encoder_attention_heads=4, decoder_attention_heads=4,
                          encoder_ffn_dim=128, decoder_ffn_dim=128, attention_window=4,
                          max_encoder_position_embeddings=64,
                          max_decoder_position_embeddings=64)
    report = _report(tmp_path, config)
    by_name = {b.layout.name: b.layout for b in report.blocks}
    assert len(report.blocks) == 3
    encoder = by_name["encoder.layers.0.self_attn"]
    assert (encoder.num_heads, encoder.head_dim, encoder.window, encoder.window_chunk) == (
        4, 16, 4, 4)
    decoder = [lay for name, lay in by_name.items() if name.startswith("decoder")]
    assert {(lay.num_heads, lay.head_dim, lay.window_chunk) for lay in decoder} == {
        (4, 16, None)}
    assert sorted(lay.kind for lay in decoder) == ["cross", "self"]


def test_longformer_global_tokens_are_keys_beside_the_band() -> None:
    config = tf.LongformerConfig(vocab_size=64, hidden_size=64, num_hidden_layers=1,
                                 num_attention_heads=4, intermediate_size=128,
                                 attention_window=4, max_position_embeddings=64)
    model = tf.LongformerModel(config).eval()
    ids = torch.zeros(1, SEQ, dtype=torch.long)
    glob = torch.zeros(1, SEQ, dtype=torch.long)
    glob[0, 0] = 1  # one global token
    report = audit(model, {"input_ids": ids, "global_attention_mask": glob})
    banded = [b for b in report.blocks if b.layout.window_chunk]
    assert len(banded) == 1
    lay, flops = banded[0].layout, banded[0].flops
    assert (lay.num_heads, lay.head_dim, lay.seq_len_q, lay.window, lay.global_keys) == (
        4, 16, 16, 4, 1)
    # the band's 14,336 and 12,288 (as without global tokens) plus the global key's column:
    # scores 2·4·16·1·16 = 2,048, context 2·4·16·1·16 = 2,048
    assert (flops.scores, flops.context) == (14336 + 2048, 12288 + 2048)
    # softmax over 16 rows of 2w + 1 + 1 = 6 keys per head: 3·4·16·6 = 1,152
    assert flops.softmax == 1152
