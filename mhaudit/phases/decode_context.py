"""The decode step against context: the same closed forms at several cache lengths."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mhaudit.cost.devices import GpuProfile
from mhaudit.data import DecodeCost, DecodePoint, Report
from mhaudit.phases.decode import ExpertGroup, decode_for_report

POINTS = 5
"""Contexts the curve takes, a factor of 4 apart, ending at the model's longest."""

UNBOUNDED = 16
"""Without a stated longest context, the curve ends at this multiple of the step's."""


def longest_context(module: Any) -> int | None:
    """The longest context a model states: its config's ``max_position_embeddings``."""
    value = getattr(getattr(module, "config", None), "max_position_embeddings", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None


def contexts(step_context: int, longest: int | None) -> list[int]:
    """``POINTS`` contexts a factor of 4 apart up to ``longest`` (else 16× the step's),
    with the step's own among them."""
    top = longest if longest is not None else max(1, step_context) * UNBOUNDED
    points = {max(1, top // 4**k) for k in range(POINTS)}
    return sorted(points | {step_context} if step_context >= 1 else points)


def by_context(report: Report, step: DecodeCost, weight_bytes: int, element_bytes: int,
               profile: GpuProfile, experts: Sequence[ExpertGroup], longest: int | None
               ) -> tuple[DecodePoint, ...]:
    """The decode step of ``report`` at each of :func:`contexts` (empty when the step does
    not apply: no cache grows)."""
    if not step.applicable:
        return ()
    points = []
    for context in contexts(step.context, longest):
        at = decode_for_report(report, weight_bytes, element_bytes, profile, context, experts)
        points.append(DecodePoint(context, at.flops_per_step, at.kv_read_bytes,
                                  at.bytes_per_step, at.time_per_step_s, at.bound))
    return tuple(points)
