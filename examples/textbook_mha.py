"""The textbook multi-head attention layer: separate Q, K, V, O projections and explicit softmax."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class MultiHeadAttention(nn.Module):
    """Multi-head attention with one nn.Linear per projection and eager score matrices."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        assert d_model % num_heads == 0, "d_model must be a multiple of num_heads"
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.q_linear = nn.Linear(d_model, d_model)
        self.k_linear = nn.Linear(d_model, d_model)
        self.v_linear = nn.Linear(d_model, d_model)
        self.out_linear = nn.Linear(d_model, d_model)

    def _split_heads(self, x: Tensor) -> Tensor:
        batch_size = x.size(0)
        # (B, n, d_model) -> (B, n, h, d_k) -> (B, h, n, d_k)
        return x.view(batch_size, -1, self.num_heads, self.d_k).transpose(1, 2)

    def forward(self, query: Tensor, key: Tensor, value: Tensor) -> Tensor:
        batch_size = query.size(0)
        q = self._split_heads(self.q_linear(query))  # (B, h, n_q, d_k)
        k = self._split_heads(self.k_linear(key))  # (B, h, n_kv, d_k)
        v = self._split_heads(self.v_linear(value))  # (B, h, n_kv, d_k)

        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)  # (B, h, n_q, n_kv)
        probs = F.softmax(scores, dim=-1)  # (B, h, n_q, n_kv)
        context = torch.matmul(probs, v)  # (B, h, n_q, d_k)

        # (B, h, n_q, d_k) -> (B, n_q, h, d_k) -> (B, n_q, d_model)
        context = context.transpose(1, 2).contiguous().view(batch_size, -1, self.d_model)
        return self.out_linear(context)


def _make(d_model: int, num_heads: int) -> MultiHeadAttention:
    return MultiHeadAttention(d_model, num_heads).eval()


def build_model() -> nn.Module:
    """The seed article's configuration: d_model=64, 8 heads (d_k=8)."""
    return _make(d_model=64, num_heads=8)


def make_large() -> nn.Module:
    """The base Transformer width: d_model=512, 8 heads (d_k=64)."""
    return _make(d_model=512, num_heads=8)


def make_single_head() -> nn.Module:
    """One head over the full width: d_model=64, 1 head (d_k=64)."""
    return _make(d_model=64, num_heads=1)


def example_inputs(model: nn.Module | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Self-attention inputs: the same (32, 10, d_model) tensor as Q, K and V.

    The width defaults to 64 (``build_model``); pass the model to size the inputs
    for ``make_large``.
    """
    d_model = model.d_model if isinstance(model, MultiHeadAttention) else 64
    x = torch.randn(32, 10, d_model)  # (B, n, d_model)
    return (x, x, x)
