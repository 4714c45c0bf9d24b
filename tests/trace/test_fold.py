"""Tracing repeated layers once gives the same report as tracing every layer."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import GPTNeoConfig, GPTNeoModel, LlamaConfig, LlamaModel

from mhaudit.api import audit
from mhaudit.render.serialize import block_to_dict
from mhaudit.trace.fold import find_lists, folded


def _compare(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
    fast = audit(model, inputs)
    slow = audit(model, inputs, fold=False)
    assert fast.extras.get("folded_layers"), "expected the layer list to be folded"
    assert [block_to_dict(b) for b in fast.blocks] == [block_to_dict(b) for b in slow.blocks]
    assert fast.totals.flops == slow.totals.flops
    assert fast.totals.attention_params == slow.totals.attention_params
    assert fast.totals.kv_cache_bytes_per_token == slow.totals.kv_cache_bytes_per_token


def test_llama_decoder_folds_to_one_layer() -> None:
    with torch.device("meta"):
        config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=6,
                             num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
        model = LlamaModel(config)
        ids = torch.zeros(1, 16, dtype=torch.long)
    (plan,) = find_lists(model)
    assert plan.path == "layers" and plan.kept == (0,) and plan.length == 6
    _compare(model, (ids,))


def test_alternating_layer_types_keep_one_representative_each() -> None:
    # GPT-Neo alternates global and local (windowed) attention: two kinds of layer.
    with torch.device("meta"):
        config = GPTNeoConfig(hidden_size=64, num_layers=6, num_heads=4, vocab_size=100,
                              attention_types=[[["global", "local"], 3]], window_size=8)
        model = GPTNeoModel(config)
        ids = torch.zeros(1, 16, dtype=torch.long)
    (plan,) = find_lists(model)
    assert plan.kept == (0, 1)
    assert plan.members == ((0, 2, 4), (1, 3, 5))
    _compare(model, (ids,))


def test_torch_transformer_encoder_folds() -> None:
    with torch.device("meta"):
        layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
        model = nn.TransformerEncoder(layer, num_layers=5, enable_nested_tensor=False)
        x = torch.zeros(2, 8, 32)
    _compare(model, (x,))


def test_short_and_weight_sharing_lists_are_not_folded() -> None:
    shared = nn.Linear(8, 8)
    assert find_lists(nn.Sequential(shared, shared, shared, shared, shared)) == []
    assert find_lists(nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])) == []


def test_folding_restores_the_model() -> None:
    model = nn.Module()
    model.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])
    original = list(model.layers)
    with folded(model) as plans:
        assert len(model.layers) == 1 and plans[0].length == 4
    assert list(model.layers) == original
    with pytest.raises(RuntimeError), folded(model):
        raise RuntimeError("boom")
    assert list(model.layers) == original
