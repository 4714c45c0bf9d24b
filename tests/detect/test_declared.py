"""The layout a module declares (``num_heads``, ``head_dim``, the config it holds) against
the detected block: ``coverage.declared_mismatch`` lists every disagreement, and only those.

The oracle is the generated spec (and, for third-party modules, the constructor's
arguments): a module that declares its spec correctly has no mismatch; one declaration off
by a known amount is the one mismatch, with the spec's value as the detected one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import Tensor, nn

from mhaudit.api import audit
from mhaudit.data import DeclaredMismatch, Report
from mhaudit.detect.blocks import detect
from mhaudit.detect.declared import declared_mismatches
from mhaudit.gate.budget import Budget, evaluate
from mhaudit.render.gate.outcome import verdict
from mhaudit.render.table import render_table
from mhaudit.trace.export import trace
from tests.detect.test_properties import (
    PROPERTY_SETTINGS,
    ConfigurableAttention,
    Spec,
    specs,
)

NAMINGS: tuple[dict[str, str], ...] = (
    {"heads": "num_heads", "kv_heads": "num_key_value_heads", "head_dim": "head_dim",
     "width": "hidden_size", "groups": "num_key_value_groups"},
    {"heads": "n_head", "kv_heads": "n_kv_heads", "head_dim": "d_k", "width": "embed_dim",
     "groups": "n_rep", "inner": "all_head_size"},
    {"heads": "heads", "kv_heads": "kv_heads", "head_dim": "dim_head", "width": "d_model",
     "inner": "inner_dim"},
    {"head_dim": "head_dim", "groups": "num_key_value_groups", "width": "hidden_size"},
)
"""Ways code names its layout: transformers', GPT-2 and the textbook's, lucidrains', and
transformers' attention that keeps only its head dim and repeat factor."""


def _values(spec: Spec) -> dict[str, int]:
    """Each quantity from the spec, by hand: h, h_kv, d_k, d, h / h_kv and h·d_k."""
    return {"heads": spec.num_heads, "kv_heads": spec.num_kv_heads, "head_dim": spec.head_dim,
            "width": spec.d_model, "groups": spec.num_heads // spec.num_kv_heads,
            "inner": spec.num_heads * spec.head_dim}


class Declaring(ConfigurableAttention):
    """The generated attention, with its layout stored in attributes named by ``naming``."""

    def __init__(self, spec: Spec, naming: dict[str, str], off: dict[str, int]) -> None:
        super().__init__(spec)
        for quantity, value in _values(spec).items():
            if quantity in naming:
                setattr(self, naming[quantity], value + off.get(quantity, 0))


def _mismatches(model: nn.Module, *inputs: Tensor) -> tuple[DeclaredMismatch, ...]:
    return declared_mismatches(model, detect(trace(model, inputs, {}), model))


def _generated(spec: Spec, naming: dict[str, str], off: dict[str, int]
               ) -> tuple[DeclaredMismatch, ...]:
    with torch.device("meta"):
        model = Declaring(spec, naming, off).eval()
        args = spec.inputs()
    return _mismatches(model, *args)


@PROPERTY_SETTINGS
@given(spec=specs(), naming=st.sampled_from(NAMINGS))
def test_a_module_that_declares_its_layout_rightly_has_no_mismatch(
        spec: Spec, naming: dict[str, str]) -> None:
    assert _generated(spec, naming, {}) == ()


@PROPERTY_SETTINGS
@given(spec=specs(), naming=st.sampled_from(NAMINGS), data=st.data())
def test_one_wrong_declaration_is_the_one_mismatch(
        spec: Spec, naming: dict[str, str], data: st.DataObject) -> None:
    quantity = data.draw(st.sampled_from(sorted(naming)))
    off = data.draw(st.integers(1, 3))
    true = _values(spec)[quantity]
    found = _generated(spec, naming, {quantity: off})
    if quantity == "groups" and {"heads", "kv_heads"} <= naming.keys():
        # beside both head counts, a repeat factor that contradicts them is the code's own
        # repeat pattern (set to 1 where K/V are repeated another way), not the layout
        assert found == ()
    else:
        assert found == (DeclaredMismatch("", naming[quantity], true + off, true),)


D, N = 64, 8


