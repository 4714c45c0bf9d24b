"""ViT-B/16 (12 layers, d 768, 12 heads) on one 224x224 image: 197 tokens."""

from __future__ import annotations

import torch
from transformers import ViTConfig, ViTModel


def build_model(attn_implementation: str = "sdpa") -> torch.nn.Module:
    """ViT-B/16 from its default configuration (patch 16, image 224); no weights."""
    return ViTModel(ViTConfig(attn_implementation=attn_implementation)).eval()


def example_inputs() -> tuple[torch.Tensor]:
    """One RGB image of 224x224 pixels."""
    return (torch.zeros(1, 3, 224, 224),)
