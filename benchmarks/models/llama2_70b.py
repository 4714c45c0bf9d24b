"""A Llama-2-70B-shaped decoder (80 layers, d 8192, 64 heads, 8 KV heads) at 4096 tokens."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaModel

SEQ_LEN = 4096


def build_model() -> torch.nn.Module:
    """The model, built wherever the caller's default device points (meta for audits)."""
    config = LlamaConfig(
        hidden_size=8192,
        intermediate_size=28672,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        vocab_size=32000,
        max_position_embeddings=SEQ_LEN,
    )
    return LlamaModel(config)


def example_inputs() -> tuple[torch.Tensor]:
    """One sequence of 4096 token ids."""
    return (torch.zeros(1, SEQ_LEN, dtype=torch.long),)
