"""Byte and FLOP formatting, and head-count arithmetic shared by the rules and what-if."""

from __future__ import annotations

from mhaudit.kernels import FA2_HEAD_DIMS

_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_SI = ("", "K", "M", "G", "T", "P", "E")


def fmt_bytes(value: float) -> str:
    """``16384`` -> ``16.0 KiB``; binary units, three significant digits."""
    size = float(value)
    for unit in _BINARY:
        if abs(size) < 1024 or unit == _BINARY[-1]:
            return f"{int(size)} B" if unit == "B" else f"{size:.3g} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def fmt_si(value: float, unit: str = "") -> str:
    """``1.5e9`` -> ``1.5 G`` plus ``unit``; decimal prefixes, three significant digits."""
    size = float(value)
    for prefix in _SI:
        if abs(size) < 1000 or prefix == _SI[-1]:
            return f"{size:.3g} {prefix}{unit}".rstrip()
        size /= 1000
    raise AssertionError("unreachable")


def divisors(n: int) -> tuple[int, ...]:
    """All positive divisors of ``n`` in increasing order."""
    if n < 1:
        raise ValueError(f"divisors need a positive integer, got {n}")
    return tuple(d for d in range(1, n + 1) if n % d == 0)


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
    """Largest divisor of ``heads`` that is at most ``heads / factor`` (at least 1)."""
    target = max(1, heads // factor)
    return max(d for d in divisors(heads) if d <= target)
