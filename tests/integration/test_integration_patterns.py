"""Hidden head layouts in real third-party code: x-transformers, perceiver-pytorch, diffusers.

Ground truth comes from each constructor's arguments. Libraries that need torchvision
(timm, open_clip, vit-pytorch) cannot import beside this torch build and are skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from mhaudit.api import audit
from mhaudit.cli import main
from mhaudit.data import AttentionBlock, Report


def _audit(build: Any, *inputs: Any) -> Report:
    with torch.device("meta"):
        model = build().eval()
        args = tuple(torch.randn(*shape) for shape in inputs)
    return audit(model, args)


def _check(block: AttentionBlock, heads: int, kv_heads: int, d_k: int, d_v: int, kind: str,
           causal: bool, total: int) -> None:
    lay = block.layout
    assert (lay.num_heads, lay.num_kv_heads, lay.head_dim, lay.v_head_dim, lay.kind,
            bool(lay.causal), block.params.total) == (
        heads, kv_heads, d_k, d_v, kind, causal, total)
    params = block.params
    assert params.textbook + sum(d.params for d in params.deviations) == params.total
    assert not any(d.reason.startswith("not explained") for d in params.deviations)


def test_x_transformers_talking_heads_mix_the_logits() -> None:
    xt = pytest.importorskip("x_transformers")
    report = _audit(lambda: xt.Encoder(dim=32, depth=1, heads=4, attn_dim_head=8,
                                       attn_pre_talking_heads=True,
                                       attn_post_talking_heads=True), (2, 6, 32))
    (block,) = report.blocks
    # to_q, to_k, to_v 32 → 4·8 and to_out 32 → 32, no biases: 4·32·32 = 4,096; the two
    # 1×1 convolutions over the heads (4, 4, 1, 1) each: 2·16 = 32 more.
    _check(block, 4, 4, 8, 8, "self", False, 4 * 32 * 32 + 2 * 4 * 4)
    assert block.layout.head_mixing
    assert block.params.score_map == 32
    # each 1×1 convolution: 2·b·h·h·n·n = 2·2·4·4·6·6 = 2,304 FLOPs, 4,608 for both.
    assert block.flops.score_map == 4608


@pytest.mark.parametrize(("options", "kv_heads", "d_v", "total"), [
    # GQA: q 32·32, k = v = 32·2·8, o 32·32 = 3,072.
    ({"attn_kv_heads": 2}, 2, 8, 2 * 32 * 32 + 2 * 32 * 16),
    # MQA: k = v = 32·8: 2·1,024 + 2·256 = 2,560.
    ({"attn_one_kv_head": True}, 1, 8, 2 * 32 * 32 + 2 * 32 * 8),
    # Value heads of 16: v 32·64 and o 64·32: 2·1,024 + 2·2,048 = 6,144.
    ({"attn_value_dim_head": 16}, 4, 16, 2 * 32 * 32 + 2 * 32 * 64),
    # Learned memory key/values join K and V along the sequence: Q/K/V/O unchanged.
    ({"attn_num_mem_kv": 2}, 4, 8, 4 * 32 * 32),
])
def test_x_transformers_decoder_layouts(options: dict[str, Any], kv_heads: int, d_v: int,
                                         total: int) -> None:
    xt = pytest.importorskip("x_transformers")
    report = _audit(lambda: xt.Decoder(dim=32, depth=1, heads=4, attn_dim_head=8, **options),
                    (2, 6, 32))
    (block,) = report.blocks
    _check(block, 4, kv_heads, 8, d_v, "self", True, total)


def test_perceiver_latent_queries_attend_to_the_input() -> None:
    pp = pytest.importorskip("perceiver_pytorch")
    report = _audit(lambda: pp.Perceiver(
        input_channels=3, input_axis=1, num_freq_bands=2, max_freq=4.0, depth=1,
        num_latents=5, latent_dim=32, cross_heads=1, latent_heads=4, cross_dim_head=16,
        latent_dim_head=8, num_classes=3, fourier_encode_data=False, self_per_cross_attn=1),
        (2, 7, 3))
    cross, latent = report.blocks
    # Cross: q 32 → 16 from the latents, kv 3 → 2·16 from the input, out 16 → 32 + 32:
    # 512 + 96 + 544 = 1,152. Latent self-attention: 4 heads of 8: 1,024 + 2,048 + 1,056.
    _check(cross, 1, 1, 16, 16, "cross", False, 32 * 16 + 3 * 32 + 16 * 32 + 32)
    _check(latent, 4, 4, 8, 8, "self", False, 32 * 32 + 32 * 64 + 32 * 32 + 32)
    assert (cross.layout.seq_len_q, cross.layout.seq_len_kv) == (5, 7)


def test_diffusers_joint_attention_counts_both_streams() -> None:
    attention = pytest.importorskip("diffusers.models.attention")
    report = _audit(lambda: attention.JointTransformerBlock(
        dim=32, num_attention_heads=4, attention_head_dim=8, context_pre_only=False),
        (2, 6, 32), (2, 4, 32), (2, 32))
    (block,) = report.blocks
    # Image and text streams each with Q, K, V and O of 32·32 + 32: 8·1,056 = 8,448.
    _check(block, 4, 4, 8, 8, "self", False, 8 * (32 * 32 + 32))
    assert block.layout.streams == 2
    assert (block.layout.seq_len_q, block.layout.seq_len_kv) == (10, 10)


_MODEL_FILE = '''
import torch
from fixtures.zoo_legacy import {name}

def build_model():
    return {name}()

def example_inputs():
    return (torch.randn(2, 6, 32),)
'''


@pytest.mark.parametrize(("name", "method"), [
    ("LegacyEinsum", "dispatch-record"),
    ("DataDependent", "dispatch-real"),  # its file builds it on CPU for a real forward
    ("ByPosition", "dispatch-record"),
    ("NamedSequential", "dispatch-record"),
])
def test_models_that_resist_tracing_do_not_exit_3(tmp_path: Path, name: str, method: str
                                                  ) -> None:
    target = tmp_path / "model.py"
    target.write_text(_MODEL_FILE.format(name=name))
    result = CliRunner().invoke(main, ["report", str(target), "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    assert report["model"]["trace_method"] == method
    assert report["blocks"] and all(b["num_heads"] == 4 for b in report["blocks"])
    for block in report["blocks"]:
        assert {"sinks", "head_mixing", "padded_head_dim", "windowed", "streams"} <= set(block)



@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
def test_dispatch_recorder_reads_transformers_models_as_export_does(family: str) -> None:
    import transformers as tf

    from mhaudit.detect.blocks import detect
    from mhaudit.detect.params import count
    from mhaudit.trace.export import trace
    from mhaudit.trace.recorder import record

    model_cls, config = {
        "gpt2": (tf.GPT2Model, tf.GPT2Config(n_embd=64, n_layer=1, n_head=4, vocab_size=100)),
        "llama": (tf.LlamaModel, tf.LlamaConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=1,
            num_attention_heads=4, num_key_value_heads=2, vocab_size=100)),
        "bert": (tf.BertModel, tf.BertConfig(hidden_size=64, num_hidden_layers=1,
                                             num_attention_heads=4, intermediate_size=128,
                                             vocab_size=100)),
    }[family]
    with torch.device("meta"):
        model = model_cls(config).eval()
        ids = torch.zeros(2, 16, dtype=torch.long)

    def summary(traced: Any) -> list[tuple[Any, ...]]:
        return [(lay.name, lay.kind, lay.num_heads, lay.num_kv_heads, lay.head_dim,
                 bool(lay.causal), count(lay).total) for lay in detect(traced, model)]

    exported = summary(trace(model, (ids,), {}))
    assert exported and summary(record(model, (ids,), {}, fake=True, guess=True)) == exported
