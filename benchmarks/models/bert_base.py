"""BERT-base (12 layers, d 768, 12 heads) at 512 tokens."""

from __future__ import annotations

import torch
from transformers import BertConfig, BertModel

SEQ_LEN = 512


def build_model(attn_implementation: str = "sdpa") -> torch.nn.Module:
    """BERT-base with its default configuration; no weights are downloaded."""
    return BertModel(BertConfig(attn_implementation=attn_implementation)).eval()


def example_inputs() -> tuple[torch.Tensor]:
    """One sequence of 512 token ids."""
    return (torch.zeros(1, SEQ_LEN, dtype=torch.long),)
