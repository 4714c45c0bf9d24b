"""A Mixtral-8x7B-shaped decoder (32 layers, d 4096, 8 experts, top 2) at 2048 tokens."""

from __future__ import annotations

import torch
from transformers import MixtralConfig, MixtralModel

SEQ_LEN = 2048


def build_model(attn_implementation: str = "sdpa") -> torch.nn.Module:
    """The model, built wherever the caller's default device points (meta for audits)."""
    config = MixtralConfig(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
        num_local_experts=8, num_experts_per_tok=2, use_cache=False,
        attn_implementation=attn_implementation,
    )
    return MixtralModel(config).eval()


def example_inputs() -> tuple[torch.Tensor]:
    """One sequence of 2048 token ids."""
    return (torch.zeros(1, SEQ_LEN, dtype=torch.long),)
