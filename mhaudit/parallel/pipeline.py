"""Pipeline stages of a plan: the layers split over p·v stages by cost, each rank's states,
in-flight activations and receive buffers, its sends, and the schedule's bubble."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from torch import nn

from mhaudit.cost.stepspec import TRAIN, StepSpec
from mhaudit.data import AttentionBlock
from mhaudit.data.parallel import DeviceBytes, ParallelPlan, PipelineCost, PipelineStage
from mhaudit.parallel import analytic
from mhaudit.parallel import schedules as sch
from mhaudit.parallel.experts import expert_shards
from mhaudit.parallel.inventory import ParamInfo, UnitShard, unit_shards
from mhaudit.parallel.roles import unit_of
from mhaudit.parallel.shard import ceil_div
from mhaudit.parallel.unitprofile import ROOT_FIRST, ROOT_LAST, UnitProfile, profile_units

ORACLE_NOTE = ("pipeline from the closed form: torch.distributed.pipelining's schedules "
               "need the model cut into one module per stage that takes the previous "
               "stage's hidden states, which a model's own forward does not offer in "
               "general; tests check the closed form against torch's Schedule1F1B")


@dataclass(frozen=True)
class _Piece:
    """One unit of the pipeline sequence (a layer, or the root's part before or after the
    layers) with its cost on one rank."""

    name: str
    states: analytic.StateBytes
    activations: int
    """Bytes saved for the backward per micro-batch, split by TP."""
    kv_cache: int
    params: frozenset[str] = frozenset()
    """Root parameter names (root parts only)."""
    largest: int = 0
    """Its largest saved tensor per micro-batch, split by TP."""

    @property
    def weight(self) -> int:
        """What the split balances: states plus one micro-batch's activations."""
        s = self.states
        return s.params + s.grads + s.optimizer_states + self.activations + self.kv_cache


def balanced_split(weights: Sequence[int], chunks: int, first: int = 0,
                   last: int = 0) -> tuple[int, ...]:
    """Layers per chunk for ``chunks`` consecutive chunks of at least one layer each that
    minimise the heaviest chunk, ``first`` added to chunk 0 and ``last`` to the final
    chunk: binary search on the bound, each chunk filled greedily (optimal for
    consecutive chunks, since a chunk that starts no later ends no earlier)."""
    n = len(weights)

    def fill(bound: int) -> tuple[int, ...] | None:
        sizes, i = [], 0
        for c in range(chunks):
            load = (first if c == 0 else 0) + (last if c == chunks - 1 else 0)
            start, room = i, n - (chunks - 1 - c)
            while i < room and (i == start or load + weights[i] <= bound):
                load += weights[i]
                i += 1
            if load > bound or (c == chunks - 1 and i < n):
                return None
            sizes.append(i - start)
        return tuple(sizes)

    lo, hi = 0, sum(weights) + first + last
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fill(mid) is not None else (mid + 1, hi)
    best = fill(lo)
    assert best is not None
    return best


def _root_piece(name: str, names: frozenset[str], params: Sequence[ParamInfo],
                spec: StepSpec, plan: ParallelPlan, saved: tuple[int, int]) -> _Piece:
    mine = [p for p in params if not p.unit and p.name in names]
    shards = unit_shards(mine, [""], plan)
    return _Piece(name, analytic.state_bytes(shards, spec, plan), saved[0], 0, names,
                  saved[1])


def _layer_shards(params: Sequence[ParamInfo], layers: Sequence[str], d_model: int,
                  plan: ParallelPlan) -> list[UnitShard]:
    """The shards of ``layers``: each unit's dense parameters, and the routed experts they
    hold, sharded as expert parallelism shards them (none at ep = 1)."""
    mine = [p for p in params if p.experts and p.unit in layers]
    return [*unit_shards(params, layers, plan), *expert_shards(mine, d_model, plan)]


