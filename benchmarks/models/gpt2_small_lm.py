"""GPT-2 small with its LM head at 1024 tokens, labels given: a training step's inputs."""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SEQ_LEN = 1024


def build_model() -> torch.nn.Module:
    """GPT-2 small (124,439,808 parameters, head tied to the embedding); no download."""
    return GPT2LMHeadModel(GPT2Config(use_cache=False))


def example_inputs() -> dict[str, torch.Tensor]:
    """One sequence of 1024 token ids, which are also the labels."""
    ids = torch.zeros(1, SEQ_LEN, dtype=torch.long)
    return {"input_ids": ids, "labels": ids}
