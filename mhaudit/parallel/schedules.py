"""Pipeline schedules in closed form: bubble, forward chunks in flight per rank, where each
virtual stage runs, the point-to-point bytes each rank sends, and the constraints torch's
schedule classes enforce."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from mhaudit.errors import ConfigError

GPIPE, ONE_F_ONE_B, INTERLEAVED, ZERO_BUBBLE, DUALPIPEV = (
    "gpipe", "1f1b", "interleaved-1f1b", "zero-bubble", "dualpipev")

TORCH_CLASSES = {GPIPE: "ScheduleGPipe", ONE_F_ONE_B: "Schedule1F1B",
                 INTERLEAVED: "ScheduleInterleaved1F1B",
                 ZERO_BUBBLE: "ScheduleInterleavedZeroBubble", DUALPIPEV: "ScheduleDualPipeV"}
"""The torch.distributed.pipelining class each schedule name stands for."""

VIRTUAL_STAGES = {GPIPE: 1, ONE_F_ONE_B: 1, INTERLEAVED: 2, ZERO_BUBBLE: 2, DUALPIPEV: 2}
"""Stages per rank v. DualPipeV requires exactly two (torch raises otherwise); the
interleaved schedules take any v, and two is what is costed."""


def virtual_stages(schedule: str) -> int:
    """v, the stages each rank runs under ``schedule``."""
    return VIRTUAL_STAGES[schedule]


def stage_rank(schedule: str, pp: int, stage: int) -> int:
    """The rank that runs virtual stage ``stage`` of ``pp · v``: round robin ("loop", stage
    i on rank i mod p) for the interleaved schedules, a V for DualPipeV (stage i on rank i,
    then back from rank p − 1 to 0), as torch's ``generate_stage_to_rank_mapping`` places
    them."""
    if schedule == DUALPIPEV and stage >= pp:
        return 2 * pp - 1 - stage
    return stage % pp


def bubble_fraction(schedule: str, pp: int, m: int, train: bool) -> float:
    """Share of the step each rank idles, with forward, input-backward and weight-backward
    of one chunk equally long:

    - GPipe, 1F1B and every schedule in decode (forward only): (p − 1)/(m + p − 1), i.e.
      (p − 1)/m of the ideal time (Narayanan et al. 2021, §2.2);
    - interleaved 1F1B with v stages per rank: (p − 1)/(v·m + p − 1), the bubble shrunk
      v-fold (Narayanan et al. 2021, §2.2.1);
    - zero-bubble and DualPipeV: (p − 1)/(3m + p − 1), the ZB1P and DualPipeV rows of the
      DualPipe README, (p − 1)(F + B − 2W) and (p/2 − 1)(F&B + B − 3W) on 2p half-size
      chunks, with F = W = B/2 and F&B = F + B (no credit for overlapping compute with
      compute), i.e. one third of 1F1B's (Qi et al. 2024, ZB-H1).
    """
    if pp <= 1:
        return 0.0
    idle = pp - 1
    if not train or schedule in (GPIPE, ONE_F_ONE_B):
        return idle / (m + idle)
    if schedule == INTERLEAVED:
        return idle / (virtual_stages(schedule) * m + idle)
    return idle / (3 * m + idle)


def interleaved_warmup(pp: int, m: int, rank: int, v: int) -> int:
    """Forwards rank ``rank`` runs before its first backward under interleaved 1F1B, as
    torch's ``_get_warmup_ops`` counts them: (v − 1)·(micro-batches per round) + 2 per hop
    from the last rank, at most m·v (rounds = max(1, ⌊m/p⌋))."""
    per_round = m // max(1, m // pp)
    return min((v - 1) * per_round + 2 * (pp - 1 - rank), m * v)


def in_flight_chunks(schedule: str, pp: int, m: int, rank: int, train: bool) -> int:
    """Forward chunks (one micro-batch through one of the rank's v stages) whose activations
    rank ``rank`` holds at its peak: GPipe all m; 1F1B min(m, p − rank) (the first rank
    keeps p); interleaved 1F1B its warm-up forwards plus the steady phase's one more, at
    most m·v; zero-bubble and DualPipeV the most torch's own action list for the rank keeps
    between a chunk's forward and its weight backward (an upper bound: the input backward
    frees part of them), or, where that list cannot be read, the DualPipe README's p·v + 1.
    In decode nothing is kept for a backward: 1."""
    v = virtual_stages(schedule)
    if not train:
        return 1
    if schedule == GPIPE:
        return m
    if schedule == ONE_F_ONE_B:
        return min(m, pp - rank)
    if schedule == INTERLEAVED:
        return min(interleaved_warmup(pp, m, rank, v) + 1, m * v)
    return min(_torch_peak(schedule, pp, m, rank) or pp * v + 1, m * v)


def _torch_peak(schedule: str, pp: int, m: int, rank: int) -> int | None:
    """The most chunks alive between F and W (or a full B) in the action list torch's
    schedule class builds for ``rank``; None where that private API is not there."""
    try:
        from torch.distributed.pipelining import schedules as torch_schedules

        cls: Any = getattr(torch_schedules, TORCH_CLASSES[schedule])
        rounds = max(1, m // pp)
        v = virtual_stages(schedule)
        spec = SimpleNamespace(pp_group_size=pp, n_local_stages=v, _n_microbatches=m,
                               number_of_rounds=rounds, microbatches_per_round=m // rounds,
                               num_stages=pp * v, _num_stages=pp * v)
        actions = cls._calculate_single_rank_operations(spec, rank)
        kinds = torch_schedules
    except Exception:  # a private API of torch's: any failure means "not readable"
        return None
    alive = best = 0
    for action in actions:
        for step in (getattr(action, "sub_actions", None) or (action,)) if action else ():
            if step.computation_type == kinds.F:
                alive += 1
            elif step.computation_type in (kinds.B, kinds.W):
                alive -= 1
            best = max(best, alive)
    return best


def rank_sends(schedule: str, pp: int, m: int, boundary_bytes: int,
               train: bool) -> tuple[int, ...]:
    """Bytes each rank sends per step: for every boundary between consecutive virtual
    stages on different ranks, the earlier stage's rank sends m activations of
    ``boundary_bytes`` forward and, in training, the later one's rank m gradients of the
    same size back. A V's turn (stages p − 1 and p on one rank) passes locally."""
    v = virtual_stages(schedule)
    sent = [0] * pp
    for stage in range(pp * v - 1):
        here, there = stage_rank(schedule, pp, stage), stage_rank(schedule, pp, stage + 1)
        if here == there:
            continue
        sent[here] += m * boundary_bytes
        if train:
            sent[there] += m * boundary_bytes
    return tuple(sent)


