"""torch's flex_attention read as an attention core and costed by the tiles its block mask
visits; oracles: the constructor's arguments, hand counts of visited 128×128 tiles, and
torch's own dense SDPA formula (the one FlopCounterMode registers for flex_attention)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.utils.flop_counter import sdpa_flop_count

from mhaudit.api import audit
from mhaudit.data import Report

N, D = 512, 64


def causal(b: object, h: object, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    return q >= kv


def window(b: object, h: object, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    return (q >= kv) & (q - kv < 128)


def bias(score: torch.Tensor, b: object, h: torch.Tensor, q: torch.Tensor,
         kv: torch.Tensor) -> torch.Tensor:
    return score + (q - kv) * 0.5  # sub, mul, add: 3 pointwise ops per score


class Flex(nn.Module):
    def __init__(self, heads: int, kv_heads: int, mask_mod: Callable[..., torch.Tensor] | None,
                 score_mod: Callable[..., torch.Tensor] | None = None) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.d_k = heads, kv_heads, D // heads
        self.q = nn.Linear(D, D)
        self.kv = nn.Linear(D, 2 * kv_heads * self.d_k)
        self.o = nn.Linear(D, D)
        self.mask_mod, self.score_mod = mask_mod, score_mod

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q(x).view(b, n, self.heads, self.d_k).transpose(1, 2)  # (b, h, n, d_k)
        k, v = self.kv(x).view(b, n, 2, self.kv_heads, self.d_k).permute(2, 0, 3, 1, 4)
        mask = None if self.mask_mod is None else create_block_mask(
            self.mask_mod, None, None, n, n, device=x.device)
        y = flex_attention(q, k, v, score_mod=self.score_mod, block_mask=mask,
                           enable_gqa=self.kv_heads != self.heads)
        return self.o(y.transpose(1, 2).reshape(b, n, D))  # type: ignore[union-attr]


def _audit(model: Flex) -> Report:
    with torch.device("meta"):
        model = model.eval()
        x = torch.randn(1, N, D)
    return audit(model, (x,))


def _dense_products(heads: int, kv_heads: int) -> int:
    d_k = D // heads
    return sdpa_flop_count((1, heads, N, d_k), (1, heads, N, d_k), (1, heads, N, d_k))


def test_a_causal_block_mask_is_read_and_costed_by_its_visited_tiles() -> None:
    report = _audit(Flex(8, 2, causal))
    (block,) = report.blocks
    lay = block.layout
    assert (lay.score_form, lay.implementation, lay.kind) == ("flex", "flex", "self")
    assert (lay.num_heads, lay.num_kv_heads, lay.head_dim, lay.sdpa_gqa) == (8, 2, 8, True)
    assert lay.causal is True
    # 512 tokens: 4 query tiles of 128; row i visits i + 1 key tiles: 1+2+3+4 = 10 of 16
    assert block.flops.visited_fraction == 10 / 16
    assert block.layout.block_mask_read == "evaluated"  # fake tensors hold no counts
    assert block.target is not None and block.target.kernel == "flex"  # not an SDPA backend
    products = _dense_products(8, 2)
    assert block.flops.scores + block.flops.context == products * 10 // 16
    assert block.flops.dense_core is not None
    assert block.flops.dense_core - products == 3 * 8 * N * N  # the softmax over every tile
    assert "flex_attention" in report.to_dict()["conventions"]
    assert report.coverage.ops_without_formula.get("higher_order.flex_attention") is None


def test_a_sliding_window_mask_visits_the_band_and_bounds_the_window() -> None:
    (block,) = _audit(Flex(4, 4, window)).blocks
    # window 128: query tile i visits tiles i − 1 and i: 1 + 2 + 2 + 2 = 7 of 16
    assert block.flops.visited_fraction == 7 / 16
    assert (block.layout.causal, block.layout.window) == (True, 128)


def test_a_score_mod_without_a_mask_is_dense_and_counts_its_ops() -> None:
    (block,) = _audit(Flex(4, 4, None, bias)).blocks
    assert block.flops.visited_fraction == 1.0
    assert block.layout.score_map_ops == 3
    # softmax 3·4·512² plus score_mod's 3 ops on each of the 4·512² scores
    assert block.flops.softmax == 6 * 4 * N * N
    assert block.layout.causal is False


def test_a_causal_mask_at_4096_tokens_costs_about_half_beside_flopcountermode() -> None:
    with torch.device("meta"):
        model, x = Flex(4, 4, causal).eval(), torch.randn(1, 4096, D)
    report = audit(model, (x,), verify=True)
    (block,) = report.blocks
    # 32 tiles a side; row i visits i + 1: 32·33/2 = 528 of 1,024
    assert block.flops.visited_fraction == 528 / 1024
    core = block.flops.scores + block.flops.softmax + block.flops.context
    assert block.flops.dense_core is not None
    assert 0.5 < core / block.flops.dense_core < 0.52
    assert report.verification is not None
    (flops_row, *_) = report.verification.rows
    # FlopCounterMode's dense flex count, the skipped tiles added back to ours
    assert flops_row.counter == "FlopCounterMode" and flops_row.agrees
    assert "flex_attention over every score tile" in flops_row.how


class LearnedBias(Flex):
    """A score_mod that reads a learned per-head slope (a parameter used only there)."""

    def __init__(self) -> None:
        super().__init__(4, 4, None, self.alibi)
        self.slopes = nn.Parameter(torch.ones(4))

    def alibi(self, score: torch.Tensor, b: object, h: torch.Tensor, q: torch.Tensor,
              kv: torch.Tensor) -> torch.Tensor:
        return score - self.slopes[h] * (q - kv).abs()  # index, sub, abs, mul, sub


def test_a_parameter_only_score_mod_reads_counts_as_used() -> None:
    report = _audit(LearnedBias())
    (block,) = report.blocks
    assert report.coverage.untraced_modules == ()
    assert block.layout.score_map_ops == 4  # sub, abs, mul, sub (the index is no arithmetic)
    assert block.layout.block_mask_read == "no block mask"
