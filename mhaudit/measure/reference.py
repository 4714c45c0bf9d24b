"""The one reference attention block: Q, K, V and O projections around softmax(QKᵀ)·V or SDPA."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mhaudit.data import Layout


@dataclass(frozen=True)
class ReferenceBlock:
    """The tensors of a layout's block and its forward."""

    leaves: tuple[torch.Tensor, ...]
    """Inputs x and memory, then weights W_q, W_k, W_v and W_o."""
    forward: Callable[[], torch.Tensor]
    """One forward of the block, returning its (b, n_q, d_model) output."""


def reference_block(layout: Layout, make: Callable[..., torch.Tensor], *, causal: bool,
                    device: torch.device | None = None) -> ReferenceBlock:
    """The block of ``layout`` with tensors from ``make(*shape)``, no biases.

    Self-attention reads its memory as a second input of n_kv positions, so cross- and
    self-attention run the same code. K/V heads are repeated to h (GQA). The eager
    implementation (``layout.implementation == "eager"``) materialises the scaled scores
    and, when ``causal``, masks them top-left; the others call SDPA with ``is_causal``.
    ``device`` is where the eager mask is made (None: torch's default).
    """
    b, n_q, n_kv = layout.batch_size, layout.seq_len_q, layout.seq_len_kv
    d, h, h_kv = layout.d_model, layout.num_heads, layout.num_kv_heads
    d_k, d_v = layout.head_dim, layout.v_head_dim
    x, mem = make(b, n_q, d), make(b, n_kv, d)
    w_q, w_k, w_v, w_o = make(h * d_k, d), make(h_kv * d_k, d), make(h_kv * d_v, d), \
        make(d, h * d_v)
    eager = layout.implementation == "eager"

    def forward() -> torch.Tensor:
        q = F.linear(x, w_q).view(b, n_q, h, d_k).transpose(1, 2)  # (b, h, n_q, d_k)
        k = F.linear(mem, w_k).view(b, n_kv, h_kv, d_k).transpose(1, 2)  # (b, h_kv, n_kv, d_k)
        v = F.linear(mem, w_v).view(b, n_kv, h_kv, d_v).transpose(1, 2)  # (b, h_kv, n_kv, d_v)
        k, v = k.repeat_interleave(h // h_kv, 1), v.repeat_interleave(h // h_kv, 1)
        if eager:
            scores = q @ k.transpose(-2, -1) * d_k**-0.5  # (b, h, n_q, n_kv)
            if causal:
                mask = torch.ones(n_q, n_kv, dtype=torch.bool, device=device).triu(1)
                scores = scores.masked_fill(mask, float("-inf"))
            out = scores.softmax(-1) @ v  # (b, h, n_q, d_v)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        merged = out.transpose(1, 2).reshape(b, n_q, h * d_v)  # (b, n_q, h·d_v)
        result: torch.Tensor = F.linear(merged, w_o)  # (b, n_q, d)
        return result

    return ReferenceBlock((x, mem, w_q, w_k, w_v, w_o), forward)
