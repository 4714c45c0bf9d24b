"""Fold a step's timeline over repeated layers: copy a middle layer's segments in.

A run keeps a few members of each group of identical layers. The full model runs
the same ops with more copies of each group's middle member: its forward segment
once per extra layer right after it, and its backward segment once per extra layer
right after that. Each copy adds the segment's net bytes to everything after it,
and peaks inside the copies lie at the first or the last one (the levels grow
linearly). The result is the timeline of the full model, without running it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mhaudit.fake.live import CATEGORIES, StepLog

Vec = tuple[int, int, int]
"""Live (activations, grads, temporaries) bytes."""


@dataclass(frozen=True)
class Repeat:
    """A layer whose segments stand for ``extra`` more layers not run."""

    key: str
    extra: int


@dataclass(frozen=True)
class Segment:
    start: int
    end: int
    """Ticks [start, end) of the segment."""
    delta: Vec
    """Net bytes the segment adds."""
    flops: int


@dataclass(frozen=True)
class Peak:
    """The highest point of the folded timeline."""

    live: Vec
    phase: str
    """``forward`` or ``backward``."""


@dataclass(frozen=True)
class Folded:
    """The folded run: its peak, its FLOPs and what is alive when the backward ends."""

    peak: Peak
    flops: int
    end: Vec
    forward_flops: int


def _add(a: Vec, b: Vec, times: int = 1) -> Vec:
    return (a[0] + times * b[0], a[1] + times * b[1], a[2] + times * b[2])


def _sub(a: Vec, b: Vec) -> Vec:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


def _segment(log: StepLog, bounds: Sequence[Vec], start: int | None, end: int | None
             ) -> Segment | None:
    if start is None or end is None or end <= start:
        return None
    delta = _sub(bounds[end], bounds[start])  # what the layer leaves once its locals are gone
    return Segment(start, end, delta, sum(log.tick_flops[start:end]))


def _released(log: StepLog, fwd: Segment, forward_end: int) -> list[Segment]:
    """What a layer's forward keeps until the model's output is dropped, before the
    backward (a KV cache the output holds): each copy's frees with it, at the same tick.

    Such storages are in the forward segment's net bytes but in no backward segment,
    which frees only what the backward saved.
    """
    freed: dict[int, list[int]] = {}
    for rec in log.records:  # freed when the output is dropped, right after the loss
        if fwd.start <= rec.born < fwd.end and rec.freed == forward_end:
            vec = freed.setdefault(rec.freed, [0, 0, 0])
            vec[CATEGORIES.index(rec.category)] -= rec.nbytes
    return [Segment(tick, tick, (v[0], v[1], v[2]), 0) for tick, v in sorted(freed.items())]


Insert = tuple[int, Segment, int]
"""(boundary where the copies go, the segment copied, copies)."""


def _inserts(log: StepLog, bounds: Sequence[Vec], repeats: Sequence[Repeat],
             forward_end: int) -> list[Insert]:
    """Where the copies of each repeated layer's segments go, in timeline order."""
    inserts: list[Insert] = []
    for rep in repeats:
        if rep.extra <= 0:
            continue
        fwd = _segment(log, bounds, log.mark("forward_start", rep.key),
                       log.mark("forward_end", rep.key))
        bwd = _segment(log, bounds, log.mark("backward_start", rep.key),
                       log.mark("backward_end", rep.key))
        for seg in (fwd, bwd):
            if seg is not None:
                inserts.append((seg.end, seg, rep.extra))
        if fwd is not None:
            inserts.extend((r.end, r, rep.extra) for r in _released(log, fwd, forward_end))
    inserts.sort(key=lambda item: item[0])
    return inserts


def _shift(inserts: Sequence[Insert], tick: int) -> Vec:
    """What the copies add to the live bytes after op ``tick``."""
    total: Vec = (0, 0, 0)
    for at, seg, n in inserts:
        if tick >= at:
            total = _add(total, seg.delta, n)
    return total


def fold(log: StepLog, repeats: Sequence[Repeat], forward_end: int) -> Folded:
    """The peak and FLOPs of the full model from a run with fewer layers."""
    levels = log.levels()
    bounds = log.boundaries()
    inserts = _inserts(log, bounds, repeats, forward_end)

    def shift(tick: int) -> Vec:
        return _shift(inserts, tick)

    best: tuple[int, Vec, str] | None = None

    def consider(live: Vec, phase: str) -> None:
        nonlocal best
        if best is None or sum(live) > best[0]:
            best = (sum(live), live, phase)

    for tick, live in enumerate(levels):
        consider(_add(live, shift(tick)), "forward" if tick < forward_end else "backward")
    for at, seg, n in inserts:
        base = _add(bounds[at], shift(at - 1))
        phase = "forward" if seg.start < forward_end else "backward"
        for tick in range(seg.start, seg.end):
            inner = _sub(levels[tick], bounds[seg.start])
            consider(_add(base, inner), phase)
            consider(_add(_add(base, inner), seg.delta, n - 1), phase)
    assert best is not None or not levels
    peak = Peak(best[1], best[2]) if best is not None else Peak((0, 0, 0), "forward")
    extra = sum(seg.flops * n for _, seg, n in inserts)
    forward_extra = sum(seg.flops * n for _, seg, n in inserts if seg.start < forward_end)
    end = _add(levels[-1], shift(len(levels))) if levels else (0, 0, 0)
    return Folded(peak, sum(log.tick_flops) + extra, end,
                  sum(log.tick_flops[:forward_end]) + forward_extra)


def live_over_step(log: StepLog, repeats: Sequence[Repeat], forward_end: int
                   ) -> list[tuple[str, int]]:
    """The folded timeline of the full model: (phase, live bytes) after each of its ops,
    every copy of a repeated layer's segments in its place, the same points :func:`fold`
    takes its peak from."""
    levels = log.levels()
    bounds = log.boundaries()
    inserts = _inserts(log, bounds, repeats, forward_end)
    out: list[tuple[str, int]] = []
    pending = list(inserts)
    for tick in range(len(levels) + 1):
        while pending and pending[0][0] == tick:
            at, seg, n = pending.pop(0)
            base = sum(_add(bounds[at], _shift(inserts, at - 1)))
            phase = "forward" if seg.start < forward_end else "backward"
            inner = [sum(_sub(levels[t], bounds[seg.start])) for t in range(seg.start, seg.end)]
            step = sum(seg.delta)
            out += [(phase, base + k * step + x) for k in range(n) for x in inner]
        if tick < len(levels):
            phase = "forward" if tick < forward_end else "backward"
            out.append((phase, sum(_add(levels[tick], _shift(inserts, tick)))))
    return out


def thinned(points: Sequence[tuple[str, int]], most: int) -> list[tuple[str, int]]:
    """At most ``most`` points: consecutive runs, each kept as its highest point (so the
    peak survives), in order."""
    if len(points) <= most:
        return list(points)
    out = []
    for i in range(most):
        run = points[i * len(points) // most:(i + 1) * len(points) // most]
        out.append(max(run, key=lambda p: p[1]))
    return out
