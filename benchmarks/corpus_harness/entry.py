"""One corpus entry: a third-party module, how to call it, and what its constructor declares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Built = tuple[Any, tuple[Any, ...], dict[str, Any]]
"""A module, its positional inputs and its keyword inputs."""


@dataclass(frozen=True)
class Want:
    """One attention block as its constructor arguments declare it."""

    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    d_model: int
    """Input width of the Q projection."""
    kind: str
    """``self`` or ``cross``."""
    params: int
    """Weights and biases of the Q, K, V and O projections."""


@dataclass(frozen=True)
class Entry:
    """A module built from an installed package, with one :class:`Want` per attention block."""

    name: str
    package: str
    build: Callable[[], Built]
    """Builds the module and its inputs on the current default device."""
    wants: tuple[Want, ...]
    note: str = ""


def lin(d_in: int, d_out: int, bias: bool = True) -> int:
    """Parameters of a dense ``d_in → d_out`` projection."""
    return d_in * d_out + (d_out if bias else 0)


def mha(d: int, heads: int, params: int, kind: str = "self", kv_heads: int | None = None,
        head_dim: int | None = None, v_head_dim: int | None = None) -> Want:
    """A block of ``heads`` heads over width ``d`` (head dim ``d / heads`` unless given)."""
    d_k = head_dim or d // heads
    return Want(heads, kv_heads or heads, d_k, v_head_dim or d_k, d, kind, params)
