"""Fused and multi-query attention modules of transformers, and more diffusers video blocks."""

from __future__ import annotations

from typing import Any

import torch

from corpus_harness.entry import Built, Entry, lin, mha

D, H, B, N, M = 32, 4, 2, 6, 5
"""Width, heads, batch, tokens, context tokens."""
FULL = 4 * lin(D, D)
"""Q, K, V, O of D → D with biases (fused or not): 4·1,056 = 4,224."""
BARE = 4 * lin(D, D, bias=False)
"""The same without biases: 4·1,024 = 4,096."""


def _hf(module: str, cls: str, config: str, config_kwargs: dict[str, Any], *args: Any,
        **kwargs: Any) -> Built:
    import importlib

    import transformers

    cfg = getattr(transformers, config)(**config_kwargs)
    cfg._attn_implementation = "sdpa"
    mod = importlib.import_module(f"transformers.models.{module}")
    return getattr(mod, cls)(cfg, *args), (torch.randn(B, N, D),), kwargs


def _rope(width: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ones(B, N, width), torch.zeros(B, N, width)  # (B, n, width)


def _block(module: str, cls: str, args: tuple[Any, ...], inputs: tuple[Any, ...],
           kwargs: dict[str, Any] | None = None, **ctor: Any) -> Built:
    import importlib

    block = getattr(importlib.import_module(f"diffusers.models.{module}"), cls)(*args, **ctor)
    return block, inputs, kwargs or {}


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _latte() -> Built:
    from diffusers.models.transformers.latte_transformer_3d import LatteTransformer3DModel

    model = LatteTransformer3DModel(num_attention_heads=H, attention_head_dim=8, in_channels=4,
                                    out_channels=8, num_layers=1, sample_size=8, patch_size=2,
                                    cross_attention_dim=D, caption_channels=24,
                                    norm_type="ada_norm_single", video_length=2)
    return model, (_x(1, 4, 2, 8, 8),), {"timestep": torch.ones(1),
                                         "encoder_hidden_states": _x(1, M, 24)}


NEOX = {"hidden_size": D, "num_attention_heads": H, "intermediate_size": 64,
        "rotary_pct": 0.25}
GQA = {"hidden_size": D, "num_attention_heads": H, "num_key_value_heads": 2,
       "intermediate_size": 64, "num_hidden_layers": 1}
OUT_BIAS = 3 * 1024 + lin(D, D)
"""Q, K, V without biases, O with one: 4,128."""

ENTRIES = [
    # query_key_value 32 → 96 (per head q, k, v interleaved) with bias, dense 32 → 32.
    Entry("hf_gpt_neox_attention_fused_interleaved", "transformers",
          lambda: _hf("gpt_neox.modeling_gpt_neox", "GPTNeoXAttention", "GPTNeoXConfig", NEOX,
                      0, attention_mask=None, position_embeddings=_rope(2)),
          (mha(D, H, FULL),)),
    # Multi-query: c_attn 32 → 32 + 2·8 with bias (1,584), c_proj 1,056 = 2,640.
    Entry("hf_gpt_bigcode_attention_mqa", "transformers",
          lambda: _hf("gpt_bigcode.modeling_gpt_bigcode", "GPTBigCodeAttention",
                      "GPTBigCodeConfig", {"n_embd": D, "n_head": H, "multi_query": True}),
          (mha(D, H, lin(D, 48) + lin(D, D), kv_heads=1),)),
    # Fused GQA: qkv_proj 32 → 32 + 2·16 (2,048), o_proj 1,024, no biases = 3,072.
    Entry("hf_phi3_attention_fused_gqa", "transformers",
          lambda: _hf("phi3.modeling_phi3", "Phi3Attention", "Phi3Config", GQA, 0,
                      position_embeddings=_rope(8), attention_mask=None),
          (mha(D, H, 3072, kv_heads=2),)),
    # Falcon-7B style multi-query: query_key_value 32 → 32 + 2·8 (1,536), dense 1,024.
    Entry("hf_falcon_attention_mqa", "transformers",
          lambda: _hf("falcon.modeling_falcon", "FalconAttention", "FalconConfig",
                      {"hidden_size": D, "num_attention_heads": H, "multi_query": True,
                       "new_decoder_architecture": False, "alibi": False, "bias": False},
                      0, alibi=None, attention_mask=None, position_embeddings=_rope(8)),
          (mha(D, H, 1536 + 1024, kv_heads=1),)),
    Entry("hf_codegen_attention_mp_interleaved", "transformers",
          lambda: _hf("codegen.modeling_codegen", "CodeGenAttention", "CodeGenConfig",
                      {"n_embd": D, "n_head": H, "rotary_dim": 4}, 0,
                      position_embeddings=_rope(2)),  # sin, cos repeated ×2
          (mha(D, H, BARE),)),
    Entry("hf_gptj_attention_partial_rotary", "transformers",
          lambda: _hf("gptj.modeling_gptj", "GPTJAttention", "GPTJConfig",
                      {"n_embd": D, "n_head": H, "rotary_dim": 4}, 0,
                      position_embeddings=_rope(2)),  # sin, cos repeated ×2
          (mha(D, H, BARE),)),
    Entry("hf_distilbert_self_attention", "transformers",
          lambda: _hf("distilbert.modeling_distilbert", "DistilBertSelfAttention",
                      "DistilBertConfig", {"dim": D, "n_heads": H, "hidden_dim": 64}),
          (mha(D, H, FULL),)),
    # MPT: Wqkv 32 → 96 and out_proj, no biases; ALiBi comes in as a (h, 1, n) bias.
    Entry("hf_mpt_attention_alibi", "transformers",
          lambda: _hf("mpt.modeling_mpt", "MptAttention", "MptConfig",
                      {"d_model": D, "n_heads": H, "expansion_ratio": 2}, 0,
                      position_bias=torch.zeros(H, 1, N)),
          (mha(D, H, BARE),)),
    # Gemma 3: 4 heads of 16 over 2 KV heads: q 32·64, k = v = 32·32, o 64·32 = 6,144.
    Entry("hf_gemma3_attention_wide_heads", "transformers",
          lambda: _hf("gemma3.modeling_gemma3", "Gemma3Attention", "Gemma3TextConfig",
                      {**GQA, "head_dim": 16, "layer_types": ["full_attention"]}, 0,
                      position_embeddings=_rope(16), attention_mask=None),
          (mha(D, H, 6144, kv_heads=2, head_dim=16),)),
    # OLMo 2: q/k RMS norms over the whole projected width, not per head.
    Entry("hf_olmo2_attention_full_width_norm", "transformers",
          lambda: _hf("olmo2.modeling_olmo2", "Olmo2Attention", "Olmo2Config", GQA, 0,
                      position_embeddings=_rope(8), attention_mask=None),
          (mha(D, H, 3072, kv_heads=2),)),
    # HunyuanVideo single stream: like Flux, proj_out reads cat([context, mlp]): 4·1,056.
    Entry("df_hunyuan_video_single_block", "diffusers",
          lambda: _block("transformers.transformer_hunyuan_video",
                         "HunyuanVideoSingleTransformerBlock", (H, 8), (_x(B, N, D),
                                                                       _x(B, M, D), _x(B, D))),
          (mha(D, H, FULL),)),
    # HunyuanVideo double stream: joint attention, both streams biased: 8·1,056 = 8,448.
    Entry("df_hunyuan_video_double_block", "diffusers",
          lambda: _block("transformers.transformer_hunyuan_video",
                         "HunyuanVideoTransformerBlock", (H, 8, 4.0),
                         (_x(B, N, D), _x(B, M, D), _x(B, D))),
          (mha(D, H, 2 * FULL),)),
    # Mochi: joint attention of a 32-wide video and a 16-wide text stream. to_q/k/v 3·1,024,
    # add_q/k/v 16 → 32 3·512, to_out 1,056, to_add_out 32 → 16 + 16 = 528: 6,192.
    Entry("df_mochi_block_asymmetric_streams", "diffusers",
          lambda: _block("transformers.transformer_mochi", "MochiTransformerBlock",
                         (D, H, 8, 16), (_x(B, N, D), _x(B, M, 16), _x(B, D),
                                         torch.ones(B, M, dtype=torch.bool))),
          (mha(D, H, 6192),)),
    # Latte: spatial self + cross attention per frame, then temporal self-attention.
    Entry("df_latte_spatial_temporal", "diffusers", _latte,
          (mha(D, H, OUT_BIAS), mha(D, H, OUT_BIAS, kind="cross"), mha(D, H, OUT_BIAS))),
]
