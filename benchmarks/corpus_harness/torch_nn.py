"""torch.nn's own attention: MultiheadAttention options and the Transformer layers."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from corpus_harness.entry import Built, Entry, lin, mha

D, H, B, N, M = 32, 4, 2, 6, 5
"""Width, heads, batch, query tokens, memory tokens."""


class SelfAttend(nn.Module):
    """Calls a MultiheadAttention with one input as query, key and value."""

    def __init__(self, attn: nn.MultiheadAttention) -> None:
        super().__init__()
        self.attn = attn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, need_weights=False)[0]


class CrossAttend(nn.Module):
    """Calls a MultiheadAttention with separate key and value inputs."""

    def __init__(self, attn: nn.MultiheadAttention) -> None:
        super().__init__()
        self.attn = attn

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.attn(x, k, v, need_weights=False)[0]


class CausalDecoder(nn.Module):
    """A decoder layer called with the square subsequent mask and ``tgt_is_causal``."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(D, H, 64, dropout=0.0, batch_first=True)

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device)
        return self.layer(tgt, memory, tgt_mask=mask, tgt_is_causal=True)


def _self(batch_first: bool = True, **kwargs: Any) -> Built:
    shape = (B, N, D) if batch_first else (N, B, D)
    return SelfAttend(nn.MultiheadAttention(D, H, batch_first=batch_first, **kwargs)), (
        torch.randn(*shape),), {}


def _kdim_vdim() -> Built:
    attn = nn.MultiheadAttention(D, H, kdim=24, vdim=20, batch_first=True)
    return CrossAttend(attn), (torch.randn(B, N, D), torch.randn(B, M, 24),
                               torch.randn(B, M, 20)), {}


def _layer(cls: type[nn.Module], *inputs: tuple[int, ...], **kwargs: Any) -> Built:
    return cls(D, H, 64, dropout=0.0, **kwargs), tuple(torch.randn(*s) for s in inputs), {}


class PaddedEncoder(nn.Module):
    """Two encoder layers called with a key padding mask (nested tensors in eval)."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(D, H, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad = torch.zeros(x.shape[:2], dtype=torch.bool, device=x.device)
        return self.encoder(x, src_key_padding_mask=pad)


def _transformer() -> Built:
    model = nn.Transformer(D, H, num_encoder_layers=1, num_decoder_layers=1,
                           dim_feedforward=64, dropout=0.0)
    return model, (torch.randn(M, B, D), torch.randn(N, B, D)), {}


# nn.MultiheadAttention: fused in_proj (3·D·D + 3·D) and out_proj (D·D + D): 4·1,056 = 4,224.
FULL = 4 * lin(D, D)
BARE = 4 * lin(D, D, bias=False)  # bias=False: 4·1,024 = 4,096

ENTRIES = [
    Entry("nn_mha_batch_first", "torch", lambda: _self(True), (mha(D, H, FULL),)),
    Entry("nn_mha_seq_first", "torch", lambda: _self(False), (mha(D, H, FULL),)),
    Entry("nn_mha_no_bias", "torch", lambda: _self(True, bias=False), (mha(D, H, BARE),)),
    # bias_k and bias_v are one learned key/value token each: the projections are unchanged.
    Entry("nn_mha_add_bias_kv", "torch", lambda: _self(True, add_bias_kv=True),
          (mha(D, H, FULL),)),
    Entry("nn_mha_add_zero_attn", "torch", lambda: _self(True, add_zero_attn=True),
          (mha(D, H, FULL),)),
    # Separate q/k/v weights: q 32·32 + 32, k 24·32 + 32, v 20·32 + 32, o 32·32 + 32 = 3,712.
    Entry("nn_mha_kdim_vdim", "torch", _kdim_vdim,
          (mha(D, H, lin(D, D) + lin(24, D) + lin(20, D) + lin(D, D), kind="cross"),)),
    Entry("nn_encoder_layer_norm_first", "torch",
          lambda: _layer(nn.TransformerEncoderLayer, (B, N, D), batch_first=True,
                         norm_first=True), (mha(D, H, FULL),)),
    Entry("nn_encoder_layer_no_bias_gelu", "torch",
          lambda: _layer(nn.TransformerEncoderLayer, (B, N, D), batch_first=True,
                         bias=False, activation="gelu"), (mha(D, H, BARE),)),
    Entry("nn_decoder_layer_seq_first", "torch",
          lambda: _layer(nn.TransformerDecoderLayer, (N, B, D), (M, B, D)),
          (mha(D, H, FULL), mha(D, H, FULL, kind="cross"))),
    Entry("nn_decoder_layer_causal", "torch",
          lambda: (CausalDecoder(), (torch.randn(B, N, D), torch.randn(B, M, D)), {}),
          (mha(D, H, FULL), mha(D, H, FULL, kind="cross"))),
    Entry("nn_encoder_padding_mask", "torch",
          lambda: (PaddedEncoder(), (torch.randn(B, N, D),), {}),
          (mha(D, H, FULL), mha(D, H, FULL))),
    Entry("nn_transformer", "torch", _transformer,
          (mha(D, H, FULL), mha(D, H, FULL), mha(D, H, FULL, kind="cross"))),
]
