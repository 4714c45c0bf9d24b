"""Einsum subscripts with ``...`` spelled out: what both detection and costing read."""

from __future__ import annotations

import re
from collections.abc import Sequence

Shape = tuple[int, ...]


class EinsumError(ValueError):
    """An einsum equation that does not fit its operands."""


_EINSUM_SPEC = re.compile(r"^[A-Za-z.,\->\s]*$")


def expand_einsum(
    equation: str, shapes: Sequence[Shape]
) -> tuple[list[str], str, dict[str, int]]:
    """The operands' and output's subscripts with ``...`` spelled out, and index sizes.

    Each ellipsis dim becomes its own letter, aligned from the right; an implicit
    output is the broadcast dims then the indices used once, sorted (torch's rule).
    """
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes) or not _EINSUM_SPEC.match(equation):
        raise EinsumError(f"einsum {equation!r} does not fit {len(shapes)} operands")
    n_ell = max(len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes, strict=True))
    if n_ell < 0:
        raise EinsumError(f"einsum {equation!r} has more indices than dims")
    ell = "".join(chr(0x100 + i) for i in range(n_ell))  # one letter per ellipsis dim
    sizes: dict[str, int] = {}
    expanded: list[str] = []
    for term, shape in zip(terms, shapes, strict=True):
        term = term.replace("...", ell[n_ell - len(shape) + len(term.replace("...", "")):])
        if len(term) != len(shape):
            raise EinsumError(f"einsum term {term!r} does not fit shape {shape}")
        for index, extent in zip(term, shape, strict=True):
            sizes[index] = max(sizes.get(index, 1), extent)
        expanded.append(term)
    joined = "".join(expanded)
    once = sorted(c for c in set(joined) - set(ell) if joined.count(c) == 1)
    out = rhs.replace("...", ell) if arrow else ell + "".join(once)
    return expanded, out, sizes
