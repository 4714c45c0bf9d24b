"""GPT-3 175B's shape (Brown et al. 2020, table 2.1): h = 12,288, a = 96, 96 layers, s = 2,048,
written as the layer of Korthikanti et al. 2022 (eager softmax, dropout); a model file
(``build_model``, ``build_reduced``, ``example_inputs``), meant for the meta device."""

from __future__ import annotations

import torch

from tests.parallel.korthikanti import KorthikantiStack

HIDDEN, HEADS, LAYERS, SEQ = 12288, 96, 96, 2048


def build_model(layers: int = LAYERS) -> KorthikantiStack:
    """The layer stack in bf16, 96 layers deep."""
    return KorthikantiStack(layers, HIDDEN, HEADS).to(torch.bfloat16)


def build_reduced() -> KorthikantiStack:
    """A two-layer copy (``gpt3.py:build_reduced``), for a training step."""
    return build_model(2)


def example_inputs() -> tuple[torch.Tensor]:
    """One sequence of 2,048 positions, already embedded: (b, s, h) = (1, 2048, 12288)."""
    return (torch.zeros(1, SEQ, HIDDEN, dtype=torch.bfloat16),)
