"""The library entry points: totals add up, tied weights count once, inputs are inferred."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

import mhaudit
from mhaudit.api import AuditOptions, audit
from mhaudit.errors import ConfigError, LoadError


def _gpt2_lm() -> tuple[nn.Module, tuple[torch.Tensor]]:
    with torch.device("meta"):
        config = GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=64,
                            use_cache=False)
        model = GPT2LMHeadModel(config)
        ids = torch.zeros(2, 16, dtype=torch.long)
    return model, (ids,)


def test_block_figures_sum_to_the_totals() -> None:
    model, inputs = _gpt2_lm()
    report = audit(model, inputs)
    t = report.totals
    assert t.num_blocks == len(report.blocks) == 2
    assert t.attention_flops == sum(b.flops.total for b in report.blocks)
    assert t.attention_params == sum(b.params.total for b in report.blocks)
    assert t.kv_cache_bytes_per_token == sum(
        b.memory.kv_cache_bytes_per_token for b in report.blocks
    )
    assert t.flops > t.attention_flops
    assert sum(g.count for g in report.groups) == t.num_blocks


def test_tied_weights_count_once() -> None:
    model, inputs = _gpt2_lm()
    assert model.lm_head.weight is model.transformer.wte.weight
    unique = {id(p): p.numel() for p in model.parameters()}
    report = audit(model, inputs)
    assert report.totals.params_total == sum(unique.values())
    # GPT-2 with d = 64, 2 layers, vocab 100, 64 positions:
    # wte 6,400 + wpe 4,096 + 2 · (ln 128 + attn 16,640 + ln 128 + mlp 33,088) + ln_f 128
    assert report.totals.params_total == 6_400 + 4_096 + 2 * (128 + 16_640 + 128 + 33_088) + 128


def test_weights_shared_between_blocks_count_once_in_attention_params() -> None:
    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(32, 4, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for _ in range(3):
                x = x + self.attn(x, x, x, need_weights=False)[0]
            return x

    with torch.device("meta"):
        report = audit(Shared(), (torch.zeros(1, 8, 32),))
    assert report.totals.num_blocks == 3
    # one nn.MultiheadAttention(32, 4): 4·32² + 4·32 = 4,224, used three times
    assert report.totals.attention_params == 4_224
    assert [b.name for b in report.blocks] == ["attn", "attn#2", "attn#3"]


def test_inputs_are_inferred_from_an_embedding_first_layer() -> None:
    model, _ = _gpt2_lm()
    report = mhaudit.audit(model, batch_size=3, seq_len=20)
    block = report.blocks[0].layout
    assert (block.batch_size, block.seq_len_q) == (3, 20)
    assert report.model.inputs["input_ids"] == {"shape": [3, 20], "dtype": "int64"}


def test_model_without_an_inferable_first_layer_says_what_to_add() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Conv1d(3, 8, 3))
    with pytest.raises(LoadError, match="example_inputs"):
        audit(model)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"batch_size": 0}, "batch_size 0 is out of range"),
        ({"batch_size": 1.5}, "batch_size must be an integer"),
        ({"seq_len": "128"}, "seq_len must be an integer"),
        ({"scaling_seq_lens": (512, -1)}, "scaling_seq_lens item -1"),
        ({"no_such_option": 1}, "unknown audit option 'no_such_option'"),
        ({"gpu": "tpu9"}, "unknown GPU"),
        ({"dtype": "int3"}, "int3"),
        ({"flops_backend": "fvcore"}, "meta"),
    ],
)
def test_bad_options_raise_config_errors(override: dict[str, object], message: str) -> None:
    model, inputs = _gpt2_lm()
    with pytest.raises(ConfigError, match=message):
        audit(model, inputs, options=AuditOptions(), **override)


def test_scaling_projects_self_attention_costs() -> None:
    model, inputs = _gpt2_lm()
    report = audit(model, inputs, scaling_seq_lens=(16, 32))
    small, large = report.scaling
    # scores 2·b·h·n²·d_k double-quadruple: at 2× the length, QKᵀ and PV cost 4×
    assert large.scores_bytes == 4 * small.scores_bytes
    assert large.kv_cache_bytes == 2 * small.kv_cache_bytes
    assert small.attention_flops == report.totals.attention_flops


def test_modules_the_forward_never_uses_are_listed() -> None:
    class WithSpare(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(32, 4, batch_first=True)
            self.spare = nn.Linear(32, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attn(x, x, x, need_weights=False)[0]

    with torch.device("meta"):
        report = audit(WithSpare(), (torch.zeros(1, 8, 32),))
    assert report.coverage.untraced_modules == ("spare",)
    assert report.coverage.untraced_towers == ("spare",)


def test_a_tower_the_forward_never_runs_is_named_once() -> None:
    class WithTower(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(32, 4, batch_first=True)
            self.tower = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
            self.norm = nn.LayerNorm(32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attn(self.norm(x), x, x, need_weights=False)[0]

    with torch.device("meta"):
        report = audit(WithTower(), (torch.zeros(1, 8, 32),))
    # the encoder layer's attention, feed-forward and norms: each listed, one tower named
    assert len(report.coverage.untraced_modules) == 6
    assert report.coverage.untraced_towers == ("tower",)
    assert report.to_dict()["coverage"]["untraced_towers"] == ["tower"]


def test_folded_layers_do_not_count_as_untraced() -> None:
    with torch.device("meta"):
        layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
        model = nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False)
        report = audit(model, (torch.zeros(1, 8, 32),))
    assert report.extras["folded_layers"] == [{"list": "layers", "layers": 6, "traced": 1}]
    assert report.coverage.untraced_modules == ()
