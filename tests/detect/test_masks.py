"""Masks read by their index arithmetic: causal offset, alignment and sliding window."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mhaudit.detect.cores import find_cores
from mhaudit.detect.patterns.masks import core_mask, looks_causal, read_masks
from mhaudit.trace.export import trace


class Masked(nn.Module):
    """Eager attention over q, k, v placeholders with a mask built in forward."""

    def __init__(self, build: str, n_q: int, n_kv: int, window: int = 0) -> None:
        super().__init__()
        self.build, self.n_q, self.n_kv, self.window = build, n_q, n_kv, window

    def mask(self) -> Tensor:
        i = torch.arange(self.n_q)[:, None]  # (n_q, 1) query positions
        j = torch.arange(self.n_kv)[None, :]  # (1, n_kv) key positions
        w = self.window
        if self.build == "difference":
            return (i - j >= 0) & (i - j < w)  # keep j ≤ i and j > i − w
        if self.build == "hf":
            return (j > i - w) & (j <= i)
        if self.build == "bottom-right":
            return j <= i + (self.n_kv - self.n_q)
        if self.build == "tril":
            return torch.ones(self.n_q, self.n_kv, dtype=torch.bool).tril()
        if self.build == "tril-bottom-right":
            return torch.ones(self.n_q, self.n_kv, dtype=torch.bool).tril(self.n_kv - self.n_q)
        if self.build in ("indexed", "indexed-removed"):
            # as HF builds it without a cache: positions read through position_ids[b, idx],
            # and a packed-sequence term (same document) that is not index arithmetic
            positions = torch.arange(self.n_kv)[None, :]  # (1, n) position_ids
            b = torch.arange(1)[:, None, None, None]  # (1, 1, 1, 1) batch rows
            qi, kj = positions[b, i[None, None]], positions[b, j[None, None]]  # (1,1,n,1)/(1,1,1,n)
            document = torch.zeros(1, self.n_kv, dtype=torch.long).cumsum(-1)
            same = document[b, i[None, None]] == document[b, j[None, None]]
            kept = (kj > qi - w) & (kj <= qi) & same
            return ~kept if self.build == "indexed-removed" else kept
        if self.build == "padding":
            return j < self.n_kv - 1  # not causal: drops the last key for everyone
        raise ValueError(self.build)

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (b, h, n_q, n_kv)
        if self.build == "triu-fill":
            removed = torch.ones(self.n_q, self.n_kv, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(removed, float("-inf"))
        else:
            scores = scores.masked_fill(~self.mask(), float("-inf"))
        return scores.softmax(-1) @ v  # (b, h, n_q, d)


def _core_mask(build: str, n_q: int, n_kv: int, window: int = 0) -> tuple[bool, int | None, str]:
    q = torch.zeros(1, 2, n_q, 8)
    kv = torch.zeros(1, 2, n_kv, 8)
    traced = trace(Masked(build, n_q, n_kv, window), (q, kv, kv), {})
    (core,) = find_cores(traced.graph, traced.params)
    found_window, alignment = core_mask(core.output, core.masks, n_q, n_kv)
    return core.causal, found_window, alignment


@pytest.mark.parametrize(
    ("build", "n_q", "n_kv", "window", "expected"),
    [
        ("difference", 16, 16, 4, (True, 4, "top-left")),  # (i - j >= 0) & (i - j < 4)
        ("hf", 16, 16, 5, (True, 5, "top-left")),  # kv > q − 5 and kv ≤ q
        ("bottom-right", 4, 16, 0, (True, None, "bottom-right")),  # j ≤ i + 12
        ("tril", 16, 16, 0, (True, None, "top-left")),
        ("tril-bottom-right", 4, 16, 0, (True, None, "bottom-right")),
        ("triu-fill", 16, 16, 0, (True, None, "top-left")),  # masked_fill(triu(1)): removed
        ("padding", 16, 16, 0, (False, None, "top-left")),
        ("indexed", 16, 16, 6, (True, 6, "top-left")),  # kv > q − 6, kv ≤ q, same document
    ],
)
def test_masks_by_their_index_arithmetic(
    build: str, n_q: int, n_kv: int, window: int, expected: tuple[bool, int | None, str]
) -> None:
    assert _core_mask(build, n_q, n_kv, window) == expected


class Sdpa(nn.Module):
    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_an_unreadable_conjunct_bounds_only_what_is_kept() -> None:
    # masked_fill(~(¬kept)) keeps ¬kept, a superset of the window's complement: the part
    # that was read bounds nothing about it, so no window may be claimed
    assert _core_mask("indexed-removed", 16, 16, 6)[1] is None


def test_is_causal_is_top_left() -> None:
    q, kv = torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 16, 8)
    traced = trace(Sdpa(), (q, kv, kv), {})
    (core,) = find_cores(traced.graph, traced.params)
    assert core.causal
    assert core_mask(core.output, core.masks, 4, 16) == (None, "top-left")


def test_reading_without_masks_is_not_causal() -> None:
    reading = read_masks(())
    assert not reading.causal and reading.window is None and reading.offset is None


def test_looks_causal_on_a_plain_comparison_mask() -> None:
    traced = trace(Masked("difference", 8, 8, 3), (torch.zeros(1, 1, 8, 4),) * 3, {})
    (core,) = find_cores(traced.graph, traced.params)
    assert all(looks_causal(m, 8, 8) for m in core.masks)


class BandAttention(nn.Module):
    """Self-attention over a fused QKV whose mask keeps a band of ones (``triu``/``tril``)."""

    def __init__(self, lower: int | None, upper: int, sdpa: bool) -> None:
        super().__init__()
        self.lower, self.upper, self.sdpa = lower, upper, sdpa
        self.qkv, self.o = nn.Linear(32, 96), nn.Linear(32, 32)

    def keep(self, n: int, device: torch.device | None = None) -> Tensor:
        """(n, n) True where query i may see key j."""
        keep = torch.ones(n, n, dtype=torch.bool, device=device).tril(self.upper)
        return keep if self.lower is None else keep.triu(-self.lower)

    def forward(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, 4, 8).permute(2, 0, 3, 1, 4)  # (b, 4, n, 8)
        keep = self.keep(n, x.device)  # (n, n)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)  # (b, 4, n, 8)
        else:
            scores = (q @ k.transpose(-1, -2)).masked_fill(~keep, -math.inf)  # (b, 4, n, n)
            y = scores.softmax(-1) @ v  # (b, 4, n, 8)
        out: Tensor = self.o(y.transpose(1, 2).reshape(b, n, 32))  # (b, n, d)
        return out


@pytest.mark.parametrize("sdpa", [True, False], ids=["sdpa", "eager"])
@pytest.mark.parametrize(("lower", "upper"), [(2, 2), (3, 1), (2, 0), (None, 0), (0, 0)],
                         ids=["band-2", "band-3-1", "causal-window", "tril", "diagonal"])
def test_a_band_of_ones_is_read_by_its_values(lower: int | None, upper: int, sdpa: bool
                                              ) -> None:
    from mhaudit.detect.blocks import detect

    model, n = BandAttention(lower, upper, sdpa), 12
    keep = model.keep(n)  # the mask's own values, on CPU
    causal = not keep.triu(1).any().item()  # no query sees a key past its own position
    widest = int(keep.sum(-1).max().item())  # keys the widest-seeing query sees
    with torch.device("meta"):
        model = BandAttention(lower, upper, sdpa)
        x = torch.randn(1, n, 32)
    (layout,) = detect(trace(model, (x,), {}), model)
    assert layout.causal is causal  # a band that keeps both sides is not causal
    assert layout.window == (None if widest == n else widest)