def _pieces(blocks: Sequence[AttentionBlock], params: Sequence[ParamInfo],
            units: Sequence[str], profile: UnitProfile, spec: StepSpec,
            plan: ParallelPlan, m: int) -> list[_Piece]:
    """The root's first part, each layer unit (its routed experts with it), the root's last
    part; activations per
    micro-batch: the profile's, scaled to ⌈b/m⌉ and split as the analytic model splits
    them by TP, or without a profile the analytic per-layer count at that micro-batch."""
    flat = replace(plan, pp=1)
    train = spec.phase == TRAIN
    mb = ceil_div(spec.batch, m)
    paper = replace(spec, activation_bytes=None)
    whole = analytic.activation_bytes(blocks, paper, replace(flat, tp=1, sp=False))
    ratio = analytic.activation_bytes(blocks, paper, flat) / whole if whole else 1.0
    saved = profile.saved_bytes

    def acts(key: str, mine: Sequence[AttentionBlock]) -> tuple[int, int]:
        """(saved bytes, largest saved tensor) per micro-batch on this rank."""
        if not train:
            return 0, 0
        if saved is None:
            return analytic.activation_bytes(mine, replace(paper, batch=mb), flat), 0
        return (int(saved.get(key, 0) * mb / spec.batch * ratio),
                int(profile.largest_bytes.get(key, 0) * mb / spec.batch * ratio))

    out = [_root_piece(ROOT_FIRST, profile.first_params, params, spec, flat,
                       acts(ROOT_FIRST, []))]
    d_model = blocks[0].layout.d_model if blocks else 0
    for unit in units:
        if not unit:
            continue
        mine = [b for b in blocks if unit_of(b.name + ".", units) == unit]
        unit_acts = acts(unit, mine)
        shards = _layer_shards(params, [unit], d_model, flat)
        out.append(_Piece(unit, analytic.state_bytes(shards, spec, flat), unit_acts[0],
                          analytic.kv_cache_bytes(mine, spec, flat), largest=unit_acts[1]))
    out.append(_root_piece(ROOT_LAST, profile.last_params, params, spec, flat,
                           acts(ROOT_LAST, [])))
    return out


@dataclass(frozen=True)
class _Step:
    """What every rank's arithmetic shares."""

    spec: StepSpec
    plan: ParallelPlan
    m: int
    """Micro-batches the step runs."""
    boundary: int
    """Bytes of one micro-batch's hidden states at a stage boundary."""
    logits: int
    """Bytes of one micro-batch's model output (what the last stage returns)."""
    params: Sequence[ParamInfo]
    d_model: int = 0


@dataclass(frozen=True)
class _Rank:
    """What one rank runs and holds."""

    stage: PipelineStage
    held: DeviceBytes
    layer_weight: int


def _rank(rank: int, chunks: Sequence[Sequence[_Piece]], step: _Step) -> _Rank:
    """Rank ``rank``'s stage, as torch's schedules run it: states of its pieces (the root's
    parts merged, a tied weight once); activations of its in-flight chunks plus each
    chunk's output, which the schedule keeps until that chunk's backward (the hidden
    states, the model's output on the last stage); torch's receive buffers, m per
    boundary it receives across (activations forward, gradients back; a received input is
    the buffer, not a copy). The peak is the larger of two moments: the last warm-up
    forward (no gradients yet, zeroed to None between steps) and the steady phase
    (gradients, a backward's transient of twice the largest saved tensor, and the chunks
    still in flight, one fewer when no forward is left)."""
    schedule, p, train = step.plan.pp_schedule, step.plan.pp, step.spec.phase == TRAIN
    v, last = sch.virtual_stages(schedule), p * sch.virtual_stages(schedule) - 1
    mine = [c for c in range(last + 1) if sch.stage_rank(schedule, p, c) == rank]
    pieces = [piece for c in mine for piece in chunks[c]]
    layers = [piece for piece in pieces if piece.name not in (ROOT_FIRST, ROOT_LAST)]
    flat = replace(step.plan, pp=1)
    root_names = frozenset().union(*(piece.params for piece in pieces))
    root = unit_shards([q for q in step.params if not q.unit and q.name in root_names], [""],
                       flat)
    states = analytic.state_bytes([*_layer_shards(step.params, [q.name for q in layers],
                                                  step.d_model, flat), *root], step.spec, flat)
    flight = sch.in_flight_chunks(schedule, p, step.m, rank, train)
    receives = sum(1 for c in mine if c > 0 and sch.stage_rank(schedule, p, c - 1) != rank)
    gives = sum(1 for c in mine if c < last and sch.stage_rank(schedule, p, c + 1) != rank)
    buffers = (receives + (gives if train else 0)) * step.m * step.boundary
    kept = sum(step.boundary if c < last else step.logits for c in mine)
    per_chunk = sum(q.activations for q in pieces) + kept - receives * step.boundary
    activations = flight * per_chunk // v if train else 0
    temps = replace(states, temporaries=states.temporaries + buffers)
    held = analytic.device_bytes(temps, activations, sum(q.kv_cache for q in pieces))
    if train:
        steady = (states.grads + min(flight, step.m * v - 1) * per_chunk // v
                  + 2 * max(q.largest for q in pieces))
        held = replace(held, peak=held.peak - states.grads - activations
                       + max(activations, steady))
        held = replace(held, tensor_peak=held.peak)
    sent = sch.rank_sends(schedule, p, step.m, step.boundary, train)[rank]
    stage = PipelineStage(tuple(q.name for q in layers), held.peak, flight, activations,
                          sent_bytes=sent, rank=rank)
    return _Rank(stage, held, sum(q.weight for q in layers))


