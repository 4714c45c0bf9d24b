"""Sources of an operand scored in shares of the head dim, one product per share."""

from __future__ import annotations

from dataclasses import replace

from mhaudit.detect.cores import Core
from mhaudit.detect.sources.walker import Source, SourceWalker


def role_sources(walker: SourceWalker, core: Core, role: str, axis: int) -> tuple[Source, ...]:
    """The sources of the core's ``role`` operand, widest first. Where products are added
    into the scores (``core.joined``: QKᵀ = q₁k₁ᵀ + q₂k₂ᵀ), Q and K read [q₁ | q₂] along
    the head dim, each part with its own share (so its own heads, as for a ``cat``)."""
    main = walker.sources(getattr(core, role), axis)
    if role == "v" or not core.joined:
        return _widest_first(main)
    parts = [_share(main, core.head_dim - sum(j[2] for j in core.joined))]
    for q, k, d_k, (q_axis, k_axis) in core.joined:
        parts.append(_share(walker.sources(q, q_axis) if role == "q" else walker.sources(
            k, k_axis), d_k))
    return _widest_first(tuple(source for group in parts for source in group))


def _widest_first(sources: tuple[Source, ...]) -> tuple[Source, ...]:
    return tuple(sorted(sources, key=lambda s: -s.width))


def _share(sources: tuple[Source, ...], dim: int) -> tuple[Source, ...]:
    """Sources that fill ``dim`` of the head dim (a part already joined keeps its own)."""
    return tuple(s if s.part_dim else replace(s, part_dim=dim) for s in sources)


def reads_apart(source: Source, earlier: list[Source]) -> bool:
    """``source`` reads a span of its projection's features that no ``earlier`` read
    overlaps (a latent and the rope key cut from one down-projection), so its weights are
    its own even where the reads of that projection add up to more than its width."""
    span = source.span
    if span is None:
        return False
    spans = [e.span for e in earlier]
    return all(s is not None and (s[1] <= span[0] or span[1] <= s[0]) for s in spans)
