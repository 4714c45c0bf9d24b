"""Core FLOPs and score elements of each score form: one registered formula per form."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from mhaudit.cost.arithmetic import (
    attention_parts,
    band_chunks,
    banded_attention_parts,
    matmul_flops,
    softmax_flops,
)
from mhaudit.data import Layout


@dataclass(frozen=True)
class CoreCost:
    """The attention core of one block: FLOPs by part and the score elements it writes."""

    scores: int
    """FLOPs that form the scores (QKᵀ; the φ(K)ᵀV state of linear attention)."""
    softmax: int
    """FLOPs of the softmax or of the map that replaces it."""
    context: int
    """FLOPs that apply the weights to V."""
    score_elements: int
    """Elements of the score (or state) tensor the core writes when it materialises it."""


@dataclass(frozen=True)
class CoreShape:
    """What a form's formula reads: b·h heads and the four sizes of the layout."""

    batch_heads: int
    n_q: int
    n_kv: int
    d_k: int
    d_v: int
    map_ops: int = 0
    """Elementwise ops per score (the ``kernel`` form's map)."""
    chunk: int | None = None
    """2w when a softmax core is a band computed over overlapping chunks of 2w (stride w,
    Longformer's sliding chunks); None for a dense core."""
    global_keys: int = 0
    """Keys scored apart and joined beside a band (global tokens)."""
    visited: float = 1.0
    """Share of the score tiles a block mask visits (the ``flex`` form)."""
    window: int | None = None
    """Keys each query scores (the ``unfolded`` form's window); None for all n_kv."""


FormFormula = Callable[[CoreShape], CoreCost]
_FORMS: dict[str, FormFormula] = {}


def _register(form: str) -> Callable[[FormFormula], FormFormula]:
    def wrap(formula: FormFormula) -> FormFormula:
        if form in _FORMS:
            raise ValueError(f"score form {form!r} has a formula already")
        _FORMS[form] = formula
        return formula
    return wrap


@_register("softmax")
def _softmax(s: CoreShape) -> CoreCost:
    """QKᵀ 2·bh·n_q·n_kv·d_k, softmax 3·bh·n_q·n_kv, PV 2·bh·n_q·n_kv·d_v; bh·n_q·n_kv
    scores. Dense: masks and scaling ignored (an upper bound for a masked core).

    A band over overlapping chunks (``chunk`` = 2w) costs as the chunks compute it
    (:func:`~mhaudit.cost.arithmetic.banded_attention_parts`); its scores are the chunks'
    tiles, bh·c·(2w)² with c = n/w − 1 (the largest score tensor the chunked computation
    holds; the band it copies them into is bh·n·(2w + 1))."""
    if s.chunk:
        scores, softmax, context = banded_attention_parts(
            s.batch_heads, s.n_q, s.chunk, s.d_k, s.d_v, s.global_keys)
        tiles = s.batch_heads * band_chunks(s.n_q, s.chunk) * s.chunk * s.chunk
        return CoreCost(scores, softmax, context, tiles)
    scores, softmax, context = attention_parts(s.batch_heads, s.n_q, s.n_kv, s.d_k, s.d_v)
    return CoreCost(scores, softmax, context, s.batch_heads * s.n_q * s.n_kv)


@_register("kernel")
def _kernel(s: CoreShape) -> CoreCost:
    """QKᵀ and PV as for softmax; the map costs ``map_ops`` FLOPs per score (one per
    elementwise op, whatever the op: acos counts as 1). Masks multiplied in are ignored."""
    elements = s.batch_heads * s.n_q * s.n_kv  # (bh, n_q, n_kv)
    return CoreCost(
        matmul_flops(s.n_q, s.d_k, s.n_kv, s.batch_heads),  # (bh, n_q, d_k) @ (bh, d_k, n_kv)
        s.map_ops * elements,
        matmul_flops(s.n_q, s.n_kv, s.d_v, s.batch_heads),  # (bh, n_q, n_kv) @ (bh, n_kv, d_v)
        elements,
    )


@_register("linear")
def _linear(s: CoreShape) -> CoreCost:
    """State φ(K)ᵀV 2·bh·n_kv·d_k·d_v, context φ(Q)·state 2·bh·n_q·d_k·d_v; the feature
    map φ and the normaliser (a sum over keys) are not counted. The state is bh·d_k·d_v."""
    return CoreCost(
        matmul_flops(s.d_k, s.n_kv, s.d_v, s.batch_heads),  # (bh, d_k, n_kv) @ (bh, n_kv, d_v)
        0,
        matmul_flops(s.n_q, s.d_k, s.d_v, s.batch_heads),  # (bh, n_q, d_k) @ (bh, d_k, d_v)
        s.batch_heads * s.d_k * s.d_v,
    )


@_register("separable")
def _separable(s: CoreShape) -> CoreCost:
    """One score per token: the scores are the width-1 query projection (counted in
    q_proj), so 0 here; softmax over the tokens 3·bh·n_kv; context the pooled vector
    Σ_n p_n·k_n 2·bh·n_kv·d_k plus its broadcast multiply with V bh·n_q·d_v. bh·n_kv
    scores. Activations applied to V (ReLU) are not counted."""
    pooled = 2 * s.batch_heads * s.n_kv * s.d_k  # (bh, n_kv, d_k) weighted and summed
    broadcast = s.batch_heads * s.n_q * s.d_v  # (bh, 1, d_v) * (bh, n_q, d_v)
    return CoreCost(0, softmax_flops(s.batch_heads * s.n_kv), pooled + broadcast,
                    s.batch_heads * s.n_kv)


