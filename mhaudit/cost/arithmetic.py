"""FLOP arithmetic the formulas share: products, softmax, attention, einsum, convolution.

FLOPs are floating-point operations counted as 2 per multiply-add; each helper counts the
dense work and says when it is exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from mhaudit.trace.einsum import EinsumError, expand_einsum

Shape = tuple[int, ...]

SOFTMAX_FLOPS_PER_ELEMENT = 3
"""softmax per score: softmax(x)_i = exp(x_i) / Σ_j exp(x_j) costs an exp, an add into the
sum and a divide, as in Hoffmann et al. 2022 (Chinchilla), Table A4: "softmax: 3 × heads ×
n_ctx²". The max subtraction kernels do for numerical stability is not counted. log_softmax
is 3 as well: exp, sum, subtract the log-sum (the one log per row is ignored).
"""


class FormulaInputError(ValueError):
    """The arguments of a call do not have the shapes its formula needs."""


def matmul_flops(m: int, k: int, n: int, batch: int = 1) -> int:
    """2·batch·m·k·n: ``batch`` products of (m, k) by (k, n). Exact for dense GEMM."""
    return 2 * batch * m * k * n


def broadcast_matmul_flops(a: Shape, b: Shape) -> int:
    """FLOPs of ``torch.matmul(a, b)`` with 1-D promotion and batch broadcasting. Exact."""
    if not a or not b:
        raise FormulaInputError("matmul of a 0-d tensor")
    a2 = (1, a[0]) if len(a) == 1 else a
    b2 = (b[0], 1) if len(b) == 1 else b
    n = max(len(a2), len(b2)) - 2
    pairs = list(zip((1,) * (n + 2 - len(a2)) + a2[:-2], (1,) * (n + 2 - len(b2)) + b2[:-2],
                     strict=True))
    if a2[-1] != b2[-2] or any(x != y and 1 not in (x, y) for x, y in pairs):
        raise FormulaInputError(f"matmul shapes do not fit: {a} @ {b}")
    batch = math.prod(x if y == 1 else y for x, y in pairs)
    return matmul_flops(a2[-2], a2[-1], b2[-1], batch)


def softmax_flops(numel: int) -> int:
    """SOFTMAX_FLOPS_PER_ELEMENT per element."""
    return SOFTMAX_FLOPS_PER_ELEMENT * numel


def attention_parts(
    batch_heads: int, n_q: int, n_kv: int, d_k: int, d_v: int
) -> tuple[int, int, int]:
    """(scores, softmax, context) of dense attention over ``batch_heads`` heads.

    Scores QKᵀ 2·bh·n_q·n_kv·d_k, softmax SOFTMAX_FLOPS_PER_ELEMENT·bh·n_q·n_kv, context
    probs·V 2·bh·n_q·n_kv·d_v. Exact for the dense core; masks and scaling ignored, so an
    upper bound for a masked one.
    """
    scores = matmul_flops(n_q, d_k, n_kv, batch_heads)  # (bh, n_q, d_k) @ (bh, d_k, n_kv)
    softmax = softmax_flops(batch_heads * n_q * n_kv)
    context = matmul_flops(n_q, n_kv, d_v, batch_heads)  # (bh, n_q, n_kv) @ (bh, n_kv, d_v)
    return scores, softmax, context


def band_length(n: int, chunk: int) -> int:
    """``n`` padded up to a multiple of the chunk 2w (Longformer pads its input so)."""
    return -(-n // chunk) * chunk if chunk else n


def band_chunks(n: int, chunk: int) -> int:
    """Overlapping chunks of 2w with stride w over n positions: n/w − 1 (n padded to 2w)."""
    stride = chunk // 2
    return band_length(n, chunk) // stride - 1 if stride else 0


def banded_attention_parts(
    batch_heads: int, n: int, chunk: int, d_k: int, d_v: int, global_keys: int = 0
) -> tuple[int, int, int]:
    """(scores, softmax, context) of a band computed over overlapping chunks, as
    Longformer's sliding chunks compute it, with 2w = ``chunk`` and n padded to 2w.

    Scores: c = n/w − 1 chunks of 2w queries by 2w keys, 2·bh·c·(2w)²·d_k (the tile
    corners outside the band included: the graph computes them). Softmax over the
    band's n rows of 2w + 1 keys, SOFTMAX_FLOPS_PER_ELEMENT·bh·n·(2w + 1). Context: the
    probabilities skewed back into n/w chunks of w queries by 3w keys, 2·bh·n·3w·d_v
    (the pad columns included). g ``global_keys`` scored apart and joined beside the
    band add 2·bh·n·g·d_k, g softmax columns per row and 2·bh·n·g·d_v. Exact for that
    algorithm; masks and scaling ignored.
    """
    n, stride = band_length(n, chunk), chunk // 2
    if not stride:
        return 0, 0, 0
    scores = matmul_flops(chunk, d_k, chunk, batch_heads * band_chunks(n, chunk)) \
        + matmul_flops(n, d_k, global_keys, batch_heads)  # (bh, n, d_k) @ (bh, d_k, g)
    softmax = softmax_flops(batch_heads * n * (chunk + 1 + global_keys))
    # (bh, n/w, w, 3w) @ (bh, n/w, 3w, d_v), and (bh, n, g) @ (bh, g, d_v)
    context = matmul_flops(stride, chunk + stride, d_v, batch_heads * (n // stride)) \
        + matmul_flops(n, global_keys, d_v, batch_heads)
    return scores, softmax, context


def attention_flops(
    batch_heads: int, n_q: int, n_kv: int, d_k: int, d_v: int, *, with_softmax: bool = True
) -> int:
    """Dense attention: QKᵀ 2·bh·n_q·n_kv·d_k + probs·V 2·bh·n_q·n_kv·d_v (+ softmax)."""
    scores, softmax, context = attention_parts(batch_heads, n_q, n_kv, d_k, d_v)
    return scores + context + (softmax if with_softmax else 0)


def einsum_flops(equation: str, shapes: Sequence[Shape]) -> int:
    """FLOPs of an einsum contracted left to right, pair by pair (torch's default order),
    as torch's FlopCounterMode counts them.

    A pairwise step that sums an index both operands hold is a batched product (torch
    runs ``bmm``): 2 × the product of the index sizes it touches, less any index of one
    operand alone that nothing later reads (torch sums that away first). A step that sums
    nothing (an outer or broadcast product: rotary's ``i,j->ij``) is an elementwise
    multiply, which torch runs as ``mul``, and a single operand is a permutation or a plain
    sum: both cost 0 here, as in torch's count, so the matmul figure ignores those
    multiplies and adds (a lower bound of the elementwise work).
    Exact for two operands; an upper bound when opt_einsum picks a cheaper order.
    """
    try:
        expanded, out, sizes = expand_einsum(equation, shapes)
    except EinsumError as error:
        raise FormulaInputError(str(error)) from error

    def volume(indices: set[str]) -> int:
        return math.prod(sizes[i] for i in indices)

    current = set(expanded[0])
    total = 0
    for position, term in enumerate(expanded[1:], start=1):
        later = set(out).union(*expanded[position + 1:])
        shared = current & set(term)
        # an index on one side only that nothing later reads is summed first (not counted)
        touched = {i for i in current | set(term) if i in shared or i in later}
        total += 2 * volume(touched) if shared - later else 0
        current = touched & later
    return total


def conv_flops(out_numel: int, weight: Shape) -> int:
    """2·out_numel·(in_ch/groups)·kernel_numel; ``weight`` is (out_ch, in_ch/groups, *kernel)."""
    return 2 * out_numel * math.prod(weight[1:])
