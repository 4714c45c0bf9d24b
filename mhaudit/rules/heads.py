"""Head-count arithmetic shared by the rules and what-if."""

from __future__ import annotations

import functools
import math

from mhaudit.cost.kernels import FA2_HEAD_DIMS

__all__ = ["divisors", "heads_hint", "kernel_friendly_heads", "reduced_kv_heads"]


@functools.lru_cache(maxsize=256)
def divisors(n: int) -> tuple[int, ...]:
    """All positive divisors of ``n`` in increasing order (cached: a sweep asks repeatedly)."""
    if n < 1:
        raise ValueError(f"divisors need a positive integer, got {n}")
    small: list[int] = []
    large: list[int] = []
    d = 1
    while d * d <= n:  # O(√n): each divisor d ≤ √n pairs with n // d ≥ √n
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return (*small, *reversed(large))


def kernel_friendly_heads(
    inner_width: int, dims: tuple[int, ...] = FA2_HEAD_DIMS
) -> tuple[int, ...]:
    """Head counts h that split ``inner_width`` into one of the compiled head ``dims``."""
    return tuple(h for h in divisors(inner_width) if inner_width // h in dims)


def heads_hint(inner_width: int, dims: tuple[int, ...] = FA2_HEAD_DIMS) -> str:
    """``for width 640: h = 5 (d_k = 128), …`` for ``inner_width``, or a fallback sentence."""
    heads = kernel_friendly_heads(inner_width, dims)
    if not heads:
        sizes = "/".join(str(d) for d in dims)
        return f"no head count splits width {inner_width} into {sizes}; change the width"
    pairs = ", ".join(f"h = {h} (d_k = {inner_width // h})" for h in heads)
    return f"for width {inner_width}: {pairs}"


def reduced_kv_heads(heads: int, factor: int) -> int:
    """Largest divisor of ``heads`` that is at most ``heads / factor`` (at least 1).

    O(√heads) with an early exit: a divisor d ≥ √heads pairs with e = heads / d ≤ √heads,
    so the smallest such e (from heads / target up) gives the largest d; else the answer
    is the largest d ≤ √heads, found counting down.
    """
    target = max(1, heads // factor)
    root = math.isqrt(heads)
    e = -(-heads // target)  # ceil(heads / target): e ≥ it keeps d = heads / e ≤ target
    while e <= root:
        if heads % e == 0:
            return heads // e
        e += 1
    d = min(root, target)
    while heads % d:
        d -= 1
    return d
