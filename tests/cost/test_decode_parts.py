"""Decode as generation runs it: the decoder or language model per step, encoders and
towers once in prefill. Oracles come from the configs' numbers and the modules' own
parameter counts, never from the audit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import mhaudit
from mhaudit import audit_target
from tests.fixtures.small_models import TinyGPT
from tests.fixtures.zoo_separate import TextbookSdpa

transformers = pytest.importorskip("transformers")


class TowerLM(TinyGPT):
    """A tower's 8 feature vectors put before the text tokens of a two-layer TinyGPT."""

    def __init__(self) -> None:
        super().__init__()
        self.tower = nn.Sequential(nn.Linear(16, 64), TextbookSdpa(64, 4))

    def forward(self, ids: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.tower(features), self.embed(ids)], dim=1)  # (b, 8 + n, d)
        b, n, d = x.shape
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["ln"](x)).split(d, dim=2)  # 3 × (b, n, d)
            q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in (q, k, v))
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + blk["proj"](y.transpose(1, 2).reshape(b, n, d))
            x = x + blk["out"](torch.nn.functional.gelu(blk["fc"](x)))
        return self.head(x)  # (b, n, vocab)


def test_a_tower_runs_once_and_the_language_model_steps() -> None:
    with torch.device("meta"):
        model = TowerLM()
        inputs = {"ids": torch.zeros(1, 16, dtype=torch.long), "features": torch.zeros(1, 8, 16)}
    report = mhaudit.audit(model, inputs, decode=True, dtype="bf16")
    d = report.decode
    assert d is not None
    assert [b.name for b in d.blocks] == ["blocks.0", "blocks.1"]  # not tower.1
    assert d.context == 8 + 16  # the tower's 8 positions and the 16 tokens
    assert d.prefill_only_weight_bytes == 2 * _numel(model.tower)
    # the blocks and head, one row of the 100 × 64 table, at 2 bytes
    weights = _numel(model) - _numel(model.tower) - 100 * 64 + 64
    assert d.weight_bytes == 2 * weights
    # 2 per weight but the row, QKᵀ + PV 4·h·c·d_k + softmax 3·h·c per layer, h 4, d_k 16
    cores = 2 * (4 * 4 * 24 * 16 + 3 * 4 * 24)
    assert d.flops_per_step == pytest.approx(2 * (weights - 64) + cores, rel=0.02)



def _numel(*modules: nn.Module) -> int:
    """Parameters of ``modules``, a tensor shared between them counted once."""
    seen = {id(p): p.numel() for m in modules for p in m.parameters()}
    return sum(seen.values())


def _cross_kv(layers: Any, attention: str, k: str, v: str) -> int:
    """Parameters of every layer's cross-attention K and V projections."""
    return sum(_numel(getattr(getattr(layer, attention), k), getattr(getattr(layer, attention), v))
               for layer in layers)


@pytest.mark.slow
def test_whisper_small_step_reads_the_decoder_and_its_caches() -> None:
    config = transformers.WhisperConfig(
        d_model=768, encoder_layers=12, decoder_layers=12, encoder_attention_heads=12,
        decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072)
    with torch.device("meta"):
        model = transformers.WhisperForConditionalGeneration(config)
        inputs = {"input_features": torch.zeros(1, 80, 3000),
                  "decoder_input_ids": torch.zeros(1, 128, dtype=torch.long)}
    report = mhaudit.audit(model, inputs, decode=True, context=448, dtype="bf16")
    d = report.decode
    assert d is not None
    layers, d_model, source = 12, 768, 1500  # decoder layers, width, encoder positions
    decoder = model.model.decoder  # its embed_tokens is the tied LM head
    weights = _numel(decoder) - _cross_kv(decoder.layers, "encoder_attn", "k_proj", "v_proj")
    # decoder weights 153,580,800 − cross K/V 12·(2·768² + 768) = 139,415,808, at 2 B
    # 278,831,616 + cross cache 2·12·1500·768·2 B = 55,296,000 + self cache
    # 2·12·768·2 B · 448 = 16,515,072: 350,642,688 B (the step also writes one token);
    # the whole model read each step, at the encoder's 1500 positions, was 592 MB
    cross_cache = 2 * layers * source * d_model * 2
    self_cache = 2 * layers * d_model * 2 * 448
    hand = 2 * weights + cross_cache + self_cache
    assert d.bytes_per_step == pytest.approx(hand, rel=0.02)
    assert d.kv_read_bytes == cross_cache + self_cache
    # FLOPs: 2 per decoder weight but the gathered positions (448·768), and per layer
    # QKᵀ + PV 4·h·n·d_k + softmax 3·h·n over h 12, d_k 64 at n = 448 (self) and 1500 (cross)
    h, d_k = 12, 64
    cores = layers * sum(4 * h * n * d_k + 3 * h * n for n in (448, source))
    assert d.flops_per_step == pytest.approx(2 * (weights - 448 * d_model) + cores, rel=0.02)
    # a step runs the decoder's 12 self and 12 cross blocks, none of the encoder's
    assert [b.name for b in d.blocks] == [
        b.name for b in report.blocks if b.name.startswith("model.decoder.")]
    assert len(d.blocks) == 2 * layers
    # the curve ends at the decoder's positions, not the encoder's
    assert d.by_context[-1].context == config.max_target_positions == 448
    step = mhaudit.audit(model, inputs, decode=True, dtype="bf16").decode
    assert step is not None and step.context == 128  # the decoder's tokens, not 1500


