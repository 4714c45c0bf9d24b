"""A fixed sample of the transformers zoo, each built from its tiny config and checked.

Each architecture runs through the same harness as ``benchmarks/zoo.py``: the tiny config
derived from its config class, ``mhaudit report`` on it in a forked process, and the
reference (the module's parameters, FlopCounterMode on a real CPU forward, the config's
heads, KV heads, head dims and widths). Exact means every check holds; exit 4 never.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from zoo_harness.expect import Expected, attention_modules, block_problems, expected_layouts
from zoo_harness.sweep import run_all
from zoo_harness.tiny import HEADS, KV_HEADS, LAYERS, shrink, shrink_vocab
from zoo_harness.worker import preload, run_one

FAST = {
    "gpt2": "decoder-only, fused Conv1D projections",
    "qwen2": "grouped-query attention",
    "bert": "encoder",
    "vit": "vision",
}
SLOW = {
    "mixtral": "mixture of experts",
    "deepseek_v3": "latent attention and routed experts",
    "bart": "encoder-decoder",
    "t5": "encoder-decoder, relative position bias",
    "whisper": "audio features, encoder-decoder",
    "wav2vec2": "raw audio",
    "clip": "text and image towers",
    "video_llava": "a video tower beside the text, no frame count in the config",
    "kosmos-2.5": "flattened patches placed by a position mask",
    "rt_detr": "detection decoder over the top-k encoder tokens",
    "pe_audio_encoder": "rotary pairs as a broadcast product and a sum",
}
KNOWN_MISSES: dict[str, str] = {}
"""Architectures of the sample that are not exact yet, with why (xfail, strict)."""


def _params(sample: dict[str, str], *marks: pytest.MarkDecorator) -> list[object]:
    out = []
    for name in sample:
        extra = [pytest.mark.xfail(reason=KNOWN_MISSES[name], strict=True)] \
            if name in KNOWN_MISSES else []
        out.append(pytest.param(name, id=name, marks=[*marks, *extra]))
    return out


def _check(name: str) -> None:
    preload()
    (result,) = run_all([name], run_one, jobs=1, timeout_s=240)
    assert result.status != "exit 4", result.reason
    assert result.status == "exact", f"{result.status}: {result.reason}"
    assert result.checks["blocks"] >= 1


@pytest.mark.parametrize("name", _params(FAST))
def test_fast_sample_is_exact(name: str) -> None:
    _check(name)


@pytest.mark.parametrize("name", _params(SLOW, pytest.mark.slow))
def test_slow_sample_is_exact(name: str) -> None:
    _check(name)


def test_shrink_keeps_one_layer_of_each_type_and_groups_kv_heads() -> None:
    config = {
        "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
        "num_hidden_layers": 6, "intermediate_size": 11008,
        "layer_types": ["linear", "linear", "full", "linear", "linear", "full"],
        "text_config": {"d_model": 1024, "num_heads": 16, "num_layers": 24},
    }
    shrink(config)
    assert config["num_hidden_layers"] == LAYERS
    assert config["layer_types"] == ["linear", "full"]  # the first of each type
    assert config["num_attention_heads"] == HEADS
    assert config["num_key_value_heads"] == KV_HEADS  # 8 < 32: still grouped
    assert config["hidden_size"] == 64 and config["intermediate_size"] == 128
    assert config["text_config"] == {"d_model": 64, "num_heads": HEADS, "num_layers": LAYERS}


def test_shrink_keeps_kv_heads_equal_to_heads_without_grouping() -> None:
    config = shrink({"num_attention_heads": 12, "num_key_value_heads": 12})
    assert config["num_key_value_heads"] == HEADS
    assert shrink({"n_head": 8, "n_head_kv": 1})["n_head_kv"] == 1  # multi-query stays


def test_shrunk_vocabulary_holds_every_special_token() -> None:
    config = {"vocab_size": 152064, "image_token_id": 151655, "pad_token_id": 0,
              "text_config": {"vocab_size": 32000, "eos_token_id": 2}}
    shrink_vocab(config)
    assert config["vocab_size"] == 151680  # 151656 rounded up to a multiple of 64
    # The text model embeds the image tokens too: its vocabulary grows to hold the image id.
    assert config["text_config"]["vocab_size"] == 151680
    small = {"vocab_size": 50257, "bos_token_id": 50256, "eos_token_id": 50256}
    shrink_vocab(small)
    assert small["vocab_size"] == 50257  # 50256 + 1 rounds up to 50304: nothing to shrink
    hashed = {"vocab_size": 260, "encoder_hash_byte_group_vocab": 500002}
    shrink_vocab(hashed)
    assert hashed == {"vocab_size": 256, "encoder_hash_byte_group_vocab": 256}


def test_block_problems_name_the_field_that_differs() -> None:
    layout = Expected("", frozenset({4}), 2, frozenset({16}), frozenset({64}))
    good = {"name": "h.0.attn", "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
            "d_model": 64, "kind": "self"}
    assert block_problems(good, [layout]) == []
    wrong = {**good, "num_kv_heads": 4}
    assert block_problems(wrong, [layout]) == ["config: kv heads 4 (declared 2)"]
    assert block_problems({**good, "head_dim": 8}, [layout]) == \
        ["config: head dim 8 (declared [16])"]
    # The labels are never read: a block called cross still needs the declared KV heads.
    assert block_problems({**wrong, "kind": "cross"}, [layout]) == \
        ["config: kv heads 4 (declared 2)"]


def test_shrink_renumbers_per_layer_overrides_and_keeps_state_space_heads_whole() -> None:
    config = shrink({"num_hidden_layers": 30, "per_layer_config": {"01": "a", "05": "b"}})
    assert config["per_layer_config"] == {"1": "a"}  # layers 0 and 1 are kept
    mamba = shrink({"hidden_size": 2048, "expand": 2, "num_heads": 64, "head_dim": 64})
    assert mamba["num_heads"] * mamba["head_dim"] == mamba["hidden_size"] * mamba["expand"]


def test_shrink_reaches_prefixed_variants_per_layer_lists_and_dim_head() -> None:
    config = shrink({"num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                     "swa_num_attention_heads": 64, "swa_num_key_value_heads": 16,
                     "swa_head_dim": 128, "num_attention_heads_per_layer": [48, 64],
                     "dim_head": 128})
    assert (config["swa_num_attention_heads"], config["swa_num_key_value_heads"],
            config["swa_head_dim"]) == (HEADS, KV_HEADS, 16)
    assert config["num_attention_heads_per_layer"] == [HEADS, HEADS]
    assert config["dim_head"] == 16


def _layouts(model_type: str, **fields: object) -> list[Expected]:
    from transformers import CONFIG_MAPPING

    return expected_layouts(CONFIG_MAPPING[model_type](**fields))


def test_expectation_reads_each_layer_of_a_heterogeneous_config() -> None:
    from zoo_harness.tiny import tiny_config

    config = tiny_config("embedding_gemma2_text")
    layouts = _layouts("embedding_gemma2_text", **{k: v for k, v in config.items()
                                                   if k != "model_type"})
    assert sorted(e.kv_heads or 0 for e in layouts) == [1, 2]  # sliding 2, full layers 1


def test_linear_attention_layers_are_not_softmax_attention_modules() -> None:
    import torch
    from torch import nn
    from zoo_harness.expect import attention_modules

    class LinearAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(4, 12)

    class SoftmaxAttention(LinearAttention):
        pass

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config = type("Config", (), {"layer_types": ["linear_attention",
                                                              "full_attention"]})()
            self.layers = nn.ModuleList([LinearAttention(), SoftmaxAttention()])

    with torch.device("meta"):
        assert attention_modules(Model()) == ["layers.1"]


def test_a_square_linear_gate_is_no_attention_module() -> None:
    from torch import nn

    class GatedAttention(nn.Module):  # x * softmax(W·x) over features, as PatchTSMixer's
        def __init__(self) -> None:
            super().__init__()
            self.attn_layer = nn.Linear(8, 8)
            self.attn_softmax = nn.Softmax(dim=-1)

    class FusedAttention(nn.Module):  # one fused QKV map, three times as wide as its input
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(8, 24)

    model = nn.ModuleDict({"gate": GatedAttention(), "fused": FusedAttention()})
    assert attention_modules(model) == ["fused"]


def test_tsmixer_gates_are_no_attention_but_its_self_attention_is() -> None:
    import torch
    from transformers import PatchTSMixerConfig, PatchTSMixerModel

    config = PatchTSMixerConfig(context_length=16, patch_length=4, patch_stride=4,
                                num_input_channels=2, d_model=8, num_layers=1,
                                self_attn=True, self_attn_heads=2)
    with torch.device("meta"):
        names = attention_modules(PatchTSMixerModel(config))
    # Each layer's patch mixer and feature mixer gate (softmax(Linear(x)) * x) are gates;
    # the patch mixer's PatchTSMixerAttention (Q, K, V, O) is the one attention module.
    assert [n.rsplit(".", 1)[-1] for n in names] == ["self_attn_layer"]


def test_fields_a_module_declares_are_its_truth() -> None:
    from torch import nn
    from zoo_harness.expect import declared

    class PoolingHead(nn.Module):  # head dim from intermediate_size // heads
        def __init__(self) -> None:
            super().__init__()
            self.num_heads, self.head_dim = 4, 128 // 4
            self.q_proj = nn.Linear(64, 128)

    own = declared(PoolingHead())
    assert (own.heads, own.kv_heads, own.head_dim, own.width) == (4, None, 32, None)
    layout = Expected("", frozenset({4}), None, frozenset({16}), frozenset({64}))
    block = {"name": "head", "num_heads": 4, "num_kv_heads": 4, "head_dim": 32, "d_model": 64}
    assert block_problems(block, [layout]) == ["config: head dim 32 (declared [16])"]
    assert block_problems(block, [layout], own) == []
    assert block_problems({**block, "head_dim": 16}, [layout], own) == \
        ["config: head dim 16 (declared [32])"]


def test_the_scale_a_module_declares_gives_its_head_dim_and_heads() -> None:
    from torch import nn
    from zoo_harness.expect import declared

    class AssignAttention(nn.Module):  # one head over the width, scaled by 64**-0.5
        def __init__(self) -> None:
            super().__init__()
            self.scale = 64**-0.5
            self.q_proj = nn.Linear(64, 64)

    class Scaled(AssignAttention):  # a scale that is no d**-0.5 declares nothing
        def __init__(self) -> None:
            super().__init__()
            self.scale = 0.3

    assert declared(AssignAttention()).head_dim == 64
    assert declared(Scaled()).head_dim is None
    layout = Expected("", frozenset({4}), None, frozenset({16}), frozenset({64}))
    block = {"name": "assign", "num_heads": 1, "num_kv_heads": 1, "head_dim": 64,
             "d_model": 64}
    own = declared(AssignAttention())
    assert block_problems(block, [layout], own) == []  # 64 / 64 = 1 head
    assert block_problems({**block, "num_heads": 2, "num_kv_heads": 2}, [layout], own) == \
        ["config: heads 2 (declared [1, 4])"]


def test_kv_heads_follow_the_groups_a_module_declares() -> None:
    from torch import nn
    from zoo_harness.expect import declared

    class Grouped(nn.Module):
        def __init__(self, groups: int) -> None:
            super().__init__()
            self.num_heads, self.num_key_value_groups = 4, groups

    layout = Expected("", frozenset({4}), 2, frozenset({16}), frozenset({64}))
    block = {"name": "attn", "num_heads": 4, "num_kv_heads": 4, "head_dim": 16, "d_model": 64}
    assert block_problems(block, [layout]) == ["config: kv heads 4 (declared 2)"]
    assert block_problems(block, [layout], declared(Grouped(1))) == []  # 4 / 1 KV heads
    assert block_problems(block, [layout], declared(Grouped(2))) == \
        ["config: kv heads 4 (declared 2)"]
