"""GPT-2 small (12 layers, d 768, 12 heads) at 1024 tokens."""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2Model

SEQ_LEN = 1024


def build_model(attn_implementation: str = "sdpa") -> torch.nn.Module:
    """GPT-2 small with its default configuration; no weights are downloaded."""
    config = GPT2Config(use_cache=False, attn_implementation=attn_implementation)
    return GPT2Model(config).eval()


def example_inputs() -> tuple[torch.Tensor]:
    """One sequence of 1024 token ids."""
    return (torch.zeros(1, SEQ_LEN, dtype=torch.long),)