@pytest.mark.slow
def test_llava_style_step_runs_the_language_model_at_its_positions(tmp_path: Path) -> None:
    vision = {"model_type": "clip_vision_model", "hidden_size": 64, "intermediate_size": 128,
              "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 336,
              "patch_size": 14}
    text = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 1000, "max_position_embeddings": 2048}
    raw = {"model_type": "llava", "vision_config": vision, "text_config": text,
           "image_token_index": 999, "architectures": ["LlavaForConditionalGeneration"]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    report = audit_target(str(path), decode=True, seq_len=128, dtype="bf16")
    d = report.decode
    assert d is not None
    config = transformers.LlavaConfig.from_json_file(str(path))
    with torch.device("meta"):
        model = transformers.LlavaForConditionalGeneration(config)
    lm = model.model.language_model
    # the LM sees 128 text tokens + (336 / 14)² = 576 image tokens = 704; the tower 577
    assert d.context == 128 + (336 // 14) ** 2 == 704
    # weights: the LM's without its embedding table, one gathered row, the LM head
    vocab, width = 1000, 64
    read = _numel(lm) - vocab * width + width + _numel(model.lm_head)
    assert d.weight_bytes == 2 * read
    # FLOPs: 2 per weight read, and per layer QKᵀ + PV 4·h·c·d_k + softmax 3·h·c over
    # h 4, d_k 16 at c 704 (norms and activations left out: under 2%)
    layers, h, d_k, c = 2, 4, 16, 704
    flops = 2 * (read - width) + layers * (4 * h * c * d_k + 3 * h * c)
    assert d.flops_per_step == pytest.approx(flops, rel=0.02)
    assert [b.name for b in d.blocks] == [
        b.name for b in report.blocks if ".language_model." in f".{b.name}"]
    assert d.prefill_only_flops > 0
    assert d.by_context[-1].context == 2048  # the language model's config, not the tower's
    tower = _numel(model.model.vision_tower, model.model.multi_modal_projector)
    assert d.prefill_only_weight_bytes == 2 * tower
    from mhaudit.render.phases import phase_lines

    assert "once in prefill, not per step" in " ".join(phase_lines(report))


@pytest.mark.slow
def test_two_token_inputs_the_encoders_feeds_the_cross_cache() -> None:
    # T5: input_ids and decoder_input_ids both index the shared table; the encoder's
    # feeds the cross-attention K/V, so the step follows decoder_input_ids
    config = transformers.T5Config(d_model=64, d_ff=128, d_kv=16, num_heads=4, num_layers=2,
                                   num_decoder_layers=2, vocab_size=100)
    with torch.device("meta"):
        model = transformers.T5ForConditionalGeneration(config)
        inputs = {"input_ids": torch.zeros(1, 32, dtype=torch.long),
                  "attention_mask": torch.ones(1, 32, dtype=torch.long),
                  "decoder_input_ids": torch.zeros(1, 8, dtype=torch.long)}
    report = mhaudit.audit(model, inputs, decode=True, dtype="bf16")
    d = report.decode
    assert d is not None and d.context == 8
    assert [b.name for b in d.blocks] == [
        b.name for b in report.blocks if b.name.startswith("decoder.")]
    blocks = [layer.layer[1] for layer in model.decoder.block]  # the cross-attention layer
    cross = sum(_numel(b.EncDecAttention.k, b.EncDecAttention.v) for b in blocks)
    # decoder 2·(16,384 + 8,192 + 16,384 + norms) + table 6,400 + head, less cross K/V
    weights = _numel(model.decoder, model.lm_head) - cross
    assert d.weight_bytes == pytest.approx(2 * weights, rel=0.01)


def test_a_decoder_only_step_runs_the_whole_model() -> None:
    # a mask is an input without weights of its own: no part runs only in prefill
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100,
                                     n_positions=64)
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(config)
        inputs = {"input_ids": torch.zeros(1, 16, dtype=torch.long),
                  "attention_mask": torch.ones(1, 16, dtype=torch.long)}
    report = mhaudit.audit(model, inputs, decode=True)
    d = report.decode
    assert d is not None and d.prefill_only_flops == 0
    assert [b.name for b in d.blocks] == [b.name for b in report.blocks]
    assert "prefill" not in d.convention


def test_a_plan_reads_the_generating_part_per_step() -> None:
    config = transformers.WhisperConfig(
        d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=1000,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
        num_mel_bins=8, max_source_positions=100, max_target_positions=64)
    with torch.device("meta"):
        model = transformers.WhisperForConditionalGeneration(config)
        inputs = {"input_features": torch.zeros(1, 8, 200),
                  "decoder_input_ids": torch.zeros(1, 16, dtype=torch.long)}
    report = mhaudit.audit(model, inputs, decode=True, parallel="tp=1", gpu="h100",
                           dtype="bf16")
    d = report.decode
    assert d is not None and d.parallel is not None
    decoder = model.model.decoder
    weights = _numel(decoder) - _cross_kv(decoder.layers, "encoder_attn", "k_proj", "v_proj")
    # one GPU, memory-bound: decoder weights at 2 B + cross cache 2·2·100·64·2 B (the conv
    # stem halves 200 frames) + self cache 2·2·64·2 B · 16, over H100's 3,350 GB/s
    hand = 2 * weights + 2 * 2 * 100 * 64 * 2 + 2 * 2 * 64 * 2 * 16
    assert d.parallel.step_time_s * 3350e9 == pytest.approx(hand, rel=0.02)
