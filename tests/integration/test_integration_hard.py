"""Harder third-party layouts: latent (low-rank) attention, blocked local attention, pooled queries.

Every model is built from a small config under ``torch.device("meta")``: no weights,
no downloads. Expected figures come from the config and from the parameter counts
of the named projection modules, with the arithmetic in comments.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from mhaudit.api import audit
from mhaudit.data import AttentionBlock, Report

tf = pytest.importorskip("transformers")


def _audit_inputs(model_fn: Any, **inputs: Any) -> Report:
    with torch.device("meta"):
        model = model_fn()
        batch = {
            k: (torch.ones if k == "attention_mask" else torch.zeros)(*v, dtype=torch.long)
            for k, v in inputs.items()
        }
    return audit(model, batch)


def _explained(block: AttentionBlock) -> None:
    params = block.params
    assert not any(d.reason.startswith("not explained") for d in params.deviations)
    assert params.textbook + sum(d.params for d in params.deviations) == params.total
    assert params.formula == params.total


def _module_params(model: nn.Module, prefix: str, names: tuple[str, ...]) -> int:
    return sum(p.numel() for n in names
               for p in model.get_submodule(f"{prefix}.{n}").parameters())


# --- DeepSeek multi-head latent attention ----------------------------------------------------
# hidden 64, h 4, qk_nope 16, qk_rope 8 (d_k = 24), v_head_dim 16, kv_lora_rank 32, no biases.
# kv_a_proj_with_mqa 64 → 32 + 8 = 40: 2,560; kv_b_proj 32 → 4·(16 + 16) = 128: 4,096;
# o_proj 64 → 64: 4,096. Q: q_proj 64 → 96: 6,144, or with q_lora_rank 24
# q_a_proj 64 → 24: 1,536 + q_b_proj 24 → 96: 2,304 = 3,840.
# K = [kv_b's k_nope (4 heads of 16) | k_rope from kv_a (1 head of 8, broadcast)]; V = kv_b's
# other half. kv_a's latent 32 columns feed kv_b for both K and V: counted once, under K.
# Norm weights (q_a_layernorm, kv_a_layernorm) are not projections and are not counted.

def _deepseek(version: str, impl: str, q_lora_rank: int | None) -> tuple[nn.Module, Report]:
    config_cls = getattr(tf, f"DeepseekV{version}Config")
    model_cls = getattr(tf, f"DeepseekV{version}Model")
    config = config_cls(hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                        num_hidden_layers=1, intermediate_size=128, moe_intermediate_size=32,
                        vocab_size=100, q_lora_rank=q_lora_rank, kv_lora_rank=32,
                        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                        n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=1,
                        n_shared_experts=1, n_group=1, topk_group=1)
    config._attn_implementation = impl
    holder: list[nn.Module] = []

    def build() -> nn.Module:
        holder.append(model_cls(config))
        return holder[0]

    report = _audit_inputs(build, input_ids=(2, 16))
    return holder[0], report


@pytest.mark.parametrize(
    ("version", "impl", "q_lora_rank"),
    [("2", "sdpa", None), ("2", "eager", None), ("2", "sdpa", 24), ("3", "eager", 24)],
)
def test_deepseek_latent_attention_counts_every_projection_once(
    version: str, impl: str, q_lora_rank: int | None
) -> None:
    model, report = _deepseek(version, impl, q_lora_rank)
    assert len(report.blocks) == 1
    block = report.blocks[0]
    lay = block.layout
    assert (lay.name, lay.kind, lay.d_model) == ("layers.0.self_attn", "self", 64)
    assert (lay.num_heads, lay.num_kv_heads, lay.head_dim, lay.v_head_dim) == (4, 4, 24, 16)
    assert not lay.kv_shared
    q_names = ("q_proj",) if q_lora_rank is None else ("q_a_proj", "q_b_proj")
    names = (*q_names, "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")
    expected = _module_params(model, "layers.0.self_attn", names)
    # 6,144 + 2,560 + 4,096 + 4,096 = 16,896 without q_lora; 3,840 + ... = 14,592 with it
    assert expected == (16_896 if q_lora_rank is None else 14_592)
    assert block.params.total == expected
    # Q: 6,144 or 3,840; K: kv_b's k half 2,048 + kv_a's rope 512 + kv_a's latent 2,048;
    # V: kv_b's v half 2,048; O: 4,096
    assert block.params.q == (6_144 if q_lora_rank is None else 3_840)
    assert (block.params.k, block.params.v, block.params.o) == (4_608, 2_048, 4_096)
    assert lay.k is not None and lay.k.low_rank_width == 32 and lay.k.in_features == 64
    assert lay.q is not None and lay.q.low_rank_width == (q_lora_rank or 0)
    _explained(block)
    # textbook 4·64² = 16,384; h·d_k = 96: +8,192; d_v = 16: −4,096 → 20,480 as full matrices;
    # the factorised Q/K/V hold the rest: 16,896 − 20,480 = −3,584 (or 14,592 − 20,480)
    low = [d for d in block.params.deviations if d.reason.startswith("low-rank")]
    assert len(low) == 1 and low[0].params == expected - 20_480


class _CatKeyAttention(nn.Module):
    """K joins per-head features and one shared rope-like head along the head dim (torch.cat)."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(32, 4 * 12, bias=False)  # 32·48 = 1,536
        self.k_main = nn.Linear(32, 4 * 8, bias=False)  # 32·32 = 1,024
        self.k_shared = nn.Linear(32, 4, bias=False)  # 32·4 = 128, one head of 4
        self.v = nn.Linear(32, 4 * 12, bias=False)  # 1,536
        self.o = nn.Linear(48, 32, bias=False)  # 1,536

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q(x).view(b, n, 4, 12).transpose(1, 2)  # (B, 4, n, 12)
        k_main = self.k_main(x).view(b, n, 4, 8).transpose(1, 2)  # (B, 4, n, 8)
        k_shared = self.k_shared(x).view(b, 1, n, 4).expand(b, 4, n, 4)  # (B, 4, n, 4)
        k = torch.cat((k_main, k_shared), dim=-1)  # (B, 4, n, 12)
        v = self.v(x).view(b, n, 4, 12).transpose(1, 2)
        out = nn.functional.scaled_dot_product_attention(q, k, v)
        return self.o(out.transpose(1, 2).reshape(b, n, 48))


