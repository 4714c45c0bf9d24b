"""BERT-base with its masked-LM head at 512 tokens, labels given: a training step's inputs."""

from __future__ import annotations

import torch
from transformers import BertConfig, BertForMaskedLM

SEQ_LEN = 512


def build_model() -> torch.nn.Module:
    """BERT-base (12 layers, d = 768, 12 heads, MLM head tied to the embedding); no download."""
    return BertForMaskedLM(BertConfig())


def example_inputs() -> dict[str, torch.Tensor]:
    """One sequence of 512 token ids, which are also the labels."""
    ids = torch.zeros(1, SEQ_LEN, dtype=torch.long)
    return {"input_ids": ids, "labels": ids}
