"""The transformer layer of Korthikanti et al. 2022 (eager softmax, dropout), written so that
torch's TP and SP plans split it: separate Q, K, V; head counts read from local widths."""

from __future__ import annotations

import torch
from torch import nn


class KorthikantiLayer(nn.Module):
    """LN → Q, K, V → softmax(QKᵀ) → dropout → ·V → O → dropout → + → LN → 4h MLP → dropout → +."""

    def __init__(self, hidden: int, heads: int, p: float = 0.1) -> None:
        super().__init__()
        self.head_dim = hidden // heads
        self.ln1 = nn.LayerNorm(hidden)
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.o = nn.Linear(hidden, hidden)
        self.attn_drop = nn.Dropout(p)
        self.drop1 = nn.Dropout(p)
        self.ln2 = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, 4 * hidden)
        self.act = nn.GELU()
        self.down = nn.Linear(4 * hidden, hidden)
        self.drop2 = nn.Dropout(p)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, -1, self.head_dim).transpose(1, 2)  # (b, a, s, d_k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (b, s, h)
        y = self.ln1(x)
        q, k, v = self._heads(self.q(y)), self._heads(self.k(y)), self._heads(self.v(y))
        scores = q @ k.transpose(-2, -1) * self.head_dim**-0.5  # (b, a, s, s)
        probs = self.attn_drop(torch.softmax(scores, dim=-1))
        ctx = (probs @ v).transpose(1, 2).flatten(2)  # (b, s, h)
        x = x + self.drop1(self.o(ctx))
        return x + self.drop2(self.down(self.act(self.up(self.ln2(x)))))


class KorthikantiStack(nn.Module):
    """``n`` layers in a ModuleList named ``layers``."""

    def __init__(self, n: int, hidden: int, heads: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(KorthikantiLayer(hidden, heads) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def paper_bytes(s: int, b: int, h: int, a: int) -> int:
    """Korthikanti et al.'s saved activations of one layer at 16 bits: s·b·h·(34 + 5·a·s/h)."""
    return s * b * h * 34 + 5 * a * s * s * b


class KorthikantiLM(nn.Module):
    """Token embedding → ``n`` pre-norm layers → final LayerNorm → head: the layers as a
    language model, the shape sequence parallelism splits end to end."""

    def __init__(self, n: int, hidden: int, heads: int, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(KorthikantiLayer(hidden, heads) for _ in range(n))
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # ids: (b, s)
        x = self.embed(ids)  # (b, s, h)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))  # (b, s, vocab)


class PostNormLayer(KorthikantiLayer):
    """The same layer with its norms after the residual adds (the original Transformer's
    order): Q, K and V read the residual stream itself, not a norm's output."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (b, s, h)
        q, k, v = self._heads(self.q(x)), self._heads(self.k(x)), self._heads(self.v(x))
        scores = q @ k.transpose(-2, -1) * self.head_dim**-0.5  # (b, a, s, s)
        ctx = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).flatten(2)  # (b, s, h)
        x = self.ln1(x + self.drop1(self.o(ctx)))
        return self.ln2(x + self.drop2(self.down(self.act(self.up(x)))))
