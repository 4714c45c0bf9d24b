"""A small encoder-decoder translation model with self-, causal self- and cross-attention."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class Seq2SeqConfig:
    vocab_size: int = 1000
    d_model: int = 128
    n_heads: int = 4
    n_encoder_layers: int = 2
    n_decoder_layers: int = 2
    d_ff: int = 512
    max_len: int = 256


def sinusoidal_positions(max_len: int, d_model: int) -> Tensor:
    """The fixed sine/cosine position table of shape (max_len, d_model)."""
    pos = torch.arange(max_len).float().unsqueeze(1)  # (T_max, 1)
    div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    angles = pos * div  # (T_max, d/2)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)  # (T_max, d)


class MultiHeadAttention(nn.Module):
    """Attention with separate q/k/v/o projections; cross-attention when given a memory."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)

    def _heads(self, x: Tensor) -> Tensor:
        B, n, _ = x.shape  # (B, n, d)
        return x.view(B, n, self.n_heads, self.head_dim).transpose(1, 2)  # (B, h, n, d_k)

    def forward(self, x: Tensor, memory: Tensor | None = None, causal: bool = False) -> Tensor:
        kv = x if memory is None else memory  # (B, n_kv, d)
        q = self._heads(self.q_proj(x))  # (B, h, n_q, d_k)
        k = self._heads(self.k_proj(kv))  # (B, h, n_kv, d_k)
        v = self._heads(self.v_proj(kv))  # (B, h, n_kv, d_k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # (B, h, n_q, d_k)
        y = y.transpose(1, 2).flatten(2)  # (B, n_q, d)
        return self.o_proj(y)


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.relu(self.fc1(x)))  # (B, n, d)


class EncoderLayer(nn.Module):
    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        self.self_attn_norm = nn.LayerNorm(config.d_model)
        self.self_attn = MultiHeadAttention(config.d_model, config.n_heads)
        self.ff_norm = nn.LayerNorm(config.d_model)
        self.ff = FeedForward(config.d_model, config.d_ff)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.self_attn(self.self_attn_norm(x))
        return x + self.ff(self.ff_norm(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        self.self_attn_norm = nn.LayerNorm(config.d_model)
        self.self_attn = MultiHeadAttention(config.d_model, config.n_heads)
        self.cross_attn_norm = nn.LayerNorm(config.d_model)
        self.cross_attn = MultiHeadAttention(config.d_model, config.n_heads)
        self.ff_norm = nn.LayerNorm(config.d_model)
        self.ff = FeedForward(config.d_model, config.d_ff)

    def forward(self, x: Tensor, memory: Tensor) -> Tensor:
        x = x + self.self_attn(self.self_attn_norm(x), causal=True)
        x = x + self.cross_attn(self.cross_attn_norm(x), memory=memory)
        return x + self.ff(self.ff_norm(x))


class Seq2Seq(nn.Module):
    """Pre-LN encoder-decoder with a shared embedding tied to the output projection."""

    pos: Tensor

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        self.d_model = config.d_model
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.register_buffer(
            "pos", sinusoidal_positions(config.max_len, config.d_model), persistent=False
        )
        self.encoder = nn.ModuleList([EncoderLayer(config) for _ in range(config.n_encoder_layers)])
        self.encoder_norm = nn.LayerNorm(config.d_model)
        self.decoder = nn.ModuleList([DecoderLayer(config) for _ in range(config.n_decoder_layers)])
        self.decoder_norm = nn.LayerNorm(config.d_model)
        self.generator = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.generator.weight = self.embed.weight  # weight tying

    def _embed(self, ids: Tensor) -> Tensor:
        n = ids.shape[1]  # ids: (B, n)
        return self.embed(ids) * math.sqrt(self.d_model) + self.pos[:n]  # (B, n, d)

    def forward(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        memory = self._embed(src_ids)  # (B, n_src, d)
        for enc in self.encoder:
            memory = enc(memory)
        memory = self.encoder_norm(memory)

        x = self._embed(tgt_ids)  # (B, n_tgt, d)
        for dec in self.decoder:
            x = dec(x, memory)
        return self.generator(self.decoder_norm(x))  # (B, n_tgt, vocab)


def build_model() -> nn.Module:
    """d=128, 4 heads of 32, 2 encoder and 2 decoder layers, shared vocab 1000."""
    return Seq2Seq(Seq2SeqConfig()).eval()


def example_inputs() -> tuple[Tensor, Tensor]:
    """Two source sentences of 48 tokens and their 32-token target prefixes."""
    vocab = Seq2SeqConfig.vocab_size
    src_ids = torch.randint(0, vocab, (2, 48))  # (B, n_src)
    tgt_ids = torch.randint(0, vocab, (2, 32))  # (B, n_tgt)
    return (src_ids, tgt_ids)
