"""Attention cores written in less common ways are read by what they compute: a softmax
over the queries (slot attention), in whichever order the scores are written."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from mhaudit.api import audit
from mhaudit.cost.block import block_flops
from mhaudit.data import AttentionBlock, Report

B, N, D, SLOTS = 2, 16, 32, 4


class SlotAttention(nn.Module):
    """One round of slot attention: softmax over the slots, each slot's weights
    renormalised over the inputs, then a weighted mean of V. ``order`` writes the scores
    as Q·Kᵀ with matmul, as an einsum whose context puts V first, or as K·Qᵀ (inputs ×
    slots, softmax over the last axis) whose transpose meets V."""

    def __init__(self, heads: int, order: str) -> None:
        super().__init__()
        self.h, self.dh, self.order = heads, D // heads, order
        self.slots = nn.Parameter(torch.randn(1, SLOTS, D))
        self.to_q, self.to_k, self.to_v = (nn.Linear(D, D, bias=False) for _ in range(3))
        self.out = nn.Linear(D, D, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        k = self.to_k(x).view(b, n, self.h, self.dh).transpose(1, 2)  # (B, h, n, dh)
        v = self.to_v(x).view(b, n, self.h, self.dh).transpose(1, 2)
        q = self.to_q(self.slots.expand(b, -1, -1)).view(b, -1, self.h, self.dh)
        q = q.transpose(1, 2)  # (B, h, slots, dh)
        if self.order == "kq":
            attn = torch.softmax(k @ q.transpose(-1, -2), dim=-1) + 1e-8  # (B, h, n, slots)
            attn = (attn / attn.sum(-2, keepdim=True)).transpose(-1, -2)
            ctx = attn @ v
        elif self.order == "einsum":
            attn = torch.einsum("bhid,bhjd->bhij", q, k).softmax(dim=2) + 1e-8
            attn = attn / attn.sum(-1, keepdim=True)
            ctx = torch.einsum("bhjd,bhij->bhid", v, attn)
        else:
            attn = torch.softmax(q @ k.transpose(-1, -2), dim=-2) + 1e-8  # (B, h, slots, n)
            ctx = (attn / attn.sum(-1, keepdim=True)) @ v
        return self.out(ctx.transpose(1, 2).reshape(b, -1, d))


def _audit(model: nn.Module) -> Report:
    with torch.device("meta"):
        x = torch.randn(B, N, D)
    return audit(model.to("meta").eval(), (x,))


def _row(block: AttentionBlock) -> tuple[object, ...]:
    lay = block.layout
    return (lay.score_form, lay.kind, lay.num_heads, lay.num_kv_heads, lay.head_dim,
            lay.seq_len_q, lay.seq_len_kv)


@pytest.mark.parametrize("order", ["qk", "einsum", "kq"])
@pytest.mark.parametrize("heads", [1, 4])
def test_a_softmax_over_the_queries_is_a_query_softmax_block(heads: int, order: str) -> None:
    report = _audit(SlotAttention(heads, order))
    (block,) = report.blocks
    # the slots are the queries (4), the inputs the keys (16); heads of 32 / heads.
    assert _row(block) == ("query_softmax", "cross", heads, heads, D // heads, SLOTS, N)
    flops = block.flops
    # Q from the 4 slots: 2·2·4·32·32 = 16,384; K and V from the 16 inputs: 65,536 each.
    assert (flops.q_proj, flops.k_proj, flops.v_proj) == (16384, 65536, 65536)
    # QKᵀ 2·B·h·4·16·(32/h) = 8,192 and PV the same, whatever h; softmax 3 and the
    # renormalisation 2 FLOPs per score over B·h·4·16 = 128·h scores: 640·h.
    assert (flops.scores, flops.softmax, flops.context) == (8192, 640 * heads, 8192)
    assert report.coverage.unread_cores == ()


class UnfoldedLocalAttention(nn.Module):
    """Local attention over a window of W keys unfolded beside each query: the scores are
    a multiply and a sum over the head dim, the context a multiply and a sum over the
    window; no matmul anywhere."""

    def __init__(self, heads: int = 4, window: int = 5) -> None:
        super().__init__()
        self.h, self.dh, self.w = heads, D // heads, window
        self.qkv = nn.Linear(D, 3 * D, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        pad = (0, 0, self.w // 2, self.w // 2)
        k = torch.nn.functional.pad(k, pad).unfold(2, self.w, 1)  # (B, h, n, dh, W)
        v = torch.nn.functional.pad(v, pad).unfold(2, self.w, 1)
        p = ((q.unsqueeze(-1) * k).sum(-2) * self.dh ** -0.5).softmax(-1)  # (B, h, n, W)
        return (p.unsqueeze(-2) * v).sum(-1).transpose(1, 2).reshape(b, n, d)


class UnfoldedWindowsFirst(nn.Module):
    """The same local attention with the window axis before the head dim:
    ``(q.unsqueeze(-2) * k_windows).sum(-1)`` and ``(p.unsqueeze(-1) * v_windows).sum(-2)``."""

    def __init__(self, heads: int = 2, window: int = 3) -> None:
        super().__init__()
        self.h, self.dh, self.w = heads, D // heads, window
        self.q, self.k, self.v = (nn.Linear(D, D, bias=False) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (p(x).view(b, n, self.h, self.dh).transpose(1, 2)
                   for p in (self.q, self.k, self.v))
        k = torch.nn.functional.pad(k, (0, 0, self.w - 1, 0)).unfold(2, self.w, 1)
        v = torch.nn.functional.pad(v, (0, 0, self.w - 1, 0)).unfold(2, self.w, 1)
        k, v = k.transpose(-1, -2), v.transpose(-1, -2)  # (B, h, n, W, dh)
        p = (q.unsqueeze(-2) * k).sum(-1).softmax(-1)  # (B, h, n, W)
        return (p.unsqueeze(-1) * v).sum(-2).transpose(1, 2).reshape(b, n, d)


@pytest.mark.parametrize(("build", "heads", "window"),
                         [(UnfoldedLocalAttention, 4, 5), (UnfoldedWindowsFirst, 2, 3)])
def test_a_softmax_over_a_multiply_and_sum_is_an_unfolded_block(
        build: type[nn.Module], heads: int, window: int) -> None:
    report = _audit(build())
    (block,) = report.blocks
    lay = block.layout
    # h heads of 32 / h over the 16 tokens; each query scores the W keys of its window.
    assert _row(block) == ("unfolded", "self", heads, heads, D // heads, N, N)
    assert lay.window == window
    # QKᵀ 2·B·h·n·W·d: 2·2·4·16·5·8 = 10,240 (h = 4, W = 5) or 2·2·2·16·3·16 = 6,144
    # (h = 2, W = 3), PV the same; softmax 3·B·h·n·W: 1,920 or 576.
    d = D // heads
    assert (block.flops.scores, block.flops.softmax, block.flops.context) == (
        {(4, 5): (10240, 1920, 10240), (2, 3): (6144, 576, 6144)}[(heads, window)])
    assert (block.flops.scores, block.flops.context) == (2 * B * heads * N * window * d,) * 2
    # projections over the 16 tokens, not the 16·W window entries: 2·(B·n)·32·32 per role.
    assert (block.flops.q_proj, block.flops.k_proj, block.flops.v_proj) == (65536,) * 3
    assert report.coverage.unread_cores == ()


class TiedRowAttention(nn.Module):
    """Row attention tied over the R rows of an alignment: each head's scores sum over the
    rows and the head dim (``brihc,brjhc->bhij``), and the one map weighs every row's V."""

    def __init__(self, heads: int = 4, width: int = 64) -> None:
        super().__init__()
        self.h, self.dh = heads, width // heads
        self.q, self.k, self.v = (nn.Linear(width, width, bias=False) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, r, n, d = x.shape  # (B, R, n, d)
        q, k, v = (p(x).view(b, r, n, self.h, self.dh) for p in (self.q, self.k, self.v))
        p = torch.einsum("brihc,brjhc->bhij", q, k).softmax(-1)  # (B, h, n, n)
        self.probs = p.detach()  # the score map a real forward holds, for the oracle
        return torch.einsum("bhij,brjhc->brihc", p, v).reshape(b, r, n, d)


def test_an_einsum_that_also_sums_over_rows_keeps_its_head_axis() -> None:
    with torch.device("meta"):
        x = torch.randn(2, 3, 8, 64)  # B = 2, R = 3 rows of n = 8, width 64
    (block,) = audit(TiedRowAttention().to("meta").eval(), (x,)).blocks
    lay = block.layout
    # 4 heads of 64 / 4 = 16 (not one head of R·16 = 48).
    assert (lay.num_heads, lay.num_kv_heads, lay.head_dim, lay.v_head_dim) == (4, 4, 16, 16)
    # scores sum over r and c: 2·B·h·n·n·R·c = 2·2·4·8·8·3·16 = 49,152; the context
    # weighs each row's V: 2·B·R·h·n·n·c = 49,152.
    assert (block.flops.scores, block.flops.context) == (49152, 49152)


def test_rows_tied_into_one_map_share_its_softmax_and_its_scores() -> None:
    model = TiedRowAttention()
    x = torch.randn(2, 3, 8, 64)  # B = 2, R = 3 rows of n = 8, width 64
    with torch.no_grad():
        model(x)  # real fp32 CPU forward: the score map it holds
    p = model.probs
    assert p.shape == (2, 4, 8, 8)  # (B, h, n, n): one map for the R rows
    with torch.device("meta"):
        meta_x = torch.randn(2, 3, 8, 64)
    report = audit(model.to("meta").eval(), (meta_x,), dtype="float32")
    (block,) = report.blocks
    assert block.layout.tied_rows == 3
    # softmax: 3 FLOPs per score of the real map, 3·2·4·8·8 = 1,536 (not R× that).
    assert block.flops.softmax == 3 * p.numel() == 1536
    # the scores the block writes are the real map's bytes: 512 fp32 elements, 2,048 B.
    assert block.memory.scores_bytes_if_materialized == p.numel() * p.element_size() == 2048
    assert report.to_dict()["blocks"][0]["tied_rows"] == 3


class ReAttention(nn.Module):
    """Each head's probabilities mixed across heads by a learned h×h matrix, then a
    LayerNorm over the heads, before V."""

    def __init__(self, heads: int = 4) -> None:
        super().__init__()
        self.h, self.dh = heads, D // heads
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.theta = nn.Parameter(torch.randn(heads, heads))
        self.norm = nn.LayerNorm(heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-1, -2)).softmax(-1)  # (B, h, n, n)
        a = torch.einsum("bhij,hg->bgij", a, self.theta)
        a = self.norm(a.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return (a @ v).transpose(1, 2).reshape(b, n, d)


class ConvolvedScores(nn.Module):
    """A depthwise 3×3 convolution over each head's (i, j) scores before the softmax and a
    1×1 convolution over the heads after it."""

    def __init__(self, heads: int = 4) -> None:
        super().__init__()
        self.h, self.dh = heads, D // heads
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.over_scores = nn.Conv2d(heads, heads, 3, padding=1, groups=heads, bias=False)
        self.over_heads = nn.Conv2d(heads, heads, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        p = self.over_heads(self.over_scores(q @ k.transpose(-1, -2)).softmax(-1))
        return (p @ v).transpose(1, 2).reshape(b, n, d)


@pytest.mark.parametrize("build", [ReAttention, ConvolvedScores])
def test_a_score_map_transformed_between_qk_and_v_is_a_head_mixing_block(
        build: type[nn.Module]) -> None:
    report = _audit(build())
    (block,) = report.blocks
    # 4 heads of 32 / 4 = 8 over the 16 tokens.
    assert _row(block) == ("softmax", "self", 4, 4, 8, N, N)
    assert block.layout.head_mixing
    assert report.coverage.unread_cores == ()


def _counted(model: nn.Module) -> dict[str, int]:
    """FlopCounterMode's FLOPs per op over a real CPU forward of ``model``."""
    counter = FlopCounterMode(display=False)
    with counter:
        model(torch.randn(B, N, D))
    return {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}


@pytest.mark.parametrize("build", [ReAttention, ConvolvedScores])
def test_the_learned_score_maps_count_in_the_block_params_and_flops(
        build: type[nn.Module]) -> None:
    torch.manual_seed(0)
    model = build()
    counted = _counted(model)
    (block,) = _audit(model).blocks
    own = sum(p.numel() for p in model.parameters())
    maps = own - model.qkv.weight.numel()  # type: ignore[union-attr]
    # re-attention: θ 4·4 + LayerNorm(4) weight and bias 4 + 4 = 24; the convolutions:
    # 4·1·3·3 (depthwise) + 4·4·1·1 = 52.
    assert maps == {ReAttention: 24, ConvolvedScores: 52}[build]
    assert (block.params.score_map, block.params.total) == (maps, own)
    assert sum(d.params for d in block.params.deviations) == block.params.delta
    flops = block.flops
    # the counter counts products only: the qkv linear, QKᵀ, ·V, θ's einsum (a bmm) and
    # the convolutions; not the softmax nor the LayerNorm's elementwise work, which is
    # 2·4·16·16 = 2,048 elements × (5 + weight + bias) = 14,336 FLOPs.
    norm = 2048 * 7 if build is ReAttention else 0
    products = flops.total - flops.softmax - norm
    assert products == sum(counted.values())
    # θ: 2·b·h·h·n·n = 2·2·4·4·16·16 = 16,384; the convolutions: 2·b·c_out·(c_in/g)·k·k·n·n
    # = 2·2·4·1·9·256 = 36,864 and 2·2·4·4·1·256 = 16,384, together 53,248.
    assert flops.score_map == {ReAttention: 16384 + norm, ConvolvedScores: 53248}[build]
    if build is ConvolvedScores:
        assert flops.score_map == counted["aten.convolution"]


def test_the_score_map_flops_follow_the_sequence_length() -> None:
    (block,) = _audit(ReAttention()).blocks
    longer = replace(block.layout, seq_len_q=2 * N, seq_len_kv=2 * N)
    # 4× the scores, 4× the maps' work: 4·30,720 = 122,880.
    assert block_flops(longer).score_map == 4 * block.flops.score_map == 122880


class ChunkedAttention(nn.Module):
    """Attention over key chunks written by hand (memory-efficient attention, the loop
    unrolled by tracing): per chunk s = Q·K_cᵀ·scale, exp(s − m) against a normaliser
    shared by the chunks, exp(s − m)·V_c summed over the chunks. ``normaliser`` is a max
    over every chunk's scores then a division by the summed exponentials (``max``), a
    logsumexp of the chunks' logsumexps (``lse``), or a running max that rescales the
    accumulator and the denominator at each chunk (``online``). Each chunk's scores read
    Q itself (``same``) or their own copy of it made in the loop (``clone``,
    ``contiguous``, ``whole`` slice ``q[:, :, :]``, ``scale``d); with ``q_chunks`` the
    queries are split into chunks too, each against every key chunk, and the contexts
    joined along the queries."""

    def __init__(self, chunks: tuple[int, ...], normaliser: str, heads: int = 4,
                 q_form: str = "same", q_chunks: tuple[int, ...] | None = None) -> None:
        super().__init__()
        self.h, self.dh, self.chunks, self.normaliser = heads, D // heads, chunks, normaliser
        self.q_form, self.q_chunks = q_form, q_chunks
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.out = nn.Linear(D, D, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        ks, vs = k.split(self.chunks, dim=2), v.split(self.chunks, dim=2)
        rows = q.split(self.q_chunks, dim=2) if self.q_chunks else (q,)  # (B, h, n_c, dh)
        ctx = torch.cat([self._attend(qc, ks, vs) for qc in rows], dim=2)  # (B, h, n, dh)
        return self.out(ctx.transpose(1, 2).reshape(b, n, d))

    def _scores(self, q: torch.Tensor, kc: torch.Tensor) -> torch.Tensor:
        scale = self.dh ** -0.5
        copy = {"same": lambda: q, "clone": q.clone, "contiguous": q.contiguous,
                "whole": lambda: q[:, :, :], "scale": lambda: q * scale}[self.q_form]()
        s = copy @ kc.transpose(-1, -2)  # (B, h, n_c, c)
        return s if self.q_form == "scale" else s * scale

    def _attend(self, q: torch.Tensor, ks: tuple[torch.Tensor, ...],
                vs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        ss = [self._scores(q, kc) for kc in ks]
        if self.normaliser == "lse":
            m = torch.logsumexp(torch.stack([s.logsumexp(-1, keepdim=True) for s in ss]), 0)
            ctx = sum(torch.exp(s - m) @ vc for s, vc in zip(ss, vs, strict=True))
        elif self.normaliser == "max":
            m = torch.stack([s.amax(-1, keepdim=True) for s in ss]).amax(0)
            es = [torch.exp(s - m) for s in ss]
            ctx = sum(e @ vc for e, vc in zip(es, vs, strict=True)) / sum(
                e.sum(-1, keepdim=True) for e in es)
        else:
            m = ss[0].amax(-1, keepdim=True)
            e = torch.exp(ss[0] - m)
            acc, den = e @ vs[0], e.sum(-1, keepdim=True)
            for s, vc in zip(ss[1:], vs[1:], strict=True):
                m_new = torch.maximum(m, s.amax(-1, keepdim=True))
                e, old = torch.exp(s - m_new), torch.exp(m - m_new)
                acc, den, m = acc * old + e @ vc, den * old + e.sum(-1, keepdim=True), m_new
            ctx = acc / den
        assert isinstance(ctx, torch.Tensor)
        return ctx


@pytest.mark.parametrize("normaliser", ["max", "lse", "online"])
@pytest.mark.parametrize("chunks", [(8, 8), (4, 12), (5, 5, 6), (2, 2, 2, 2, 2, 2, 2, 2)])
def test_attention_written_chunk_by_chunk_is_one_softmax_block(
        chunks: tuple[int, ...], normaliser: str) -> None:
    _assert_one_chunked_block(ChunkedAttention(chunks, normaliser))


@pytest.mark.parametrize("normaliser", ["max", "lse", "online"])
@pytest.mark.parametrize("q_chunks", [None, (8, 8), (4, 4, 8)])
@pytest.mark.parametrize("q_form", ["clone", "contiguous", "whole", "scale"])
def test_chunks_that_each_copy_or_slice_q_are_one_softmax_block(
        q_form: str, q_chunks: tuple[int, ...] | None, normaliser: str) -> None:
    _assert_one_chunked_block(ChunkedAttention((4, 12), normaliser, q_form=q_form,
                                               q_chunks=q_chunks))


def test_query_chunks_over_one_q_are_one_softmax_block() -> None:
    _assert_one_chunked_block(ChunkedAttention((5, 5, 6), "online", q_chunks=(3, 13)))


def _assert_one_chunked_block(model: nn.Module) -> None:
    report = _audit(model)
    (block,) = report.blocks
    # one block over all N = 16 queries and keys, whatever the chunks: 4 heads of 32 / 4 = 8.
    assert _row(block) == ("softmax", "self", 4, 4, 8, N, N)
    assert block.layout.core_count == 1
    flops = block.flops
    # QKᵀ over all keys 2·B·h·n·n_kv·d = 2·2·4·16·16·8 = 32,768, PV the same; the
    # exp/normalise 3 FLOPs per score over B·h·n·n_kv = 2,048 scores: 6,144.
    assert (flops.scores, flops.softmax, flops.context) == (32768, 6144, 32768)
    assert report.coverage.unread_cores == ()
    # torch counts the matmuls of a real forward: per query chunk q_c and key chunk c,
    # 2·B·h·q_c·c·d twice, summing to 2·32,768; the projections qkv 2·(B·n)·32·96 and
    # out 2·(B·n)·32·32.
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(torch.randn(B, N, D))
    matmuls = flops.q_proj + flops.k_proj + flops.v_proj + flops.o_proj + flops.scores \
        + flops.context
    assert counter.get_total_flops() == matmuls == 2 * B * N * D * 4 * D + 2 * 32768


def test_chunked_attention_in_two_layers_is_two_blocks() -> None:
    model = nn.Sequential(ChunkedAttention((4, 12), "lse"), ChunkedAttention((8, 8), "max"))
    report = _audit(model)
    # each layer's chunks join its own Q only: two blocks over the 16 keys each.
    assert [(b.layout.name, b.layout.seq_len_kv) for b in report.blocks] == [("0", N), ("1", N)]
    assert report.coverage.unread_cores == ()


class StackedChunks(nn.Module):
    """Memory-efficient attention with a normaliser per chunk: for each query chunk and key
    chunk, exp(s − max_c s) and its product with V_c (``einsum`` or ``matmul``); the chunks'
    partial sums are stacked, rescaled by exp(max_c − max) and summed over the chunks, then
    divided by the rescaled sum of the exponentials; query chunks joined by ``cat``."""

    def __init__(self, product: str, heads: int = 4) -> None:
        super().__init__()
        self.h, self.dh, self.product = heads, D // heads, product
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.out = nn.Linear(D, D, bias=False)

    def _chunk(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.product == "einsum":
            s = torch.einsum("bhid,bhjd->bhij", q, k)
        else:
            s = q @ k.transpose(-1, -2)  # (B, h, q_c, k_c)
        m = s.amax(-1, keepdim=True).detach()
        e = (s - m).exp()
        pv = torch.einsum("bhij,bhjd->bhid", e, v) if self.product == "einsum" else e @ v
        return e.sum(-1), pv, m.squeeze(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        outs = []
        for qc in (q * self.dh ** -0.5).split(8, dim=-2):
            sums, pvs, maxes = zip(*(self._chunk(qc, kc, vc) for kc, vc in zip(
                k.split(4, dim=-2), v.split(4, dim=-2), strict=True)), strict=True)
            m = torch.stack(maxes, -1)  # (B, h, q_c, chunks)
            share = (m - m.amax(-1, keepdim=True)).exp().detach()
            ctx = (torch.stack(pvs, -1) * share.unsqueeze(-2)).sum(-1)  # (B, h, q_c, dh)
            outs.append(ctx / (torch.stack(sums, -1) * share).sum(-1).unsqueeze(-1))
        return self.out(torch.cat(outs, dim=-2).transpose(1, 2).reshape(b, n, d))


@pytest.mark.parametrize("product", ["matmul", "einsum"])
def test_chunks_with_their_own_normalisers_stacked_and_summed_are_one_block(
        product: str) -> None:
    _assert_one_chunked_block(StackedChunks(product))


def test_two_layers_of_query_and_key_chunks_over_copies_of_q_are_two_blocks() -> None:
    model = nn.Sequential(ChunkedAttention((4, 12), "lse", q_form="clone", q_chunks=(8, 8)),
                          ChunkedAttention((8, 8), "online", q_form="scale", q_chunks=(4, 12)))
    report = _audit(model)
    # each layer's chunks join their own Q only: two blocks of 16 queries over 16 keys.
    assert [(b.layout.name, b.layout.seq_len_q, b.layout.seq_len_kv, b.layout.core_count)
            for b in report.blocks] == [("0", N, N, 1), ("1", N, N, 1)]
    assert report.coverage.unread_cores == ()


class LocalBlocks(nn.Module):
    """Blocked local attention written as a loop: each query chunk attends to its own key
    chunk only, and the contexts are joined along the queries."""

    def __init__(self, block: int = 8, heads: int = 4) -> None:
        super().__init__()
        self.h, self.dh, self.block = heads, D // heads, block
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.out = nn.Linear(D, D, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        parts = zip(*(t.split(self.block, dim=2) for t in (q, k, v)), strict=True)
        ctx = torch.cat([(qc @ kc.transpose(-1, -2)).softmax(-1) @ vc
                         for qc, kc, vc in parts], dim=2)  # (B, h, n, dh)
        return self.out(ctx.transpose(1, 2).reshape(b, n, d))


def test_query_chunks_each_over_their_own_keys_stay_local() -> None:
    (block,) = _audit(LocalBlocks()).blocks
    # two chunks of 8 queries, each against its own 8 keys: no core over all 16.
    lay = block.layout
    assert (lay.seq_len_q, lay.seq_len_kv, lay.core_count) == (8, 8, 2)
