"""Tracing repeated layers once gives the same report as tracing every layer."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from transformers import GPTNeoConfig, GPTNeoModel, LlamaConfig, LlamaModel

from mhaudit.api import audit
from mhaudit.data.schema import block_to_dict
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
        # every position stays; the three left-out copies hold no parameters
        assert len(model.layers) == 4 and plans[0].length == 4
        assert sum(p.numel() for p in model.layers.parameters()) == 8 * 8 + 8
    assert list(model.layers) == original
    with pytest.raises(RuntimeError), folded(model):
        raise RuntimeError("boom")
    assert list(model.layers) == original


def test_a_forward_that_indexes_its_layers_by_position_folds_to_the_same_report() -> None:
    from fixtures.zoo_legacy import ByPosition

    with torch.device("meta"):
        model = ByPosition(layers=4).eval()
        x = torch.zeros(2, 6, 32)
    _compare(model, (x,))
    report = audit(model, (x,))
    assert [b.name for b in report.blocks] == [f"layers.{i}.self_attn" for i in range(4)]
    assert len(model.layers) == 4


class _StridedStack(nn.Module):
    """Five identical stride-2 convolutions, then self-attention over what is left: each
    copy of the layer sees half the sequence the one before it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv1d(16, 16, 3, stride=2) for _ in range(5))
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = conv(x)
        x = x.transpose(1, 2)
        return self.attn(x, x, x, need_weights=False)[0]


def test_a_layer_that_reshapes_what_it_passes_on_is_traced_unfolded() -> None:
    model = _StridedStack().eval()
    x = torch.zeros(1, 16, 256)
    report = audit(model, (x,))
    assert "folded_layers" not in report.extras
    # Lengths 256 → 127 → 63 → 31 → 15 → 7; each conv: 2·L_out·16·16·3 FLOPs.
    lengths = [127, 63, 31, 15, 7]
    assert report.totals.flops_by_family["conv"] == sum(2 * n * 16 * 16 * 3 for n in lengths)
    (block,) = report.blocks
    assert (block.layout.seq_len_q, block.layout.seq_len_kv) == (7, 7)


def test_named_sequential_children_keep_their_real_names() -> None:
    from fixtures.zoo_legacy import NamedSequential

    with torch.device("meta"):
        model = NamedSequential(layers=4).eval()
        x = torch.zeros(2, 6, 32)
    _compare(model, (x,))
    report = audit(model, (x,))
    real = {name for name, _ in model.named_modules()}
    assert [b.name for b in report.blocks] == [
        f"layers.encoder_layer_{i}.self_attn" for i in range(4)]
    assert all(b.name in real for b in report.blocks)
    assert report.groups[0].pattern == "layers.encoder_layer_{0..3}.self_attn"
    assert report.coverage.untraced_modules == ()


def test_hf_slice_over_every_layer_still_folds() -> None:
    # Llama iterates ``self.layers[: config.num_hidden_layers]``: a slice over all of them.
    with torch.device("meta"):
        config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                             num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
        model = LlamaModel(config)
        ids = torch.zeros(1, 16, dtype=torch.long)
    assert audit(model, (ids,)).extras["folded_layers"] == [
        {"list": "layers", "layers": 4, "traced": 1}]


@pytest.mark.parametrize(("names", "folded_name"), [
    (["layers.0.a", "layers.1.a", "layers.2.a"], "layers.{0..2}.a"),
    (["l.0.a", "l.2.a"], "l.{0,2}.a"),
    (["e.layer_0.sa", "e.layer_1.sa"], "e.layer_{0..1}.sa"),
    (["a.0.x", "a.1.x", "b.0.x", "b.1.x"], "{a,b}.{0..1}.x"),
    # Three of the four names a pattern would make: listed, never over-expanded.
    (["d.0.t.0.x", "d.0.t.1.x", "u.1.t.0.x"], "d.0.t.0.x, d.0.t.1.x, u.1.t.0.x"),
    ([f"m.{i}.{j}.x" for i in range(3) for j in range(2)][:5], "m.0.0.x (+4 more)"),
])
def test_group_patterns_expand_to_exactly_their_members(names: list[str],
                                                         folded_name: str) -> None:
    from mhaudit.assemble import fold_names

    assert fold_names(names) == folded_name


class _Aggregating(nn.Module):
    """A block that concatenates every layer's output (as HGNet's stages do): a shortened
    list would hand the projection after it fewer channels than it was built for."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(4)])
        self.attn = nn.MultiheadAttention(16 * 5, 4, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs = [x]
        for layer in self.layers:
            outputs.append(layer(outputs[-1]))
        y = torch.cat(outputs, dim=-1)  # (B, n, 16·5)
        return self.attn(y, y, y, need_weights=False)[0]


def test_a_forward_that_gathers_every_layer_output_folds_to_the_same_report() -> None:
    with torch.device("meta"):
        model = _Aggregating().eval()
        x = torch.zeros(2, 6, 16)
    _compare(model, (x,))
    report = audit(model, (x,))
    assert [(b.layout.d_model, b.layout.num_heads) for b in report.blocks] == [(80, 4)]
    # every layer counted once: 4·(16·16 + 16), none multiplied by a fold
    assert report.model.params_total == 4 * (16 * 16 + 16) + 4 * 80 * 80 + 4 * 80


class _Settings:
    """A config object with one entry per layer, as transformers' ``layer_types``."""

    def __init__(self, windows: list[int | None]) -> None:
        self.windows = windows


