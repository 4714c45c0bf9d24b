"""A Llama-3-8B-shaped decoder (32 layers, d 4096, 32 heads, 8 KV heads) at 2048 tokens."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaModel

SEQ_LEN = 2048
LAYERS = 32


def build_model(attn_implementation: str = "sdpa", layers: int = LAYERS) -> torch.nn.Module:
    """The model, built wherever the caller's default device points (meta for audits)."""
    config = LlamaConfig(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
        max_position_embeddings=8192, rope_theta=500000.0, use_cache=False,
        attn_implementation=attn_implementation,
    )
    return LlamaModel(config).eval()


def example_inputs() -> tuple[torch.Tensor]:
    """One sequence of 2048 token ids."""
    return (torch.zeros(1, SEQ_LEN, dtype=torch.long),)
