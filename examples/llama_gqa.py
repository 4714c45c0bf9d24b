"""A small Llama-style decoder: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 1024
    dim: int = 256
    n_layers: int = 2
    n_heads: int = 8
    n_kv_heads: int = 2
    ffn_hidden: int = 768  # 8/3 * dim rounded up to a multiple of 256
    max_seq_len: int = 512
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)  # (B, T, 1)
        return x * rms * self.weight


def rope_tables(head_dim: int, max_seq_len: int, theta: float) -> tuple[Tensor, Tensor]:
    """cos and sin tables of shape (max_seq_len, head_dim), halves repeated."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)  # (d_k/2,)
    t = torch.arange(max_seq_len).float()  # (T_max,)
    freqs = torch.outer(t, inv_freq)  # (T_max, d_k/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T_max, d_k)
    return emb.cos(), emb.sin()


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)  # 2 x (..., d_k/2)
    return torch.cat((-x2, x1), dim=-1)  # (..., d_k)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    return x * cos + rotate_half(x) * sin  # (B, h, T, d_k)


class Attention(nn.Module):
    """Grouped-query attention: h query heads share h_kv key/value heads."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.n_kv_heads = config.n_kv_heads
        self.n_rep = config.n_heads // config.n_kv_heads
        self.head_dim = config.head_dim
        self.q_proj = nn.Linear(config.dim, config.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.dim, config.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.dim, config.n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(config.n_heads * self.head_dim, config.dim, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        B, T, _ = x.shape  # (B, T, d)
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        # q: (B, h, T, d_k); k, v: (B, h_kv, T, d_k)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        k = k.repeat_interleave(self.n_rep, dim=1)  # (B, h, T, d_k)
        v = v.repeat_interleave(self.n_rep, dim=1)  # (B, h, T, d_k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, h, T, d_k)
        y = y.transpose(1, 2).contiguous().view(B, T, -1)  # (B, T, h * d_k)
        return self.o_proj(y)


class FeedForward(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.dim, config.ffn_hidden, bias=False)
        self.up_proj = nn.Linear(config.dim, config.ffn_hidden, bias=False)
        self.down_proj = nn.Linear(config.ffn_hidden, config.dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))  # (B, T, d)


class DecoderLayer(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.dim, config.norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.dim, config.norm_eps)
        self.mlp = FeedForward(config)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    rope_cos: Tensor
    rope_sin: Tensor

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList([DecoderLayer(config) for _ in range(config.n_layers)])
        self.norm = RMSNorm(config.dim, config.norm_eps)
        self.lm_head = nn.Linear(config.dim, config.vocab_size, bias=False)
        cos, sin = rope_tables(config.head_dim, config.max_seq_len, config.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)  # (T_max, d_k)
        self.register_buffer("rope_sin", sin, persistent=False)  # (T_max, d_k)

    def forward(self, idx: Tensor) -> Tensor:
        _, t = idx.shape  # (B, T)
        cos = self.rope_cos[:t]  # (T, d_k), broadcast over (B, h)
        sin = self.rope_sin[:t]  # (T, d_k)
        x = self.embed_tokens(idx)  # (B, T, d)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))  # (B, T, vocab)


def build_model() -> nn.Module:
    """d=256, 2 layers, 8 query heads and 2 KV heads of 32, vocab 1024."""
    return Llama(LlamaConfig()).eval()


def example_inputs() -> tuple[Tensor]:
    """One sequence of 128 token ids."""
    return (torch.randint(0, LlamaConfig.vocab_size, (1, 128)),)  # (B, T)