class _WindowedAttention(nn.Module):
    """Attention whose window is read from the config by the layer's own index."""

    def __init__(self, config: _Settings, layer_idx: int, read_own: bool) -> None:
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.read_own = read_own
        self.qkv = nn.Linear(32, 96)
        self.out = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor, window: int | None = None) -> torch.Tensor:
        if self.read_own:
            window = self.config.windows[self.layer_idx]
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, 4, 8).permute(2, 0, 3, 1, 4)  # (B, h, n, d_k)
        i = torch.arange(n)
        keep = i[:, None] >= i[None, :]
        if window is not None:
            keep = keep & (i[:, None] - i[None, :] < window)
        y = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return self.out(y.transpose(1, 2).reshape(b, n, 32))


class _FiveToOne(nn.Module):
    """Five windowed layers to one global one, the setting read from a per-layer list:
    by the layer from its config (``read_own``) or by the forward at the layer's position."""

    def __init__(self, read_own: bool, layers: int = 12) -> None:
        super().__init__()
        self.config = _Settings([None if (i + 1) % 6 == 0 else 4 for i in range(layers)])
        self.read_own = read_own
        self.layers = nn.ModuleList(_WindowedAttention(self.config, i, read_own)
                                    for i in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = x + (layer(x) if self.read_own else layer(x, self.config.windows[i]))
        return x


@pytest.mark.parametrize("read_own", [True, False], ids=["by-layer-index", "by-position"])
def test_a_per_layer_setting_gives_each_layer_its_own_window_when_folded(read_own: bool
                                                                          ) -> None:
    with torch.device("meta"):
        model = _FiveToOne(read_own).eval()
        x = torch.zeros(1, 16, 32)
    _compare(model, (x,))
    report = audit(model, (x,))
    # the oracle: the model's own list of windows, one entry per layer
    assert [b.layout.window for b in report.blocks] == model.config.windows
    assert report.extras["folded_layers"][0]["traced"] < 12


def _five_to_one() -> tuple[Any, nn.Module, torch.Tensor]:
    """A transformers model of twelve layers, five sliding (window 8) to one global."""
    from transformers import Gemma3TextConfig, Gemma3TextModel

    with torch.device("meta"):
        config = Gemma3TextConfig(vocab_size=100, hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=12, num_attention_heads=4,
                                  num_key_value_heads=2, head_dim=16, sliding_window=8)
        return config, Gemma3TextModel(config).eval(), torch.zeros(1, 32, dtype=torch.long)


def test_five_sliding_to_one_global_transformers_layers_fold_to_the_unfolded_report() -> None:
    config, model, ids = _five_to_one()
    _compare(model, (ids,))
    report = audit(model, (ids,))
    expected = [config.sliding_window if t == "sliding_attention" else None
                for t in config.layer_types]
    assert [b.layout.window for b in report.blocks] == expected


def test_each_global_layer_reads_the_full_context_in_decode_when_folded() -> None:
    config, model, ids = _five_to_one()
    report = audit(model, (ids,), decode=True, context=1024)
    assert report.extras["folded_layers"][0]["traced"] == 2
    assert report.decode is not None
    # K and V of 2 KV heads of 16 at 2 bytes (bf16): 128 B a cached token, per layer; a
    # global layer reads all 1,024 cached tokens, a sliding one its window of 8
    per_token = 2 * 2 * 16 * 2
    read = [b.kv_read_bytes for b in report.decode.blocks]
    assert read == [per_token * (1024 if t == "full_attention" else config.sliding_window)
                    for t in config.layer_types]


class _Tiles:
    """A config object holding a list of ``[height, width]`` pairs as long as the stack."""

    def __init__(self, length: int) -> None:
        self.aspect_ratios = [[1, i + 1] for i in range(length)]


class _TiledLayer(nn.Module):
    def __init__(self, tiles: _Tiles) -> None:
        super().__init__()
        self.config = tiles
        self.proj = nn.Linear(8, 8)


def test_a_per_layer_list_of_pairs_is_a_setting_not_a_crash() -> None:
    tiles = _Tiles(4)
    stack = nn.ModuleList([_TiledLayer(tiles) for _ in range(4)])
    # each layer reads its own [1, i + 1] pair: four settings, too many to fold (4 · 2 > 4)
    assert find_lists(stack) == []
