"""Costs on real transformers models (tiny configs, built with no download): FLOPs against
torch's FlopCounterMode, routed experts at top-k, KV-cache semantics, windows and the
inference peak against torch's MemTracker."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import mhaudit
from mhaudit.data import Report

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
T = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

SMALL = {"vocab_size": 128, "hidden_size": 64, "num_attention_heads": 4}


def _ids(b: int = 1, n: int = 16) -> torch.Tensor:
    return torch.randint(0, 128, (b, n), generator=torch.Generator().manual_seed(0))


def _counted(model: nn.Module, ids: torch.Tensor) -> tuple[int, Report]:
    """FlopCounterMode's count of a real forward, and mhaudit's report of the same model."""
    model.eval()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(ids)
    return counter.get_total_flops(), mhaudit.audit(model, (ids,))


def _products(report: Report) -> int:
    families = report.totals.flops_by_family
    assert sum(families.values()) == report.totals.flops
    return families["matmul"] + families["conv"]


DENSE: dict[str, Callable[[], nn.Module]] = {
    "gpt2": lambda: T.GPT2LMHeadModel(T.GPT2Config(vocab_size=128, n_embd=64, n_layer=2,
                                                   n_head=4, attn_implementation="eager")),
    "bert": lambda: T.BertModel(T.BertConfig(**SMALL, num_hidden_layers=2,
                                             intermediate_size=96, attn_implementation="eager")),
    "llama": lambda: T.LlamaForCausalLM(T.LlamaConfig(
        **SMALL, num_hidden_layers=2, intermediate_size=96, num_key_value_heads=2,
        attn_implementation="eager")),
    "t5": lambda: T.T5Model(T.T5Config(vocab_size=128, d_model=64, d_kv=16, d_ff=96,
                                       num_layers=2, num_heads=4, attn_implementation="eager")),
    "vit": lambda: T.ViTModel(T.ViTConfig(hidden_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, intermediate_size=96,
                                          image_size=32, patch_size=8,
                                          attn_implementation="eager")),
}


@pytest.mark.parametrize("name", sorted(DENSE))
def test_matmul_and_conv_equal_flop_counter(name: str) -> None:
    torch.manual_seed(0)
    model = DENSE[name]().eval()
    if name == "t5":
        ids = _ids()
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(input_ids=ids, decoder_input_ids=ids[:, :8])
        report = mhaudit.audit(model, {"input_ids": ids, "decoder_input_ids": ids[:, :8]})
        expected = counter.get_total_flops()
    elif name == "vit":
        pixels = torch.zeros(1, 3, 32, 32)
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(pixels)
        report, expected = mhaudit.audit(model, (pixels,)), counter.get_total_flops()
    else:
        expected, report = _counted(model, _ids())
    assert report.coverage.ops_without_formula == {}
    assert _products(report) == expected


MOE: dict[str, Callable[[], Any]] = {
    "mixtral": lambda: T.MixtralConfig(**SMALL, num_hidden_layers=2, intermediate_size=96,
                                       num_key_value_heads=2, num_local_experts=4,
                                       num_experts_per_tok=2),
    "qwen3_moe": lambda: T.Qwen3MoeConfig(**SMALL, num_hidden_layers=2, intermediate_size=96,
                                          moe_intermediate_size=32, num_experts=4,
                                          num_experts_per_tok=2, num_key_value_heads=2,
                                          head_dim=16, decoder_sparse_step=1),
    "deepseek_v3": lambda: T.DeepseekV3Config(
        **SMALL, num_hidden_layers=2, intermediate_size=96, moe_intermediate_size=32,
        n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
        first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8,
        qk_nope_head_dim=16, v_head_dim=16, n_group=1, topk_group=1, num_key_value_heads=4),
    "gpt_oss": lambda: T.GptOssConfig(**SMALL, num_hidden_layers=2, intermediate_size=32,
                                      num_local_experts=4, num_experts_per_tok=2, head_dim=16,
                                      num_key_value_heads=2, sliding_window=8,
                                      layer_types=["sliding_attention", "full_attention"]),
}


def _expert_width(config: Any) -> int:
    for key in ("moe_intermediate_size", "intermediate_size"):
        if getattr(config, key, None):
            return int(getattr(config, key))
    raise AssertionError("no expert width")


@pytest.mark.parametrize("name", sorted(MOE))
def test_routed_experts_at_top_k(name: str) -> None:
    config = MOE[name]()
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = T.AutoModelForCausalLM.from_config(config).eval()
    ids = _ids(1, 16)
    expected, report = _counted(model, ids)
    d, width, k = config.hidden_size, _expert_width(config), config.num_experts_per_tok
    # FlopCounterMode misses the routed experts; each of the 16 tokens runs k experts of
    # gate/up (d → 2·width) and down (width → d): 2·d·2w + 2·w·d FLOPs per token and expert
    layers = len(report.experts)
    assert layers == (1 if name == "deepseek_v3" else 2)
    routed = 16 * k * (2 * d * 2 * width + 2 * width * d) * layers
    assert _products(report) == expected + routed
    for layer in report.experts:
        assert (layer.top_k, layer.tokens, layer.num_experts) == (k, 16, 4) and layer.router
    # one token touches k of E experts: (E − k)/E = 1/2 of each stacked expert tensor is idle
    experts = sum(p.numel() for n, p in model.named_parameters()
                  if ".experts." in n and p.shape[:1] == (4,))
    assert report.totals.params_active == report.totals.params_total - experts // 2


BATCHED: dict[str, Callable[[], Any]] = {
    "qwen2_moe": lambda: T.Qwen2MoeConfig(
        **SMALL, num_hidden_layers=2, intermediate_size=96, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
        num_key_value_heads=2),
    "olmoe": lambda: T.OlmoeConfig(**SMALL, num_hidden_layers=2, intermediate_size=32,
                                   num_experts=4, num_experts_per_tok=2,
                                   num_key_value_heads=2),
    "granitemoe": lambda: T.GraniteMoeConfig(**SMALL, num_hidden_layers=2, intermediate_size=32,
                                             num_local_experts=4, num_experts_per_tok=2,
                                             num_key_value_heads=2),
    "deepseek_v2": lambda: T.DeepseekV2Config(
        **SMALL, num_hidden_layers=2, intermediate_size=96, moe_intermediate_size=32,
        n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
        first_k_dense_replace=0, q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8,
        qk_nope_head_dim=16, v_head_dim=16, n_group=1, topk_group=1, num_key_value_heads=4),
}


@pytest.mark.parametrize("name", sorted(BATCHED))
def test_batched_experts_are_found_by_their_routing(name: str) -> None:
    # batched_mm gathers each token copy's expert weights by the router's ids
    # (weight[ids], then a bmm): no grouped GEMM, but the same routing
    config = BATCHED[name]()
    config._attn_implementation = "eager"
    config._experts_implementation = "batched_mm"
    torch.manual_seed(0)
    model = T.AutoModelForCausalLM.from_config(config).eval()
    expected, report = _counted(model, _ids(1, 16))
    assert _products(report) == expected  # FlopCounterMode counts the bmm over gathered rows
    assert len(report.experts) == 2
    for layer in report.experts:
        assert (layer.top_k, layer.tokens, layer.num_experts) == (2, 16, 4) and layer.router
    # one token touches 2 of 4 experts: half of each stacked expert tensor is idle
    experts = sum(p.numel() for n, p in model.named_parameters()
                  if ".experts." in n and p.shape[:1] == (4,))
    assert report.totals.params_active == report.totals.params_total - experts // 2


def test_sparsemixer_experts_are_found_by_their_selection() -> None:
    # PhiMoE picks its experts by sampling (sparsemixer), not with a topk: the grouped
    # GEMMs' offsets count a (tokens, 2) tensor of expert ids, so k = 2
    config = T.PhimoeConfig(**SMALL, num_hidden_layers=2, intermediate_size=32,
                            num_local_experts=4, num_experts_per_tok=2, num_key_value_heads=2)
    with torch.device("meta"):
        model = T.AutoModelForCausalLM.from_config(config).eval()
        ids = torch.zeros(1, 16, dtype=torch.long)
    report = mhaudit.audit(model, (ids,))
    assert len(report.experts) == 2
    for layer in report.experts:
        assert (layer.top_k, layer.tokens, layer.num_experts) == (2, 16, 4) and layer.router
    # per layer gate_up 4·64·64 + down 4·64·32 = 24,576 elements, half idle per token
    assert report.totals.params_active == report.totals.params_total - 2 * 24_576 // 2


def test_latent_attention_caches_its_latent() -> None:
    model = T.AutoModelForCausalLM.from_config(MOE["deepseek_v3"]()).eval()
    ids = _ids()
    for inputs in ((ids,), {"input_ids": ids, "use_cache": False}):
        report = mhaudit.audit(model, inputs)
        assert len(report.blocks) == 2
        for block in report.blocks:
            # kv_lora_rank 16 + qk_rope_head_dim 8 = 24 elements, 48 B at bf16 per token
            assert block.layout.latent_width == 24
            assert block.memory.kv_cache_bytes_per_token == 48
            assert "MHA007" not in {f.code for f in block.findings}
        assert report.totals.kv_cache_bytes_per_token == 2 * 48


def test_encoders_cache_nothing() -> None:
    report = mhaudit.audit(DENSE["bert"]().eval(), (_ids(),))
    assert report.totals.kv_cache_bytes_per_token == 0
    assert all(b.memory.kv_cache_bytes == 0 for b in report.blocks)


def test_t5_counts_decoder_self_attention_only() -> None:
    model = DENSE["t5"]().eval()
    ids = _ids()
    report = mhaudit.audit(model, {"input_ids": ids, "decoder_input_ids": ids[:, :8]})
    kinds = {(b.layout.kind, b.layout.causal) for b in report.blocks}
    assert kinds == {("self", False), ("self", True), ("cross", False)}
    # 2 decoder layers · (K + V) 4 heads · 16 · 2 B = 2 · 256 B per generated token
    assert report.totals.kv_cache_bytes_per_token == 2 * 256
    cross = [b for b in report.blocks if b.layout.kind == "cross"]
    # cross K/V once per source sequence: 256 B · 16 encoder positions
    assert all(b.memory.kv_cache_bytes_static == 256 * 16 for b in cross)
    assert all(b.memory.kv_cache_bytes_per_token == 0 for b in cross)


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_sliding_window_caps_the_cache(impl: str, use_cache: bool) -> None:
    # without a cache HF reads positions through position_ids[b, q] and ANDs in a
    # packed-sequence term: the window must be read through both, boolean or additive
    config = T.MistralConfig(**SMALL, num_hidden_layers=1, intermediate_size=96,
                             num_key_value_heads=2, sliding_window=16,
                             attn_implementation=impl)
    model = T.MistralForCausalLM(config).eval()
    report = mhaudit.audit(model, {"input_ids": _ids(1, 64), "use_cache": use_cache},
                           decode=True, context=64)
    (block,) = report.blocks
    assert block.layout.window == 16
    assert report.decode is not None
    # one new token reads the 16 cached positions: 128 B · 16
    assert report.decode.kv_cache_bytes == 128 * 16
    # 2 KV heads · (16 + 16) · 2 B = 128 B per token, held for 16 of the 64 positions
    assert block.memory.kv_cache_bytes_per_token == 128
    assert block.memory.kv_cache_bytes == 128 * 16
    # the core over the window: rows keep 1..16 keys, then 16: 136 + 48·16 = 904 pairs
    per_pair = 2 * 16 + 3 + 2 * 16
    projections = block.flops.q_proj + block.flops.k_proj + block.flops.v_proj + block.flops.o_proj
    assert block.flops.causal_total == projections + 4 * 904 * per_pair


PEAK: dict[str, Callable[[], nn.Module]] = {
    "gpt2-eager": lambda: T.GPT2LMHeadModel(T.GPT2Config(
        vocab_size=1000, n_embd=256, n_layer=4, n_head=4, attn_implementation="eager")),
    "llama-sdpa": lambda: T.LlamaForCausalLM(T.LlamaConfig(
        vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, attn_implementation="sdpa")),
    "bert-eager": lambda: T.BertModel(T.BertConfig(
        vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=4, attn_implementation="eager")),
}


@pytest.mark.parametrize("name", sorted(PEAK))
def test_inference_peak_within_10_percent_of_mem_tracker(name: str) -> None:
    from torch.distributed._tools.mem_tracker import MemTracker

    torch.manual_seed(0)
    model = PEAK[name]().eval()
    ids = torch.randint(0, 1000, (2, 512))
    tracker = MemTracker()
    tracker.track_external(model)
    with torch.no_grad(), tracker:
        model(ids)
    (peak,) = tracker.get_tracker_snapshot("peak").values()
    measured = next(v for k, v in peak.items() if str(k).endswith("ACT"))
    report = mhaudit.audit(model, (ids,), dtype="fp32")
    estimate = report.totals.peak_activation_bytes
    assert estimate is not None
    assert abs(estimate - measured) <= 0.10 * measured
    assert report.totals.peak_memory_bytes == (
        report.totals.param_bytes + report.totals.buffer_bytes + estimate
    )


def test_eager_scores_at_the_width_softmax_computes() -> None:
    llama = DENSE["llama"]().eval()
    (block, _) = mhaudit.audit(llama, (_ids(),)).blocks
    # HF eager Llama calls softmax(..., dtype=float32): 1·4·16·16 scores · 4 B, not 2 B
    assert block.layout.score_dtype == "float32"
    assert block.memory.scores_bytes == 1 * 4 * 16 * 16 * 4
    gpt2 = DENSE["gpt2"]().eval()
    (block, _) = mhaudit.audit(gpt2, (_ids(),)).blocks
    assert block.layout.score_dtype is None and block.memory.scores_bytes == 1 * 4 * 16 * 16 * 2


PATH_FIELDS = ("peak_activation_bytes", "flops", "kv_cache_bytes_per_token", "params_total",
               "attention_params", "params_active")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PEAK))
def test_every_path_gives_the_same_figures(name: str, tmp_path: Any) -> None:
    """A real model, the same model built on meta, its config.json on the command line and
    a model file: one set of figures (the meta paths run the kernels a real run does)."""
    import json

    from click.testing import CliRunner

    from mhaudit.cli import main as cli

    model = PEAK[name]().eval()
    ids = torch.zeros(2, 64, dtype=torch.long)
    real = mhaudit.audit(model, (ids,), dtype="fp32").totals
    with torch.device("meta"):
        meta_model = PEAK[name]().eval()
    meta = mhaudit.audit(meta_model, (torch.zeros(2, 64, dtype=torch.long),),
                         dtype="fp32").totals
    config = tmp_path / "config.json"
    data = model.config.to_dict()
    data["architectures"] = [type(model).__name__]
    data["attn_implementation"] = model.config._attn_implementation  # not in to_dict()
    config.write_text(json.dumps(data))
    done = CliRunner().invoke(cli, ["report", str(config), "--format", "json", "--dtype",
                                    "fp32", "-b", "2", "-n", "64"])
    assert done.exit_code == 0, done.output
    from_config = json.loads(done.stdout)["totals"]
    source = tmp_path / "model.py"
    source.write_text(
        "import json, torch, transformers\n"
        f"CONFIG = json.loads({json.dumps(json.dumps(data))})\n"
        "def build_model():\n"
        f"    config = transformers.AutoConfig.for_model(CONFIG.pop('model_type'), **CONFIG)\n"
        f"    return transformers.{type(model).__name__}(config)\n"
        "def example_inputs():\n"
        "    return (torch.zeros(2, 64, dtype=torch.long),)\n")
    from_file = mhaudit.audit_target(str(source), dtype="fp32").totals
    for field in PATH_FIELDS:
        figures = {getattr(real, field), getattr(meta, field), from_config[field],
                   getattr(from_file, field)}
        assert len(figures) == 1, (field, getattr(real, field), getattr(meta, field),
                                   from_config[field], getattr(from_file, field))