def check_schedule(schedule: str, pp: int, m: int, layers: int, batch: int,
                   train: bool) -> None:
    """ConfigError for a plan torch's schedule class refuses, or that has fewer layers than
    stages or fewer samples than micro-batches."""
    v = virtual_stages(schedule)
    cls = TORCH_CLASSES[schedule]
    if layers < pp * v:
        raise ConfigError(f"pp={pp} with {schedule} needs {pp * v} stages of at least one "
                          f"layer each, and the model has {layers} layers",
                          "Lower pp or pick a schedule with one stage per rank.")
    if train and batch < m:
        raise ConfigError(f"microbatches={m} exceeds the batch of {batch} it splits",
                          "Lower microbatches or raise --batch-size.")
    if not train:
        return
    rounds = max(1, m // pp)
    if schedule == ONE_F_ONE_B and m < pp:
        raise ConfigError(f"{cls} needs at least as many micro-batches as stages "
                          f"({m} < pp={pp})", f"Set microbatches to {pp} or more.")
    if schedule in (INTERLEAVED, ZERO_BUBBLE) and m % rounds:
        raise ConfigError(f"{cls} needs microbatches a multiple of its rounds "
                          f"max(1, m // pp) = {rounds}, and m = {m}",
                          f"Use a multiple of pp={pp}, e.g. microbatches={rounds * pp}.")
    if schedule == DUALPIPEV and m < pp * v:
        raise ConfigError(f"{cls} needs at least as many micro-batches as its {pp * v} "
                          f"stages, and m = {m}", f"Set microbatches to {pp * v} or more.")


def microbatches(m: int, batch: int, train: bool) -> int:
    """Micro-batches a step runs: the plan's m in training (checked against the batch), at
    most the batch in decode, whose micro-batches are the decode batch split."""
    return m if train else max(1, min(m, batch))


def boundary_bytes(batch: int, m: int, tokens: int, d_model: int, element_bytes: int,
                   tp: int, sp: bool) -> int:
    """One micro-batch's hidden states at a stage boundary: ⌈b/m⌉·s·d elements (torch's
    ``tensor_split`` makes the first micro-batches the larger), split over t with SP."""
    size = -(-batch // m) * tokens * d_model * element_bytes
    return -(-size // tp) if sp else size


BACKWARD_COST = 2.0
"""A micro-batch's backward through a stage takes twice its forward (two matmuls per
forward one), the ratio Narayanan et al. use for the bubble."""

Segment = tuple[str, float]


def _order(schedule: str, pp: int, m: int, rank: int, train: bool) -> list[tuple[str, int]]:
    """The ops rank ``rank`` runs, in its own order: GPipe every forward then every
    backward; 1F1B p − r − 1 warm-up forwards, then one forward and one backward in turn,
    then the remaining backwards; a forward-only step just the forwards."""
    forwards = [("forward", i) for i in range(m)]
    if not train:
        return forwards
    backwards = [("backward", i) for i in range(m)]
    if schedule == GPIPE:
        return forwards + backwards
    warm = min(pp - rank - 1, m)
    ops = forwards[:warm]
    for i in range(warm, m):
        ops += [forwards[i], backwards[i - warm]]
    return ops + backwards[m - warm:]


def timeline(schedule: str, pp: int, m: int, train: bool) -> tuple[tuple[Segment, ...], ...]:
    """Each rank's step as (``forward`` | ``backward`` | ``idle``, duration) segments, in
    units of one micro-batch's forward through one stage: a forward waits for the same
    micro-batch's forward on the rank before, a backward for its backward on the rank
    after (the last rank's for its own forward). Drawn for GPipe and 1F1B (one stage per
    rank); empty for the schedules that interleave stages."""
    if schedule not in (GPIPE, ONE_F_ONE_B) or pp < 2:
        return ()
    orders = [_order(schedule, pp, m, r, train) for r in range(pp)]
    done: dict[tuple[str, int, int], float] = {}
    clock, nxt = [0.0] * pp, [0] * pp
    runs: list[list[tuple[str, float, float]]] = [[] for _ in range(pp)]
    while any(nxt[r] < len(orders[r]) for r in range(pp)):
        for r in range(pp):
            if nxt[r] == len(orders[r]):
                continue
            kind, i = orders[r][nxt[r]]
            dep = (("forward", r - 1, i) if kind == "forward" and r > 0 else
                   ("backward", r + 1, i) if kind == "backward" and r < pp - 1 else
                   ("forward", r, i) if kind == "backward" else None)
            if dep is not None and dep not in done:
                continue
            start = max(clock[r], done[dep] if dep is not None else 0.0)
            end = start + (BACKWARD_COST if kind == "backward" else 1.0)
            runs[r].append((kind, start, end))
            done[(kind, r, i)] = clock[r] = end
            nxt[r] += 1
    span = max(clock)
    return tuple(_segments(run, span) for run in runs)


def _segments(run: list[tuple[str, float, float]], span: float) -> tuple[Segment, ...]:
    out: list[Segment] = []
    at = 0.0
    for kind, start, end in run:
        if start > at:
            out.append(("idle", start - at))
        out.append((kind, end - start))
        at = end
    if span > at:
        out.append(("idle", span - at))
    return tuple(out)