@dataclass(frozen=True)
class Staged:
    """A plan's pipeline and what the rest of the plan's cost takes from it."""

    cost: PipelineCost
    held: DeviceBytes
    """The worst rank's bytes: what ``per_device_bytes`` reports."""
    share: float
    """That rank's share of the layers' work, 1/pp when they split evenly."""
    notes: list[str]


def timing(staged: Staged | None) -> dict[str, float]:
    """The step-time arguments of a pipeline (none without one): the bubble, and the share
    of the work on the busiest rank."""
    if staged is None:
        return {}
    return {"bubble": staged.cost.bubble_fraction, "share": staged.share}


def stage_plan(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
               blocks: Sequence[AttentionBlock], params: Sequence[ParamInfo],
               units: Sequence[str], spec: StepSpec, plan: ParallelPlan,
               precision: str) -> Staged | None:
    """The pipeline of ``plan`` on ``model``: its cost, the worst rank's bytes, the share of
    the layers' work on the busiest rank (for the step time) and notes; None when pp is 1.
    """
    if plan.pp <= 1:
        return None
    train = spec.phase == TRAIN
    layer_units = [u for u in units if u]
    sch.check_schedule(plan.pp_schedule, plan.pp, plan.microbatches, len(layer_units),
                       spec.batch, train)
    m = sch.microbatches(plan.microbatches, spec.batch, train)
    v = sch.virtual_stages(plan.pp_schedule)
    profile = profile_units(model, args, kwargs, units, precision)
    pieces = _pieces(blocks, params, units, profile, spec, plan, m)
    first, layers, last = pieces[0], pieces[1:-1], pieces[-1]
    sizes = balanced_split([q.weight for q in layers], plan.pp * v, first.weight, last.weight)
    chunks: list[list[_Piece]] = []
    start = 0
    for size in sizes:
        chunks.append(list(layers[start:start + size]))
        start += size
    chunks[0].insert(0, first)
    chunks[-1].append(last)
    d_model = blocks[0].layout.d_model if blocks else 0
    boundary = sch.boundary_bytes(spec.batch, m, spec.tokens, d_model, spec.compute_bytes,
                                  plan.tp, plan.sp)
    logits = profile.output_bytes * ceil_div(spec.batch, m) // spec.batch
    step = _Step(spec, plan, m, boundary, logits, params, d_model)
    ranks = [_rank(r, chunks, step) for r in range(plan.pp)]
    worst = max(range(plan.pp), key=lambda r: ranks[r].held.peak)
    total = sum(r.layer_weight for r in ranks) or 1
    share = max(r.layer_weight for r in ranks) / total
    tied = sorted(profile.first_params & profile.last_params)
    cost = PipelineCost(
        schedule=plan.pp_schedule, microbatches=m,
        bubble_fraction=sch.bubble_fraction(plan.pp_schedule, plan.pp, m, train),
        stages=tuple(r.stage for r in ranks),
        send_recv_bytes=max(r.stage.sent_bytes for r in ranks),
        uneven=len(set(sizes)) > 1, source="analytic", virtual_stages=v, worst_stage=worst,
        tied_parameters=tuple(tied), timeline=sch.timeline(plan.pp_schedule, plan.pp, m, train))
    return Staged(cost, ranks[worst].held, share, _notes(cost, sizes, profile, plan, m))


def _notes(cost: PipelineCost, sizes: Sequence[int], profile: UnitProfile,
           plan: ParallelPlan, m: int) -> list[str]:
    worst = cost.stages[cost.worst_stage]
    notes = [f"per-device bytes are pipeline rank {cost.worst_stage}'s, the largest peak "
             f"of the {plan.pp} ({len(worst.layers)} layers, {worst.in_flight} "
             f"micro-batch chunks in flight)", ORACLE_NOTE]
    if cost.uneven:
        notes.append(f"the {sum(sizes)} layers do not split evenly over {len(sizes)} "
                     f"stages: {', '.join(map(str, sizes))} layers, balanced on states "
                     "plus one micro-batch's activations")
    if cost.tied_parameters:
        notes.append(f"tied embeddings ({', '.join(cost.tied_parameters)}) run on the first "
                     "and the last stage: each holds a copy, with its gradient and states")
    if m != plan.microbatches:
        notes.append(f"decode splits its batch into {m} micro-batches, not "
                     f"{plan.microbatches}: no more than the batch")
    if profile.why:
        notes.append(f"per-layer activations from the analytic count (Korthikanti et al. "
                     f"2022): {profile.why[:160]}")
    else:
        notes.append("per-layer activations: what one fake forward saves for the backward, "
                     "unit by unit, at ⌈b/m⌉ samples, split by TP as Korthikanti et al. "
                     "2022 split them")
    return notes
