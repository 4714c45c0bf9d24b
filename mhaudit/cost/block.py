"""Analytic costs of one attention block from its layout: FLOPs, bytes, KV cache, roofline."""

from __future__ import annotations

from mhaudit.cost.devices import GpuProfile
from mhaudit.cost.formulas import SOFTMAX_FLOPS_PER_ELEMENT, matmul_flops, softmax_flops
from mhaudit.data import BlockMemory, FlopBreakdown, Layout, Projection, Roofline

# Every figure here is for one forward pass at the layout's (b, n_q, n_kv). The
# Layout describes the whole block: num_heads and the projection widths already
# cover every merged core (``core_count``), so nothing is multiplied by it.


def _projection_flops(projection: Projection | None, rows: int) -> int:
    """2·rows·in·out for a present projection, 0 for an absent one; bias adds ignored.

    A low-rank factorised role (``rank`` > 0) runs each of its weight elements once
    per row: 2·rows·weight_params, which counts a down-projection shared between
    roles once, where it is attributed.
    """
    if projection is None:
        return 0
    if projection.low_rank_width:
        return 2 * rows * projection.weight_params
    return matmul_flops(rows, projection.in_features, projection.out_features)


def causal_pairs(n_q: int, n_kv: int) -> int:
    """Query/key pairs a bottom-right aligned causal mask keeps (FlashAttention's convention).

    Query i (0-based) sees keys j ≤ i + n_kv − n_q, so row i keeps
    min(n_kv, max(0, i + n_kv − n_q + 1)) keys. For n_q ≤ n_kv that sums to
    n_q·(n_kv − n_q) + n_q(n_q + 1)/2 (n(n + 1)/2 when n_q = n_kv = n; n_kv for one
    decoded token); for n_q > n_kv the first n_q − n_kv rows see nothing and the
    sum is n_kv(n_kv + 1)/2. Exact count of unmasked scores.
    """
    if n_q <= n_kv:
        return n_q * (n_kv - n_q) + n_q * (n_q + 1) // 2
    return n_kv * (n_kv + 1) // 2


def block_flops(layout: Layout) -> FlopBreakdown:
    """Forward FLOPs of one block, part by part (2 per multiply-add, dense, bias adds excluded).

    Projections: 2·rows·in_features·out_features from each Projection (rows b·n_q for
    Q and O, b·n_kv for K and V); 0 when a projection is absent; V counts 0 when
    ``kv_shared`` (K's output is reused). Core: scores 2·b·h·n_q·n_kv·d_k, softmax
    3·b·h·n_q·n_kv (SOFTMAX_FLOPS_PER_ELEMENT: exp, sum, divide), context
    2·b·h·n_q·n_kv·d_v, all h query heads (GQA shares K/V, not work). Masking, scaling
    and dropout are ignored, so ``total`` is the dense figure: an upper bound for a
    causal block.

    ``causal_total`` (only when ``layout.causal`` is True): the projections plus the
    core counted over ``causal_pairs(n_q, n_kv)`` instead of n_q·n_kv. That is the
    element-level count; a kernel that skips masked tiles still computes the
    diagonal tiles in full, so this is a lower bound of what it executes.
    """
    b, h = layout.batch_size, layout.num_heads
    n_q, n_kv = layout.seq_len_q, layout.seq_len_kv
    d_k, d_v = layout.head_dim, layout.v_head_dim
    q_proj = _projection_flops(layout.q, b * n_q)
    k_proj = _projection_flops(layout.k, b * n_kv)
    v_proj = 0 if layout.kv_shared else _projection_flops(layout.v, b * n_kv)
    o_proj = _projection_flops(layout.o, b * n_q)
    scores = matmul_flops(n_q, d_k, n_kv, b * h)  # (b·h, n_q, d_k) @ (b·h, d_k, n_kv)
    softmax = softmax_flops(b * h * n_q * n_kv)
    context = matmul_flops(n_q, n_kv, d_v, b * h)  # (b·h, n_q, n_kv) @ (b·h, n_kv, d_v)
    causal_total = None
    if layout.causal is True:
        pairs = b * h * causal_pairs(n_q, n_kv)
        core = 2 * pairs * d_k + SOFTMAX_FLOPS_PER_ELEMENT * pairs + 2 * pairs * d_v
        causal_total = q_proj + k_proj + v_proj + o_proj + core
    return FlopBreakdown(
        q_proj=q_proj,
        k_proj=k_proj,
        v_proj=v_proj,
        scores=scores,
        softmax=softmax,
        context=context,
        o_proj=o_proj,
        causal_total=causal_total,
    )


def kv_bytes_per_position(layout: Layout, element_bytes: int) -> int:
    """K and V bytes for one key/value position: (h_kv·d_k + h_kv·d_v)·element_bytes.

    Holds for self- and cross-attention alike (for cross-attention, per encoder
    token). With ``kv_shared`` only K is stored: h_kv·d_k·element_bytes. When the
    graph shows what the code writes to its cache (``cached_width``, e.g. a
    compressed latent), that width is used instead.
    """
    if layout.cached_width is not None:
        return layout.cached_width * element_bytes
    k = layout.num_kv_heads * layout.head_dim
    v = 0 if layout.kv_shared else layout.num_kv_heads * layout.v_head_dim
    return (k + v) * element_bytes


def block_memory(
    layout: Layout,
    element_bytes: int,
    materializes_scores: bool,
    scores_element_bytes: int | None = None,
) -> BlockMemory:
    """Activation and KV-cache bytes of one block at the layout's shape.

    q/k/v bytes are the tensors the attention core reads: b·n_q·h·d_k, b·n_kv·h_kv·d_k
    and b·n_kv·h_kv·d_v elements (V counted even when it aliases K). The score matrix
    is b·h·n_q·n_kv elements of ``scores_element_bytes`` (default ``element_bytes``;
    pass 4 for the SDPA math fallback on fp16/bf16 inputs, which computes scores in
    fp32). ``kv_cache_bytes_per_token`` is ``kv_bytes_per_position`` for
    self-attention and 0 for cross-attention, whose cache is built once from the
    encoder and does not grow per generated token; ``kv_cache_bytes`` is the
    per-position figure times b·n_kv for both kinds (for cross-attention: the whole
    encoder cache).
    """
    b, h, h_kv = layout.batch_size, layout.num_heads, layout.num_kv_heads
    n_q, n_kv = layout.seq_len_q, layout.seq_len_kv
    e = element_bytes
    scores_e = element_bytes if scores_element_bytes is None else scores_element_bytes
    scores_bytes = b * h * n_q * n_kv * scores_e  # (b, h, n_q, n_kv)
    per_position = kv_bytes_per_position(layout, element_bytes)
    return BlockMemory(
        q_bytes=b * n_q * h * layout.head_dim * e,  # (b, h, n_q, d_k)
        k_bytes=b * n_kv * h_kv * layout.head_dim * e,  # (b, h_kv, n_kv, d_k)
        v_bytes=b * n_kv * h_kv * layout.v_head_dim * e,  # (b, h_kv, n_kv, d_v)
        scores_bytes=scores_bytes if materializes_scores else None,
        scores_bytes_if_materialized=scores_bytes,
        kv_cache_bytes_per_token=per_position if layout.kind == "self" else 0,
        kv_cache_bytes=per_position * b * n_kv,
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
