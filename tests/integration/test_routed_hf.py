"""JetMoE's mixture of attention heads: num_attention_heads is num_key_value_heads times
the experts each token picks (JetMoeConfig.__post_init__), and the query the attention reads
holds the picked experts' heads side by side."""

from __future__ import annotations

import pytest
import torch

from mhaudit.api import audit

tf = pytest.importorskip("transformers")


def test_jetmoe_query_heads_are_the_picked_experts_heads() -> None:
    config = tf.JetMoeConfig(hidden_size=64, num_key_value_heads=2, kv_channels=16,
                             num_experts_per_tok=2, num_local_experts=4, intermediate_size=128,
                             num_hidden_layers=1, vocab_size=64)
    assert config.num_attention_heads == 4
    torch.manual_seed(0)
    report = audit(tf.JetMoeModel(config).eval(), (torch.zeros(1, 8, dtype=torch.long),))
    (block,) = report.blocks
    lay = block.layout
    assert (lay.num_heads, lay.num_kv_heads, lay.head_dim, lay.d_model, lay.kind) == (
        4, 2, 16, 64, "self")
