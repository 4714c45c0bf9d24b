"""perceiver-pytorch models and transformers attention modules built on their own."""

from __future__ import annotations

from typing import Any

import torch

from corpus_harness.entry import Built, Entry, lin, mha

D, H, B, N, M = 32, 4, 2, 6, 5
"""Width, heads, batch, tokens, context tokens."""


def _perceiver_io() -> Built:
    from perceiver_pytorch import PerceiverIO

    model = PerceiverIO(dim=3, queries_dim=16, logits_dim=10, depth=1, num_latents=5,
                        latent_dim=D, cross_heads=1, latent_heads=H, cross_dim_head=16,
                        latent_dim_head=8)
    return model, (torch.randn(B, 7, 3),), {"queries": torch.randn(B, 4, 16)}


def _perceiver_lm() -> Built:
    from perceiver_pytorch import PerceiverLM

    model = PerceiverLM(num_tokens=100, dim=D, depth=1, max_seq_len=16, num_latents=5,
                        latent_dim=D, cross_heads=1, latent_heads=H, cross_dim_head=16,
                        latent_dim_head=8)
    return model, (torch.randint(0, 100, (B, N)),), {}


def _hf(module: str, cls: str, config: str, config_kwargs: dict[str, Any],
        *args: Any, **kwargs: Any) -> Built:
    import importlib

    cfg = _config(config, **config_kwargs)
    mod = importlib.import_module(f"transformers.models.{module}")
    return getattr(mod, cls)(cfg, *args), (torch.randn(B, N, D),), kwargs


def _rope(head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ones(B, N, head_dim), torch.zeros(B, N, head_dim)  # (B, n, d_k)


def _config(name: str, **kwargs: Any) -> Any:
    import transformers

    config = getattr(transformers, name)(**kwargs)
    config._attn_implementation = "sdpa"
    return config


def _bart() -> Built:
    from transformers.models.bart.modeling_bart import BartAttention

    attn = BartAttention(D, H, config=_config("BartConfig", d_model=D))
    return attn, (torch.randn(B, N, D),), {}


def _whisper_cross() -> Built:
    from transformers.models.whisper.modeling_whisper import WhisperAttention

    attn = WhisperAttention(D, H, is_decoder=True, layer_idx=0,
                            config=_config("WhisperConfig", d_model=D))
    return attn, (torch.randn(B, N, D),), {"key_value_states": torch.randn(B, M, D)}


LLAMA = {"hidden_size": D, "num_attention_heads": H, "num_key_value_heads": 2,
         "intermediate_size": 64, "num_hidden_layers": 1}

ENTRIES = [
    # Encoder cross: q 32 → 16 from the latents, kv 3 → 2·16, out 16 → 32 + 32 = 1,152.
    # Latent self: q 32·32, kv 32·64, out 32·32 + 32 = 4,128. Decoder cross: queries 16 wide
    # attend the latents: q 16·16, kv 32·32, out 16·16 + 16 = 1,552.
    Entry("pp_perceiver_io", "perceiver-pytorch", _perceiver_io,
          (mha(D, 1, 512 + 96 + 544, kind="cross", head_dim=16),
           mha(D, H, 1024 + 2048 + 1056, head_dim=8),
           mha(16, 1, 256 + 1024 + 272, kind="cross", head_dim=16))),
    # Token embeddings are the decoder's queries: both cross blocks are 32·16 + 32·32 + 544.
    Entry("pp_perceiver_lm", "perceiver-pytorch", _perceiver_lm,
          (mha(D, 1, 2080, kind="cross", head_dim=16), mha(D, H, 4128, head_dim=8),
           mha(D, 1, 2080, kind="cross", head_dim=16))),
    Entry("hf_bert_attention", "transformers",
          lambda: _hf("bert.modeling_bert", "BertAttention", "BertConfig",
                      {"hidden_size": D, "num_attention_heads": H}),
          (mha(D, H, 4 * lin(D, D)),)),
    # Conv1D c_attn 32 → 96 with bias and c_proj 32 → 32: 3,168 + 1,056 = 4,224.
    Entry("hf_gpt2_attention", "transformers",
          lambda: _hf("gpt2.modeling_gpt2", "GPT2Attention", "GPT2Config",
                      {"n_embd": D, "n_head": H}),
          (mha(D, H, 4 * lin(D, D)),)),
    # T5: 4 heads of d_kv = 16 (inner 64 ≠ d_model), no biases: 4·32·64 = 8,192.
    Entry("hf_t5_attention_rel_bias", "transformers",
          lambda: _hf("t5.modeling_t5", "T5Attention", "T5Config",
                      {"d_model": D, "d_kv": 16, "num_heads": H}, True),
          (mha(D, H, 4 * 32 * 64, head_dim=16),)),
    Entry("hf_bart_attention", "transformers", _bart, (mha(D, H, 4 * lin(D, D)),)),
    # Whisper's k_proj has no bias: 3·1,056 + 1,024 = 4,192.
    Entry("hf_whisper_cross_attention", "transformers", _whisper_cross,
          (mha(D, H, 3 * lin(D, D) + lin(D, D, bias=False), kind="cross"),)),
    Entry("hf_clip_attention", "transformers",
          lambda: _hf("clip.modeling_clip", "CLIPAttention", "CLIPVisionConfig",
                      {"hidden_size": D, "num_attention_heads": H}),
          (mha(D, H, 4 * lin(D, D)),)),
    # qkv_bias off: 3·1,024 + 1,056 = 4,128.
    Entry("hf_vit_attention_no_qkv_bias", "transformers",
          lambda: _hf("vit.modeling_vit", "ViTAttention", "ViTConfig",
                      {"hidden_size": D, "num_attention_heads": H, "qkv_bias": False}),
          (mha(D, H, 3 * 1024 + lin(D, D)),)),
    # GQA: q 32·32, k = v = 32·16, o 32·32, no biases = 3,072.
    Entry("hf_llama_attention_gqa", "transformers",
          lambda: _hf("llama.modeling_llama", "LlamaAttention", "LlamaConfig", LLAMA, 0,
                      position_embeddings=_rope(8), attention_mask=None),
          (mha(D, H, 3072, kv_heads=2),)),
    # Qwen3: head_dim 16 over d 32 with per-head q/k norms: q 32·64, k = v = 32·32,
    # o 64·32 = 6,144.
    Entry("hf_qwen3_attention_wide_heads", "transformers",
          lambda: _hf("qwen3.modeling_qwen3", "Qwen3Attention", "Qwen3Config",
                      {**LLAMA, "head_dim": 16}, 0, position_embeddings=_rope(16),
                      attention_mask=None),
          (mha(D, H, 6144, kv_heads=2, head_dim=16),)),
]