def test_feature_axis_cat_attributes_each_part_to_its_own_projection() -> None:
    with torch.device("meta"):
        report = audit(_CatKeyAttention(), (torch.zeros(2, 8, 32),))
    block = report.blocks[0]
    lay = block.layout
    assert (lay.kind, lay.d_model, lay.num_heads, lay.num_kv_heads, lay.head_dim) == (
        "self", 32, 4, 4, 12)
    # K = k_main 1,024 + k_shared 128; total 1,536 + 1,152 + 1,536 + 1,536 = 5,760
    assert (block.params.q, block.params.k, block.params.v, block.params.o) == (
        1_536, 1_152, 1_536, 1_536)
    assert lay.k is not None and lay.k.low_rank_width == 0


class _LinearInput(nn.Module):
    """A linear input layer feeding attention is the previous layer, not a factorisation."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(16, 64)
        self.attn = nn.MultiheadAttention(64, 4, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        return self.attn(h, h, h, need_weights=False)[0]


def test_a_wider_input_projection_is_not_a_low_rank_factor() -> None:
    with torch.device("meta"):
        report = audit(_LinearInput(), (torch.zeros(2, 8, 16),))
    block = report.blocks[0]
    # nn.MultiheadAttention(64, 4): 4·64² + 4·64 = 16,640; inp (16 → 64) is not counted
    assert block.params.total == 16_640
    lay = block.layout
    assert all(p is None or p.low_rank_width == 0 for p in (lay.q, lay.k, lay.v))
    _explained(block)


# --- LongT5 local and transient-global attention ---------------------------------------------
# d_model 64, h 4, d_kv 16: q, k, v, o each 64·64 = 4,096, no biases; total 4·64² = 16,384.
# Scores are einsum("...qhd,...khd->...hqk") over blocks of local_radius + 1 = 5 positions;
# keys are three padded blocks joined along the token axis (15 positions).

@pytest.mark.parametrize("attention_type", ["local", "transient-global"])
def test_longt5_blocked_encoder_attention_is_found_with_exact_widths(attention_type: str) -> None:
    config = tf.LongT5Config(d_model=64, d_kv=16, num_heads=4, d_ff=128, num_layers=1,
                             num_decoder_layers=1, vocab_size=100, decoder_start_token_id=0,
                             pad_token_id=0, encoder_attention_type=attention_type,
                             local_radius=4, global_block_size=4)
    config._attn_implementation = "eager"
    report = _audit_inputs(lambda: tf.LongT5Model(config), input_ids=(2, 16),
                           attention_mask=(2, 16), decoder_input_ids=(2, 8))
    names = [b.name for b in report.blocks]
    module = "LocalSelfAttention" if attention_type == "local" else "TransientGlobalSelfAttention"
    assert names == [f"encoder.block.0.layer.0.{module}", "decoder.block.0.layer.0.SelfAttention",
                     "decoder.block.0.layer.1.EncDecAttention"]
    enc = report.blocks[0]
    lay = enc.layout
    assert (lay.kind, lay.d_model, lay.num_heads, lay.num_kv_heads, lay.head_dim) == (
        "self", 64, 4, 4, 16)
    assert (enc.params.q, enc.params.k, enc.params.v, enc.params.o) == (4_096,) * 4
    assert enc.params.total == enc.params.textbook == 16_384
    _explained(enc)


class _EllipsisEinsum(nn.Module):
    """Explicit attention written with ``...`` einsum subscripts over (B, blocks, n, h, d)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(32, 96, bias=False)  # 3·32·32 = 3,072
        self.o = nn.Linear(32, 32, bias=False)  # 1,024

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, 2, n // 2, 3, 4, 8).unbind(3)  # (B, 2, n/2, 4, 8)
        scores = torch.einsum("...qhd,...khd->...hqk", q, k)  # (B, 2, 4, n/2, n/2)
        probs = scores.softmax(dim=-1)
        ctx = torch.einsum("...hqk,...khd->...qhd", probs, v)  # (B, 2, n/2, 4, 8)
        return self.o(ctx.reshape(b, n, 32))