@_register("channel")
def _channel(s: CoreShape) -> CoreCost:
    """Scores over channels: QᵀK contracts the tokens, 2·bh·d_k·n_kv·d_v (d_k query
    channels against d_v key channels); softmax 3·bh·d_k·d_v; context P·Vᵀ 2·bh·d_k·d_v·n_q.
    bh·d_k·d_v scores, whatever the sequence length."""
    return CoreCost(
        matmul_flops(s.d_k, s.n_kv, s.d_v, s.batch_heads),  # (bh, d_k, n) @ (bh, n, d_v)
        softmax_flops(s.batch_heads * s.d_k * s.d_v),
        matmul_flops(s.n_q, s.d_v, s.d_k, s.batch_heads),  # (bh, d_k, d_v) @ (bh, d_v, n)
        s.batch_heads * s.d_k * s.d_v,
    )


@_register("flex")
def _flex(s: CoreShape) -> CoreCost:
    """torch's flex_attention: the softmax form over the tiles its block mask visits (a
    share ``visited`` of them, partial tiles whole, as its kernel computes them), plus
    ``map_ops`` pointwise FLOPs of the score_mod per visited score, in the softmax part.
    Masked positions inside a visited tile count as work. Scores bh·n_q·n_kv (the
    eager CPU path materialises them; the compiled kernel does not). At another length
    (scaling, what-if) the traced share is kept: an upper bound for a causal mask at a
    longer one (its share falls toward 1/2), a lower bound at a shorter one."""
    elements = s.batch_heads * s.n_q * s.n_kv  # (bh, n_q, n_kv)
    scores, softmax, context = attention_parts(s.batch_heads, s.n_q, s.n_kv, s.d_k, s.d_v)
    return CoreCost(round(scores * s.visited),
                    round((softmax + s.map_ops * elements) * s.visited),
                    round(context * s.visited), elements)


@_register("query_softmax")
def _query_softmax(s: CoreShape) -> CoreCost:
    """The softmax form's QKᵀ and PV; the softmax over the queries 3·bh·n_q·n_kv and the
    renormalisation over the keys (a sum and a divide) 2·bh·n_q·n_kv. bh·n_q·n_kv scores.
    A small constant added before renormalising is ignored."""
    scores, softmax, context = attention_parts(s.batch_heads, s.n_q, s.n_kv, s.d_k, s.d_v)
    elements = s.batch_heads * s.n_q * s.n_kv  # (bh, n_q, n_kv)
    return CoreCost(scores, softmax + 2 * elements, context, elements)


@_register("unfolded")
def _unfolded(s: CoreShape) -> CoreCost:
    """Local attention over w keys unfolded beside each query: QKᵀ a multiply and a sum,
    2·bh·n_q·w·d_k; softmax over the window 3·bh·n_q·w; PV 2·bh·n_q·w·d_v. bh·n_q·w
    scores. w is the window (n_kv without one)."""
    w = s.n_kv if s.window is None else min(s.window, s.n_kv)
    scores, softmax, context = attention_parts(s.batch_heads, s.n_q, w, s.d_k, s.d_v)
    return CoreCost(scores, softmax, context, s.batch_heads * s.n_q * w)


def form_names() -> tuple[str, ...]:
    """The forms with a formula."""
    return tuple(_FORMS)


def core_shape(layout: Layout, batch: int | None = None, n_q: int | None = None,
               n_kv: int | None = None) -> CoreShape:
    """The layout's core sizes, at another batch or length when given."""
    b = layout.batch_size if batch is None else batch
    return CoreShape(b * layout.num_heads, layout.seq_len_q if n_q is None else n_q,
                     layout.seq_len_kv if n_kv is None else n_kv, layout.head_dim,
                     layout.v_head_dim, layout.score_map_ops, layout.window_chunk,
                     layout.global_keys,
                     1.0 if layout.visited_fraction is None else layout.visited_fraction,
                     layout.window)


def core_cost(layout: Layout, batch: int | None = None, n_q: int | None = None,
              n_kv: int | None = None) -> CoreCost:
    """The core cost of ``layout`` by its score form (an unknown form costs as softmax).

    Rows tied into one score map (``tied_rows`` = R) share its softmax and its scores:
    both are the form's over ``batch_size`` sequences divided by R, the score tensor's
    real (b/R, h, n_q, n_kv); QKᵀ (which sums over the rows) and PV count every row.
    Maps combined into each map V meets (``score_maps`` = M, differential attention) each
    have their own QKᵀ and softmax: M times the form's; PV is counted once (the
    combining subtract and scale, 2 per score, ignored)."""
    formula = _FORMS.get(layout.score_form, _FORMS["softmax"])
    cost = formula(core_shape(layout, batch, n_q, n_kv))
    maps = layout.score_maps
    if maps > 1:
        cost = replace(cost, scores=cost.scores * maps, softmax=cost.softmax * maps,
                       score_elements=cost.score_elements * maps)
    tied = max(1, layout.tied_rows)
    if tied == 1:
        return cost
    return replace(cost, softmax=round(cost.softmax / tied),
                   score_elements=round(cost.score_elements / tied))


def dense_core(layout: Layout) -> int | None:
    """A block-masked core's FLOPs over every tile (None for a core without a block mask)."""
    if layout.visited_fraction is None:
        return None
    cost = _FORMS[layout.score_form](replace(core_shape(layout), visited=1.0))
    return cost.scores + cost.softmax + cost.context


def score_elements(layout: Layout) -> int:
    """Elements of the score tensor the layout's core writes when it materialises it."""
    return core_cost(layout).score_elements


def has_square_scores(layout: Layout) -> bool:
    """True when the core forms an n_q×n_kv score matrix (softmax and kernel forms)."""
    return layout.score_form in ("softmax", "kernel", "query_softmax")
