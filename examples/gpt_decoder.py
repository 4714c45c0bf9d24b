"""A small GPT-style decoder-only language model with fused QKV and causal SDPA."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 1024
    block_size: int = 256
    n_layer: int = 4
    n_head: int = 8
    n_embd: int = 256


class CausalSelfAttention(nn.Module):
    """Causal self-attention: one fused QKV projection, SDPA, one output projection."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.size()  # (B, T, d)
        head_dim = C // self.n_head
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)  # 3 x (B, T, d)
        q = q.view(B, T, self.n_head, head_dim).transpose(1, 2)  # (B, h, T, d_k)
        k = k.view(B, T, self.n_head, head_dim).transpose(1, 2)  # (B, h, T, d_k)
        v = v.view(B, T, self.n_head, head_dim).transpose(1, 2)  # (B, h, T, d_k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, h, T, d_k)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, d)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))  # (B, T, d)


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying

    def forward(self, idx: Tensor) -> Tensor:
        _, t = idx.size()  # (B, T)
        assert t <= self.config.block_size, f"sequence of {t} exceeds block size"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)  # (T,)
        x = self.wte(idx) + self.wpe(pos)  # (B, T, d)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        return self.lm_head(x)  # (B, T, vocab)


def build_model() -> nn.Module:
    """d=256, 4 layers, 8 heads of 32, vocab 1024, context 256."""
    return GPT(GPTConfig()).eval()


def example_inputs() -> tuple[Tensor]:
    """One sequence of 128 token ids."""
    return (torch.randint(0, GPTConfig.vocab_size, (1, 128)),)  # (B, T)
