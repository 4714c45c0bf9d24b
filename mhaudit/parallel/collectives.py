"""Closed-form collectives of a step: TP all-reduces (or SP gathers and scatters), FSDP
all-gathers and reduce-scatters, pipeline sends; bytes each rank sends on ring algorithms."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mhaudit.cost.stepspec import TRAIN, StepSpec
from mhaudit.data.parallel import CollectiveBytes, ParallelPlan
from mhaudit.parallel import schedules
from mhaudit.parallel.inventory import UnitShard
from mhaudit.parallel.roles import COLWISE, EMBEDDING, ROWWISE, SEQUENCE, TpModule
from mhaudit.parallel.shard import ceil_div


@dataclass
class _Tally:
    bytes: dict[str, int]
    calls: dict[str, int]

    def add(self, kind: str, sent: int, calls: int = 1) -> None:
        self.bytes[kind] = self.bytes.get(kind, 0) + sent
        self.calls[kind] = self.calls.get(kind, 0) + calls


def all_reduce_sent(size_bytes: int, group: int) -> int:
    """Bytes one rank sends in a ring all-reduce of ``size_bytes``: 2·(g−1)/g·S."""
    return 2 * (group - 1) * size_bytes // group


def gather_sent(gathered_bytes: int, group: int) -> int:
    """Bytes one rank sends in a ring all-gather (or reduce-scatter) whose gathered
    tensor has ``gathered_bytes``: (g−1)/g·S."""
    return (group - 1) * gathered_bytes // group


def stream_bytes(spec: StepSpec, plan: ParallelPlan) -> int:
    """Bytes per element of the residual stream (embedding output, norms, residual adds):
    the compute precision where the parameters themselves are cast (FSDP's
    MixedPrecisionPolicy, or bf16 weights), the stored one under autocast alone (bf16-mixed
    without FSDP keeps fp32 weights, so only the linears' outputs are bf16)."""
    return spec.compute_bytes if plan.fsdp * plan.dp > 1 else spec.param_bytes


def _sp(tally: _Tally, mod: TpModule, spec: StepSpec, plan: ParallelPlan,
        at_norms: bool) -> None:
    """One module under SP, its sequence split in shards of ⌈s/t⌉ positions (DTensor pads
    them): a row-wise projection, and the embedding, reduce-scatter their output along the
    sequence (forward) and all-gather its gradient (backward); a norm whose output feeds
    projections all-gathers it (forward) and reduce-scatters its gradient (backward), and
    its weight gradients, partial sums over the shards, are all-reduced once per tensor;
    the head all-gathers its logits (forward only), each rank's ⌈V/t⌉ columns. Column-wise
    projections gather their own input only where no norm does (``at_norms`` False).
    Linear outputs move at the compute precision, the rest at :func:`stream_bytes`."""
    t, stream = plan.tp, stream_bytes(spec, plan)
    positions = spec.batch * ceil_div(spec.tokens, t) * t
    if mod.role in (ROWWISE, EMBEDDING):
        size = positions * mod.out_features * (
            spec.compute_bytes if mod.role == ROWWISE else stream)
        kinds = ("reduce_scatter", "all_gather")
    elif (mod.role == SEQUENCE and mod.output_gathered) or (
            mod.role == COLWISE and not at_norms):
        size, kinds = positions * mod.in_features * stream, ("all_gather", "reduce_scatter")
    else:
        size, kinds = 0, ("", "")
    if size:
        tally.add(kinds[0], gather_sent(size, t))
        if spec.phase == TRAIN:
            tally.add(kinds[1], gather_sent(size, t))
    if mod.role == COLWISE and mod.output_gathered:
        rows = spec.batch * spec.tokens * spec.compute_bytes
        tally.add("all_gather", gather_sent(rows * ceil_div(mod.out_features, t) * t, t))
    if mod.role == SEQUENCE and spec.phase == TRAIN:
        tensors = mod.out_features // mod.in_features
        tally.add("all_reduce", tensors * all_reduce_sent(mod.in_features * stream, t),
                  tensors)


def _tp(tally: _Tally, modules: Sequence[TpModule], spec: StepSpec, plan: ParallelPlan) -> None:
    """Per split module, as torch's Colwise/RowwiseParallel run it: without SP a column-wise
    module all-reduces its input gradient (at :func:`stream_bytes`) in the backward and a
    row-wise one its output (at the compute precision) in the forward; with SP they gather
    and scatter along the sequence instead (:func:`_sp`), at the norms where the plan has
    them (:mod:`mhaudit.parallel.seqpar`)."""
    t = plan.tp
    train = spec.phase == TRAIN
    rows = spec.batch * spec.tokens
    at_norms = any(m.role == SEQUENCE for m in modules)
    for mod in modules:
        if mod.replicated:
            continue
        if plan.sp:
            _sp(tally, mod, spec, plan, at_norms)
        elif mod.role == ROWWISE:
            tally.add("all_reduce", all_reduce_sent(
                rows * mod.out_features * spec.compute_bytes, t))
        elif mod.role == COLWISE and train:
            tally.add("all_reduce", all_reduce_sent(
                rows * mod.in_features * stream_bytes(spec, plan), t))


def _fsdp(tally: _Tally, shards: Sequence[UnitShard], spec: StepSpec, plan: ParallelPlan) -> None:
    """FSDP2: each unit all-gathers its parameters (at the compute precision) in the forward
    and, resharded after it, again in the backward (not the root, which stays unsharded);
    its gradients are reduce-scattered once, at the stored precision (fp32 under
    bf16-mixed). A rank sends (f−1) shards of each, f the unit's group (routed experts:
    their own, :func:`~mhaudit.parallel.experts.shard_group`)."""
    train = spec.phase == TRAIN
    for unit in shards:
        f = unit.group or plan.fsdp
        if not unit.shard_elements or f == 1:
            continue
        sent = (f - 1) * unit.shard_elements
        gathers = 2 if train and unit.unit else 1
        tally.add("all_gather", sent * spec.compute_bytes * gathers, gathers)
        if train:
            tally.add("reduce_scatter", sent * spec.param_bytes)


def _replicas(tally: _Tally, shards: Sequence[UnitShard], spec: StepSpec,
              plan: ParallelPlan) -> None:
    """Replicas (HSDP's replicate dim, or DDP without shards): each unit's gradient shard,
    once reduce-scattered within its FSDP group, is all-reduced across the ``dp`` replicas
    at the stored precision: 2·(dp−1)/dp of the shard. torch's composable ``replicate``
    all-reduces unit by unit; DDP's 25 MiB buckets send the same bytes in other calls."""
    if spec.phase != TRAIN:
        return
    for unit in shards:
        if unit.shard_elements:
            tally.add("all_reduce", all_reduce_sent(unit.shard_elements * spec.param_bytes,
                                                    plan.dp))


def _pipeline(tally: _Tally, d_model: int, spec: StepSpec, plan: ParallelPlan) -> None:
    """The busiest pipeline rank's sends: m micro-batches of ⌈b/m⌉·s·d activations
    forward over each stage boundary it has and, in training, their gradients back
    (:func:`schedules.rank_sends`); one call per micro-batch and boundary."""
    train = spec.phase == TRAIN
    m = schedules.microbatches(plan.microbatches, spec.batch, train)
    size = schedules.boundary_bytes(spec.batch, m, spec.tokens, d_model, spec.compute_bytes,
                                    plan.tp, plan.sp)
    sent = max(schedules.rank_sends(plan.pp_schedule, plan.pp, m, size, train))
    tally.add("send_recv", sent, sent // size if size else 0)


_GROUPS = {"tp": 0, "fsdp": 1, "pp": 2, "ep": 3, "cp": 4}
"""Index of each group's tally in :func:`collectives`."""


@dataclass(frozen=True)
class StepComm:
    """A step's collectives: totals by kind, and the bytes of each group."""

    sent: CollectiveBytes
    """Bytes each rank sends, by collective."""
    calls: CollectiveBytes
    """Calls, by collective."""
    tp_bytes: int
    """Bytes sent inside the TP group (NVLink within a node)."""
    fsdp_bytes: int
    """Bytes sent inside the data-parallel groups (FSDP shards and replicas)."""
    pp_bytes: int
    """Bytes sent between pipeline stages."""
    ep_bytes: int = 0
    """Bytes of the experts' all-to-alls (dispatch and combine)."""
    cp_bytes: int = 0
    """Bytes of the context-parallel ring (K/V and their gradients)."""


def collectives(modules: Sequence[TpModule], shards: Sequence[UnitShard], d_model: int,
                spec: StepSpec, plan: ParallelPlan,
                more: Sequence[tuple[str, str, int, int]] = ()) -> StepComm:
    """Every collective of one step on one rank under ``plan``; ``more`` adds (group, kind,
    bytes, calls) rows of the ``tp``, ``ep`` and ``cp`` groups (routed experts'
    all-to-alls, :func:`~mhaudit.parallel.experts.expert_traffic`; the ring of
    :func:`~mhaudit.parallel.context.ring_traffic`)."""
    groups = [_Tally({}, {}) for _ in range(5)]
    for name, kind, sent, calls in more:
        groups[_GROUPS[name]].add(kind, sent, calls)
    if plan.tp > 1:
        _tp(groups[0], modules, spec, plan)
    if plan.fsdp > 1:
        _fsdp(groups[1], shards, spec, plan)
    if plan.dp > 1:
        _replicas(groups[1], shards, spec, plan)
    if plan.pp > 1:
        _pipeline(groups[2], d_model, spec, plan)
    merged = _Tally({}, {})
    for group in groups:
        for kind, sent in group.bytes.items():
            merged.add(kind, sent, group.calls[kind])
    tp, fsdp, pp, ep, cp = (sum(g.bytes.values()) for g in groups)
    return StepComm(CollectiveBytes(**merged.bytes), CollectiveBytes(**merged.calls),
                    tp, fsdp, pp, ep, cp)
