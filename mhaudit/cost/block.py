"""Analytic costs of one attention block from its layout: FLOPs, bytes, KV cache, roofline."""

from __future__ import annotations

from mhaudit.cost.arithmetic import attention_flops, matmul_flops
from mhaudit.cost.devices import GpuProfile
from mhaudit.cost.forms import core_cost, dense_core
from mhaudit.data import BlockMemory, FlopBreakdown, Layout, Projection, Roofline

# Every figure here is for one forward pass at the layout's (b, n_q, n_kv). The
# Layout describes the whole block: num_heads and the projection widths already
# cover every merged core (``core_count``), so nothing is multiplied by it.


def projection_flops(projection: Projection | None, rows: int) -> int:
    """2·rows·in·out for a present projection (2·rows·in·out / g with g groups), 0 for an
    absent one; bias adds ignored.

    A low-rank factorised role (``rank`` > 0) runs each of its weight elements once
    per row: 2·rows·weight_params, which counts a down-projection shared between
    roles once, where it is attributed.
    """
    if projection is None:
        return 0
    if projection.low_rank_width:
        return 2 * rows * projection.weight_params
    return matmul_flops(rows, projection.in_features, projection.out_features) \
        // projection.groups


def core_flops(layout: Layout, batch: int, n_q: int, n_kv: int) -> int:
    """QKᵀ + softmax + PV of ``batch`` sequences of ``n_q`` queries against ``n_kv`` keys.

    2·b·h·n_q·n_kv·d_k + SOFTMAX_FLOPS_PER_ELEMENT·b·h·n_q·n_kv + 2·b·h·n_q·n_kv·d_v
    (:func:`~mhaudit.cost.arithmetic.attention_parts`) for the softmax form, the form's
    own formula (:mod:`mhaudit.cost.forms`) for the others; all h query heads count (GQA
    shares K/V, not work). Dense, masks ignored.
    """
    cost = core_cost(layout, batch, n_q, n_kv)
    return cost.scores + cost.softmax + cost.context


TILE = 128
"""Query and key tile edge of the tile-skipping kernel ``causal_tiles_total`` models."""


def diagonal_offset(layout: Layout) -> int:
    """Keys past the query index that query i may see: 0 top-left, n_kv − n_q bottom-right."""
    if layout.causal_alignment == "bottom-right":
        return layout.seq_len_kv - layout.seq_len_q
    return 0


def _keys_up_to(n_q: int, n_kv: int, offset: int) -> int:
    """Σ over query rows i < n_q of #{keys j < n_kv : j ≤ i + offset}.

    Row i counts clamp(i + offset + 1, 0, n_kv); the sum over x = c .. c + n_q − 1 of
    clamp(x, 0, n_kv) with c = offset + 1 is F(c + n_q) − F(c), where F(m) sums
    clamp(x, 0, n_kv) over 0 ≤ x < m: m(m − 1)/2 up to m = n_kv + 1, then n_kv a step.
    """

    def prefix(m: int) -> int:
        if m <= 0:
            return 0
        if m <= n_kv + 1:
            return m * (m - 1) // 2
        return n_kv * (n_kv + 1) // 2 + (m - n_kv - 1) * n_kv

    start = offset + 1
    return prefix(start + n_q) - prefix(start)


def causal_pairs(n_q: int, n_kv: int, offset: int = 0, window: int | None = None) -> int:
    """Query/key pairs a causal mask keeps: query i sees keys j with i + offset − window < j
    ≤ i + offset (no lower limit without a window). Exact count of unmasked scores.

    ``offset`` 0 is torch's ``is_causal`` (top-left: row i sees i + 1 keys; 64 queries over
    256 keys keep 64·65/2 = 2,080 pairs); n_kv − n_q is bottom-right (the same shape keeps
    64·192 + 2,080 = 14,368). A window w subtracts the pairs with j ≤ i + offset − w.
    """
    kept = _keys_up_to(n_q, n_kv, offset)
    if window is not None:
        kept -= _keys_up_to(n_q, n_kv, offset - window)
    return kept


def _arith(a: int, b: int, c: int) -> int:
    """Σ (t + c) over a ≤ t < b (0 for an empty range)."""
    if b <= a:
        return 0
    return (b - a) * (a + b - 1) // 2 + (b - a) * c