def test_einsum_with_ellipsis_is_a_core() -> None:
    with torch.device("meta"):
        report = audit(_EllipsisEinsum(), (torch.zeros(2, 8, 32),))
    assert len(report.blocks) == 1
    block = report.blocks[0]
    lay = block.layout
    assert (lay.num_heads, lay.num_kv_heads, lay.head_dim, lay.v_head_dim) == (4, 4, 8, 8)
    # fused qkv split three ways: 1,024 each; o 1,024; total 4·32² = 4,096
    assert (block.params.q, block.params.k, block.params.v, block.params.o) == (1_024,) * 4
    _explained(block)


# --- Funnel: the pooled-query layer attends over the same hidden states ---------------------
# d_model 64, n_head 4, d_head 16. Block 1's first layer pools the queries (stride 2 over
# 16 positions: 8) from the same normed hidden states K and V read: self-attention with
# n_q = 8, n_kv = 16. q (no bias) 64·64 = 4,096; k, v 4,096 + 64; post_proj 4,096 + 64.

def test_funnel_pooled_queries_are_self_attention() -> None:
    config = tf.FunnelConfig(d_model=64, n_head=4, d_head=16, block_sizes=[1, 1],
                             num_decoder_layers=1, d_inner=128, vocab_size=100)
    report = _audit_inputs(lambda: tf.FunnelModel(config), input_ids=(2, 16))
    by_name = {b.name: b for b in report.blocks}
    pooled = by_name["encoder.blocks.1.0.attention"].layout
    assert (pooled.kind, pooled.seq_len_q, pooled.seq_len_kv) == ("self", 8, 16)
    assert all(b.layout.kind == "self" for b in report.blocks)


def test_cross_attention_over_another_sequence_stays_cross() -> None:
    config = tf.BartConfig(d_model=64, encoder_layers=1, decoder_layers=1,
                           encoder_attention_heads=4, decoder_attention_heads=4,
                           encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=100,
                           max_position_embeddings=64)
    report = _audit_inputs(lambda: tf.BartModel(config), input_ids=(2, 16),
                           decoder_input_ids=(2, 8))
    kinds = [b.layout.kind for b in report.blocks]
    assert kinds == ["self", "self", "cross"]


def test_factorised_projection_flops_follow_their_weights() -> None:
    config = tf.DeepseekV2Config(
        hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=32,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, vocab_size=100,
        n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=1,
    )
    config._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = tf.DeepseekV2Model(config)
        ids = torch.zeros(2, 16, dtype=torch.long)
    block = audit(model, (ids,)).blocks[0]
    rows = 2 * 16
    # every attributed projection weight element is one multiply-add per token row
    weights = sum(p.weight_params for p in (block.layout.q, block.layout.k, block.layout.v,
                                            block.layout.o) if p is not None)
    flops = block.flops
    assert flops.q_proj + flops.k_proj + flops.v_proj + flops.o_proj == 2 * rows * weights


def test_kv_cache_counts_what_the_code_caches() -> None:
    from mhaudit.api import audit as run_audit

    mla = tf.DeepseekV3Config(
        hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=32,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, vocab_size=100,
        n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=1,
    )
    gqa = tf.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
    with torch.device("meta"):
        ids = torch.zeros(2, 16, dtype=torch.long)
        deepseek, llama = tf.DeepseekV3Model(mla), tf.LlamaModel(gqa)
        uncached = tf.LlamaModel(tf.LlamaConfig(**{**gqa.to_dict(), "use_cache": False}))
    # MLA caches the normed latent (kv_lora_rank 32) and the shared rope key (8): 40 per token
    block = run_audit(deepseek, (ids,)).blocks[0]
    assert block.layout.cached_width == 32 + 8
    assert block.memory.kv_cache_bytes_per_token == 40 * 2  # bf16
    # GQA caches K and V per KV head: 2 heads · (16 + 16) = 64 per token
    assert run_audit(llama, (ids,)).blocks[0].layout.cached_width == 2 * (16 + 16)
    # without a cache in the forward, the figure comes from the layout: the same 64
    plain = run_audit(uncached, (ids,)).blocks[0]
    assert plain.layout.cached_width is None
    assert plain.memory.kv_cache_bytes_per_token == 64 * 2
