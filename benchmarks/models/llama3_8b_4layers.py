"""The Llama-3-8B shape cut to its first 4 layers, at 2048 tokens."""

from __future__ import annotations

import torch
from llama3_8b import build_model as _full
from llama3_8b import example_inputs

__all__ = ["build_model", "example_inputs"]


def build_model(attn_implementation: str = "sdpa") -> torch.nn.Module:
    """Llama-3-8B's layer shapes, 4 layers deep."""
    return _full(attn_implementation, layers=4)