def causal_tile_pairs(
    n_q: int, n_kv: int, offset: int = 0, window: int | None = None, tile: int = TILE
) -> int:
    """Score elements a tile-skipping kernel computes: every ``tile``×``tile`` tile that holds
    an unmasked pair is computed in full, the others are skipped.

    For each query tile of rows r0..r1, keys run from the tile holding the first key row r0
    sees (r0 + offset − window + 1, or 0) to the tile holding the last key row r1 sees
    (r1 + offset), clipped to n_kv. An upper bound of the unmasked pairs, exact for
    FlashAttention's block skipping at that tile size.

    Closed form, O(1) in the lengths: full query tile t (rows tT .. tT + T − 1) ends its keys
    at min(n_kv, (t + A + 1)·T) with A = ⌊(T − 1 + offset)/T⌋ and starts them at
    max(0, t + B)·T with B = ⌊(offset − window + 1)/T⌋ (0 without a window); each bound is
    linear in t up to one clamp, so each sum is an arithmetic series. The last, partial
    query tile is counted on its own.
    """
    full = n_q // tile
    reach = (tile - 1 + offset) // tile  # A: key tiles past t that row tT + T − 1 reaches
    a = max(0, -reach)  # first tile whose last row sees a key (t·T + T − 1 + offset ≥ 0)
    b = full
    start = None if window is None else (offset - window + 1) // tile  # B
    if window is not None:  # the first row must see a key below n_kv: tT + offset − w + 1 < n_kv
        b = min(b, max(0, -((-(n_kv - offset + window - 1)) // tile)))
    total = 0
    if b > a:
        capped = min(b, max(a, n_kv // tile - reach))  # tiles with (t + A + 1)·T ≤ n_kv
        ends = tile * _arith(a, capped, reach + 1) + (b - capped) * n_kv
        begins = 0 if start is None else tile * _arith(max(a, min(b, -start)), b, start)
        total = tile * (ends - begins)
    if n_q % tile:
        total += _tile_pairs(full * tile, n_q, n_kv, offset, window, tile)
    return total


def _tile_pairs(r0: int, end: int, n_kv: int, offset: int, window: int | None,
                tile: int) -> int:
    """Score elements of the one query tile of rows r0 .. end − 1."""
    r1 = end - 1
    hi = min(n_kv - 1, r1 + offset)
    lo = 0 if window is None else max(0, r0 + offset - window + 1)
    if hi < lo:
        return 0
    first, last = lo // tile * tile, min(n_kv, (hi // tile + 1) * tile)
    return (r1 - r0 + 1) * (last - first)


def block_flops(layout: Layout) -> FlopBreakdown:
    """Forward FLOPs of one block, part by part (2 per multiply-add, dense, bias adds excluded).

    Projections: 2·rows·in_features·out_features from each Projection (rows b·n_q for
    Q and O, b·n_kv for K and V, or ``kv_rows`` when a map over positions after them
    makes the keys, whose FLOPs ``kv_transform_flops`` K and V add; Q and O add those
    of their absorbed per-head maps, ``absorbed_flops``); 0 when a projection
    is absent; V's projection counts 0 when ``kv_shared`` (K's output is reused). Core:
    scores 2·b·h·n_q·n_kv·d_k, softmax 3·b·h·n_q·n_kv (SOFTMAX_FLOPS_PER_ELEMENT: exp,
    sum, divide), context 2·b·h·n_q·n_kv·d_v, all h query heads (GQA shares K/V, not
    work). Masking, scaling
    and dropout are ignored, so ``total`` is the dense figure: an upper bound for a
    causal block. A block whose scores are not a softmax over n_q×n_kv (``score_form``),
    or a band over overlapping chunks (``window_chunk``), costs its core by its own
    formula (:func:`~mhaudit.cost.forms.core_cost`). Learned maps of the score map (head
    mixing) add b·h·n_q·n_kv·``learned_map_ops`` over the whole map, masked or not.

    Only when ``layout.causal`` is True (softmax form): ``causal_total`` counts the core over the
    unmasked pairs (``causal_pairs`` with the layout's alignment and window), a lower
    bound of what any kernel executes; ``causal_tiles_total`` over the pairs of every
    128×128 tile holding one (``causal_tile_pairs``), what a tile-skipping kernel runs.
    """
    b, h = layout.batch_size, layout.num_heads
    n_q, n_kv = layout.seq_len_q, layout.seq_len_kv
    d_k, d_v = layout.head_dim, layout.v_head_dim
    # Joint attention: each role's projection holds every stream's weights side by side,
    # and each token goes through its own stream's only (exact when the streams are as wide).
    streams = max(layout.streams, 1)
    (q_map, o_map), (k_map, v_map) = layout.absorbed_flops, layout.kv_transform_flops
    kv_rows = layout.kv_rows or b * n_kv  # K/V projected before a map over positions
    q_proj = projection_flops(layout.q, b * n_q) // streams + q_map
    k_proj = projection_flops(layout.k, kv_rows) // streams + k_map
    v_proj = (0 if layout.kv_shared else projection_flops(layout.v, kv_rows) // streams) + v_map
    o_proj = projection_flops(layout.o, b * n_q) // streams + o_map
    core = core_cost(layout)
    scores, softmax, context = core.scores, core.softmax, core.context
    score_map = b * h * n_q * n_kv * layout.learned_map_ops
    causal_total = tiles_total = None
    if layout.causal is True and layout.score_form == "softmax":
        offset = diagonal_offset(layout)
        projections = q_proj + k_proj + v_proj + o_proj
        pairs = b * h * causal_pairs(n_q, n_kv, offset, layout.window)
        causal_total = projections + _pairs_core(pairs, layout.score_maps, d_k, d_v) + score_map
        tiles = b * h * causal_tile_pairs(n_q, n_kv, offset, layout.window)
        tiles_total = projections + _pairs_core(tiles, layout.score_maps, d_k, d_v) + score_map
    return FlopBreakdown(
        q_proj=q_proj,
        k_proj=k_proj,
        v_proj=v_proj,
        scores=scores,
        softmax=softmax,
        context=context,
        o_proj=o_proj,
        score_map=score_map,
        causal_total=causal_total,
        causal_tiles_total=tiles_total,
        visited_fraction=layout.visited_fraction,
        dense_core=dense_core(layout),
    )


def _pairs_core(pairs: int, maps: int, d_k: int, d_v: int) -> int:
    """Core FLOPs over ``pairs`` kept (query, key) pairs, each a 1×1 score in each of the
    ``maps`` softmax maps (2·d_k + softmax per map) and one 2·d_v product with V."""
    return attention_flops(pairs * maps, 1, 1, d_k, 0) + attention_flops(
        pairs, 1, 1, 0, d_v, with_softmax=False)


def kv_bytes_per_position(layout: Layout, element_bytes: int) -> int:
    """K and V bytes for one key/value position: (h_kv·d_k + h_kv·d_v)·element_bytes.

    Holds for self- and cross-attention alike (for cross-attention, per encoder
    token). With ``kv_shared`` only K is stored: h_kv·d_k·element_bytes. Latent
    attention caches its latent (``latent_width``, e.g. kv_lora_rank + rope dims =
    576 elements for DeepSeek-V3) whether or not the forward writes a cache; otherwise
    the width the code writes to its cache (``cached_width``), when the graph shows one.
    """
    if layout.latent_width is not None:
        return layout.latent_width * element_bytes
    if layout.cached_width is not None:
        return layout.cached_width * element_bytes
    k = layout.num_kv_heads * layout.head_dim
    v = 0 if layout.kv_shared else layout.num_kv_heads * layout.v_head_dim
    return (k + v) * element_bytes


def grows_with_tokens(layout: Layout) -> bool:
    """True when generating a token appends to this block's cache: causal self-attention."""
    return layout.kind == "self" and layout.causal is True


def cached_positions(layout: Layout, seq_len_kv: int) -> int:
    """Key positions a decoder keeps at ``seq_len_kv``: capped at the sliding window."""
    return seq_len_kv if layout.window is None else min(seq_len_kv, layout.window)


def block_memory(
    layout: Layout,
    element_bytes: int,
    materializes_scores: bool,
    scores_element_bytes: int | None = None,
) -> BlockMemory:
    """Activation and KV-cache bytes of one block at the layout's shape.

    q/k/v bytes are the tensors the attention core reads: b·n_q·h·d_k, b·n_kv·h_kv·d_k
    and b·n_kv·h_kv·d_v elements (V counted even when it aliases K). The score matrix
    is b·h·n_q·n_kv elements (the form's own count for other score forms:
    b·h·d_k·d_v for channel attention, b·h·n for separable, the chunks' tiles for a band)
    of ``scores_element_bytes``
    (default ``element_bytes``; pass 4 for the SDPA math fallback on fp16/bf16 inputs,
    which computes scores in fp32). The cache, with p = ``kv_bytes_per_position``: causal
    self-attention (a decoder) adds p per generated token and holds p·b·min(n_kv, window);
    cross-attention holds p·b·n_kv once per source sequence (``kv_cache_bytes_static``) and
    adds nothing per token; non-causal self-attention (an encoder) caches nothing.
    """
    b, h, h_kv = layout.batch_size, layout.num_heads, layout.num_kv_heads
    n_q, n_kv = layout.seq_len_q, layout.seq_len_kv
    e = element_bytes
    scores_e = element_bytes if scores_element_bytes is None else scores_element_bytes
    scores_bytes = core_cost(layout).score_elements * scores_e  # (b, h, n_q, n_kv)
    per_position = kv_bytes_per_position(layout, element_bytes)
    per_token = per_position if grows_with_tokens(layout) else 0
    static = per_position * b * n_kv if layout.kind == "cross" else 0
    return BlockMemory(
        q_bytes=b * n_q * h * layout.head_dim * e,  # (b, h, n_q, d_k)
        k_bytes=b * n_kv * h_kv * layout.head_dim * e,  # (b, h_kv, n_kv, d_k)
        v_bytes=b * n_kv * h_kv * layout.v_head_dim * e,  # (b, h_kv, n_kv, d_v)
        scores_bytes=scores_bytes if materializes_scores else None,
        scores_bytes_if_materialized=scores_bytes,
        kv_cache_bytes_per_token=per_token,
        kv_cache_bytes=per_token * b * cached_positions(layout, n_kv) + static,
        kv_cache_bytes_static=static,
    )


SCORE_PASSES = 4
"""HBM passes over a materialised score matrix: QKᵀ writes it, softmax reads it and
writes the probabilities, probs·V reads them."""


def block_bytes_moved(
    layout: Layout,
    element_bytes: int,
    materializes_scores: bool,
    scores_element_bytes: int | None = None,
) -> int:
    """Estimated HBM traffic of one block's forward, in bytes.

    Each present projection reads its weight and bias and its input (rows·in) and
    writes its output (rows·out); V's is skipped when ``kv_shared``. The attention
    core reads Q, K and V and writes the context (b·n_q·h·d_v). When scores are
    materialised, SCORE_PASSES passes over the score matrix are added. Assumes no
    cache reuse between kernels and ignores masks, dropout, norms and residuals: a
    lower bound for an unfused implementation, an upper bound for a fused one that
    keeps projections' outputs on chip.
    """
    b, n_q, n_kv, e = layout.batch_size, layout.seq_len_q, layout.seq_len_kv, element_bytes
    roles = [(layout.q, b * n_q), (layout.k, b * n_kv), (layout.o, b * n_q)]
    if not layout.kv_shared:
        roles.append((layout.v, b * n_kv))
    total = 0
    for projection, rows in roles:
        if projection is not None:
            weights = projection.params
            total += (weights + rows * (projection.in_features + projection.out_features)) * e
    memory = block_memory(layout, element_bytes, materializes_scores, scores_element_bytes)
    context_bytes = b * n_q * layout.num_heads * layout.v_head_dim * e  # (b, n_q, h, d_v)
    total += memory.q_bytes + memory.k_bytes + memory.v_bytes + context_bytes
    if memory.scores_bytes is not None:
        total += SCORE_PASSES * memory.scores_bytes
    return total


def roofline(flops: int, bytes_moved: int, profile: GpuProfile) -> Roofline:
    """Roofline estimate: max(flops / peak, bytes / bandwidth) on ``profile``.

    Uses the dense bf16/fp16 tensor-core peak, so it is optimistic for fp32 work;
    ignores launch overhead, wave quantisation and achieved (not peak) efficiency.
    """
    compute_time_s = flops / (profile.peak_tflops_bf16 * 1e12)
    memory_time_s = bytes_moved / (profile.bandwidth_gb_s * 1e9)
    return Roofline(
        flops=flops,
        bytes_moved=bytes_moved,
        compute_time_s=compute_time_s,
        memory_time_s=memory_time_s,
        time_s=max(compute_time_s, memory_time_s),
        arithmetic_intensity=flops / bytes_moved if bytes_moved else None,
        bound="compute" if compute_time_s >= memory_time_s else "memory",
    )
