"""Closed-form collectives of a step: TP all-reduces (or SP gathers and scatters), FSDP
all-gathers and reduce-scatters, pipeline sends; bytes each rank sends on ring algorithms."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mhaudit.cost.stepspec import TRAIN, StepSpec
from mhaudit.data.parallel import CollectiveBytes, ParallelPlan
from mhaudit.parallel import schedules
from mhaudit.parallel.inventory import UnitShard
from mhaudit.parallel.roles import COLWISE, TpModule


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


def _tp(tally: _Tally, modules: Sequence[TpModule], spec: StepSpec, plan: ParallelPlan) -> None:
    """Per split module, as torch's Colwise/RowwiseParallel run it: without SP a column-wise
    module all-reduces its input gradient in the backward and a row-wise one its output in
    the forward; with SP each all-gathers or reduce-scatters along the sequence instead,
    forward and backward."""
    t = plan.tp
    train = spec.phase == TRAIN
    rows = spec.batch * spec.tokens * spec.compute_bytes
    for mod in modules:
        if mod.replicated:
            continue
        width = mod.in_features if mod.role == COLWISE else mod.out_features
        size = rows * width
        if plan.sp:
            tally.add("all_gather" if mod.role == COLWISE else "reduce_scatter",
                      gather_sent(size, t))
            if train:
                tally.add("reduce_scatter" if mod.role == COLWISE else "all_gather",
                          gather_sent(size, t))
        elif mod.role != COLWISE or train:
            tally.add("all_reduce", all_reduce_sent(size, t))


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
    """Bytes sent inside the FSDP group."""
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
    if plan.pp > 1:
        _pipeline(groups[2], d_model, spec, plan)
    merged = _Tally({}, {})
    for group in groups:
        for kind, sent in group.bytes.items():
            merged.add(kind, sent, group.calls[kind])
    tp, fsdp, pp, ep, cp = (sum(g.bytes.values()) for g in groups)
    return StepComm(CollectiveBytes(**merged.bytes), CollectiveBytes(**merged.calls),
                    tp, fsdp, pp, ep, cp)
