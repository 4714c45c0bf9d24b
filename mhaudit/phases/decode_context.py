"""The decode step against context: the same closed forms at several cache lengths."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mhaudit.data import AttentionBlock, DecodeCost, DecodePoint
from mhaudit.trace.graphs import submodule

POINTS = 5
"""Contexts the curve takes, a factor of 4 apart, ending at the model's longest."""

UNBOUNDED = 16
"""Without a stated longest context, the curve ends at this multiple of the step's."""

LONGEST_KEYS = ("max_target_positions", "max_position_embeddings")
"""Config entries that state the longest context, the generating side's first (an
encoder-decoder's config states its decoder's positions as ``max_target_positions``)."""


def _stated(config: Any) -> int | None:
    for key in LONGEST_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def longest_context(module: Any, blocks: Sequence[AttentionBlock] = ()) -> int | None:
    """The longest context the generating part states: the config of the nearest module
    above its first self-attention block (``blocks``, the step's) that states one, else
    the model's (``max_target_positions``, else ``max_position_embeddings``)."""
    selfs = [b.name for b in blocks if b.layout.kind == "self"]
    path = selfs[0].split(".") if selfs else []
    for depth in range(len(path), -1, -1):
        owner = submodule(module, ".".join(path[:depth])) if depth else module
        if owner is None:
            continue
        value = _stated(getattr(owner, "config", None))
        if value is not None:
            return value
    return None


def contexts(step_context: int, longest: int | None) -> list[int]:
    """``POINTS`` contexts a factor of 4 apart up to ``longest`` (else 16× the step's),
    with the step's own among them."""
    top = longest if longest is not None else max(1, step_context) * UNBOUNDED
    points = {max(1, top // 4**k) for k in range(POINTS)}
    return sorted(points | {step_context} if step_context >= 1 else points)


def by_context(step: DecodeCost, at: Callable[[int], DecodeCost], longest: int | None
               ) -> tuple[DecodePoint, ...]:
    """The decode step at each of :func:`contexts`, each built by ``at`` (the builder that
    made ``step``); empty when the step does not apply: no cache grows."""
    if not step.applicable:
        return ()
    points = []
    for context in contexts(step.context, longest):
        cost = at(context)
        points.append(DecodePoint(context, cost.flops_per_step, cost.kv_read_bytes,
                                  cost.bytes_per_step, cost.time_per_step_s, cost.bound))
    return tuple(points)