class FourHeadsDeclaredEight(nn.Module):
    """Declares 8 heads, reshapes into 4 of 16."""

    def __init__(self) -> None:
        super().__init__()
        self.num_heads, self.embed_dim = 8, D
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)

    def forward(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, 4, D // 4).permute(2, 0, 3, 1, 4)  # (b, 4, n, 16)
        y = nn.functional.scaled_dot_product_attention(q, k, v)  # (b, 4, n, 16)
        out: Tensor = self.proj(y.transpose(1, 2).reshape(b, n, D))  # (b, n, d)
        return out


MODEL_FILE = '''
import torch
from torch import nn


class FourHeadsDeclaredEight(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_heads, self.embed_dim = 8, 64
        self.qkv, self.proj = nn.Linear(64, 192), nn.Linear(64, 64)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, 4, 16).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, n, 64))


def build_model():
    return FourHeadsDeclaredEight()


def example_inputs():
    return (torch.randn(1, 8, 64),)
'''


def _audit(model: Callable[[], nn.Module], inputs: Callable[[], Any], device: str = "meta"
           ) -> Report:
    torch.manual_seed(0)
    with torch.device(device):
        built, args = model(), inputs()
    return audit(built, args)


def test_eight_heads_declared_and_four_computed_is_reported() -> None:
    report = _audit(FourHeadsDeclaredEight, lambda: (torch.randn(1, N, D),))
    assert report.coverage.declared_mismatch == (DeclaredMismatch("", "num_heads", 8, 4),)
    assert report.to_dict()["coverage"]["declared_mismatch"] == [
        {"module": "", "attribute": "num_heads", "declared": 8, "detected": 4}]
    footer = " ".join(render_table(report).split())  # the footer wraps at the width
    assert ("declared layout the blocks contradict: 1 ((root).num_heads 8 (detected 4)"
            in footer)
    assert verdict(evaluate(report, Budget())).endswith(  # check says how many
        "1 declared layout attribute(s) the blocks contradict (coverage.declared_mismatch)")


def test_verify_fails_on_a_declared_mismatch(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from mhaudit.cli import main as cli

    path = tmp_path / "model.py"
    path.write_text(MODEL_FILE)
    plain = CliRunner().invoke(cli, ["report", str(path)])
    assert plain.exit_code == 0, plain.output  # listed, but only --verify fails on it
    done = CliRunner().invoke(cli, ["report", str(path), "--verify"])
    assert done.exit_code == 1, done.output  # DESIGN: 1 for a failing check, never 4
    assert "coverage.declared_mismatch" in done.stderr
    assert "1 attribute(s) DISAGREE" in " ".join(done.stdout.split())  # wrapped at the width
    data = json.loads(CliRunner().invoke(cli, ["report", str(path), "--verify", "--format",
                                               "json"]).stdout)
    assert data["verification"]["agrees"] is False
    assert data["verification"]["declared_mismatch"] == 1


class Layered(nn.Module):
    """Attention that takes its layout from a config, as transformers layers do."""

    def __init__(self, config: Any, layer_idx: int, runs: int, **declared: int) -> None:
        super().__init__()
        self.config, self.layer_idx, self.heads_run = config, layer_idx, runs
        for name, value in declared.items():
            setattr(self, name, value)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)

    def forward(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        h = self.heads_run
        q, k, v = self.qkv(x).view(b, n, 3, h, D // h).permute(2, 0, 3, 1, 4)  # (b, h, n, d_k)
        y = nn.functional.scaled_dot_product_attention(q, k, v)  # (b, h, n, d_k)
        out: Tensor = self.proj(y.transpose(1, 2).reshape(b, n, D))  # (b, n, d)
        return out


class Stack(nn.Module):
    def __init__(self, *layers: nn.Module) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def _stacked(*layers: nn.Module) -> tuple[DeclaredMismatch, ...]:
    with torch.device("meta"):
        model = Stack(*layers)
        x = torch.randn(1, N, D)
    return _mismatches(model, x)


def test_the_config_is_read_where_the_module_declares_nothing() -> None:
    config = SimpleNamespace(num_attention_heads=8, num_key_value_heads=8, head_dim=8)
    with torch.device("meta"):
        layers = (Layered(config, 0, 8), Layered(config, 1, 4))
    # layer 1 runs 4 heads of 16: the config's 8 heads and 8 KV heads of 8 disagree
    assert _stacked(*layers) == (
        DeclaredMismatch("layers.1", "config.num_attention_heads", 8, 4),
        DeclaredMismatch("layers.1", "config.num_key_value_heads", 8, 4),
        DeclaredMismatch("layers.1", "config.head_dim", 8, 16))


def test_a_per_layer_list_in_the_config_is_read_at_the_layer_index() -> None:
    config = SimpleNamespace(num_attention_heads=[8, 4], head_dim=[8, 16])
    with torch.device("meta"):
        layers = (Layered(config, 0, 8), Layered(config, 1, 4))
    assert _stacked(*layers) == ()


def test_a_config_the_layer_overrides_is_not_read() -> None:
    # the model-wide config says 8 heads; this layer declares its own 4 and runs 4
    config = SimpleNamespace(num_attention_heads=8, num_key_value_heads=8, head_dim=8)
    with torch.device("meta"):
        layer = Layered(config, 0, 4, num_heads=4)
    assert _stacked(layer) == ()


def test_a_shard_declares_its_own_heads_and_the_config_is_not_read() -> None:
    # one rank of a 2-way tensor-parallel layer: 4 of the config's 8 heads
    config = SimpleNamespace(num_attention_heads=8, num_key_value_heads=8)
    with torch.device("meta"):
        layer = Layered(config, 0, 4, num_attention_heads_per_partition=4)
    assert _stacked(layer) == ()


def test_values_that_are_not_counts_are_skipped() -> None:
    with torch.device("meta"):
        layer = Layered(None, 0, 4, heads=True, head_dim=0)  # a flag and a zero
        layer.num_heads = torch.tensor(8)  # type: ignore[assignment]  # a tensor
    assert _stacked(layer) == ()


# Third-party modules: each declares its layout, none may be reported.
V = 100


def _ids(n: int = N) -> Tensor:
    return torch.zeros(1, n, dtype=torch.long)


def _torch_cases() -> list[Any]:
    return [
        pytest.param(lambda: nn.MultiheadAttention(D, 4, kdim=32, vdim=48, batch_first=True),
                     lambda: (torch.randn(1, N, D), torch.randn(1, 5, 32),
                              torch.randn(1, 5, 48)), id="MultiheadAttention-cross"),
        pytest.param(lambda: nn.TransformerEncoderLayer(D, 4, 128, batch_first=True),
                     lambda: (torch.randn(1, N, D),), id="TransformerEncoderLayer"),
    ]


def _hf_cases() -> list[Any]:
    tf = pytest.importorskip("transformers")
    return [
        pytest.param(lambda: tf.LlamaModel(tf.LlamaConfig(
            hidden_size=D, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=2,
            intermediate_size=128, vocab_size=V)), lambda: (_ids(),), id="llama-gqa"),
        pytest.param(lambda: tf.GPT2Model(tf.GPT2Config(
            n_embd=D, n_head=4, n_layer=2, vocab_size=V, bos_token_id=0, eos_token_id=0)),
            lambda: (_ids(),), id="gpt2"),
        pytest.param(lambda: tf.BertModel(tf.BertConfig(
            hidden_size=D, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
            vocab_size=V)), lambda: (_ids(),), id="bert"),
        pytest.param(lambda: tf.T5Model(tf.T5Config(  # inner_dim = 4·32 ≠ d_model
            d_model=D, d_kv=32, num_heads=4, d_ff=128, num_layers=1, vocab_size=V)),
            lambda: {"input_ids": _ids(), "decoder_input_ids": _ids(4)}, id="t5"),
        pytest.param(lambda: tf.WhisperModel(tf.WhisperConfig(  # the towers' heads differ
            d_model=D, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
            decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128,
            num_mel_bins=8, max_source_positions=16, max_target_positions=16, vocab_size=V,
            pad_token_id=0, bos_token_id=0, eos_token_id=0, decoder_start_token_id=0)),
            lambda: {"input_features": torch.zeros(1, 8, 32),
                     "decoder_input_ids": torch.zeros(1, 4, dtype=torch.long)}, id="whisper"),
        pytest.param(lambda: tf.DeepseekV3Model(tf.DeepseekV3Config(  # config.head_dim = 8
            hidden_size=D, intermediate_size=128, moe_intermediate_size=32,
            num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
            q_lora_rank=24, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
            v_head_dim=16, vocab_size=V, n_routed_experts=4, num_experts_per_tok=2,
            first_k_dense_replace=1)), lambda: (_ids(),), id="deepseek-v3-mla"),
        pytest.param(lambda: tf.MixtralModel(tf.MixtralConfig(
            hidden_size=D, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1,
            intermediate_size=128, vocab_size=V, num_local_experts=4, num_experts_per_tok=2)),
            lambda: (_ids(),), id="mixtral"),
    ]


@pytest.mark.parametrize(("model", "inputs"), [*_torch_cases(), *_hf_cases()])
def test_third_party_modules_declare_what_they_compute(
        model: Callable[[], nn.Module], inputs: Callable[[], Any]) -> None:
    report = _audit(model, inputs)
    assert report.blocks  # the check ran against at least one block
    assert report.coverage.declared_mismatch == ()


def test_a_repeat_factor_beside_both_head_counts_is_not_the_layout() -> None:
    # mixture-of-attention-heads: num_key_value_groups = 1 beside 4 heads and 2 KV heads,
    # K/V repeated by the code's own pattern; its experts' hidden_size is their inner width
    tf = pytest.importorskip("transformers")
    config = tf.JetMoeConfig(
        hidden_size=D, num_attention_heads=4, num_key_value_heads=2, kv_channels=16,
        num_hidden_layers=1, intermediate_size=128, num_local_experts=4,
        num_experts_per_tok=2, vocab_size=V)
    report = _audit(lambda: tf.JetMoeModel(config), lambda: (_ids(),), "cpu")  # routes on data
    (block,) = report.blocks
    assert (block.layout.num_heads, block.layout.num_kv_heads) == (4, 2)
    assert report.coverage.declared_mismatch == ()
