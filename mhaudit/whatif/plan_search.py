"""The cheapest plan that fits: every TP × CP × PP × (FSDP, HSDP, DDP) × EP split of a GPU
count, with each activation-checkpointing choice, costed per device and ranked by step time.

A plan is dropped when a rule calls it an error at its tensor-parallel degree (heads that
do not shard) or when its peak per device, memory beyond tensors included, exceeds the
GPU; the others are ranked by throughput (step time per sample across the GPUs), the
best marked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from mhaudit import units
from mhaudit.data.parallel import ParallelCost, ParallelPlan
from mhaudit.data.parallel_sweep import PlanEntry
from mhaudit.errors import ConfigError

CHECKPOINTING = ("none", "selective", "layers")
"""Activation checkpointing a training plan may use, as ``--checkpointing`` names it: none,
Korthikanti et al.'s selective recomputation (the attention core), or full recomputation
of every repeated layer from its input."""
MICROBATCHES_PER_STAGE = 4
"""Micro-batches per pipeline stage a searched plan runs (m = 4·p keeps the 1F1B bubble,
(p − 1)/(m + p − 1), under 20%), as many as the batch has sequences."""
MIN_CP_TOKENS = 1024
"""Fewest tokens per rank a context-parallel split keeps (ring attention hides its K/V
exchange behind a chunk's compute only when chunks are long)."""


@dataclass(frozen=True)
class ModelShape:
    """What the search needs to know of a model to propose plans."""

    layers: int
    """Repeated layers: the most pipeline stages there can be."""
    seq_len: int
    """Tokens per sequence: what context parallelism splits."""
    experts: int = 0
    """Routed experts per expert layer (the fewest of any layer); 0 for a dense model."""
    batch: int = 1
    """Sequences per step and replica: what pipeline micro-batches split."""


def _powers(limit: int, divides: int) -> list[int]:
    """1, 2, 4, ... up to ``limit``, each a divisor of ``divides``."""
    out, d = [], 1
    while d <= limit:
        if divides % d == 0:
            out.append(d)
        d *= 2
    return out


def _data_splits(ranks: int, tp: int, node: int) -> list[tuple[int, int]]:
    """(fsdp, dp) splits of the data ranks: fully sharded; sharded inside a node and
    replicated across (HSDP); replicated (DDP)."""
    splits = [(ranks, 1), (1, ranks)]
    inside = max(1, node // tp)
    if 1 < inside < ranks and ranks % inside == 0:
        splits.insert(1, (inside, ranks // inside))
    return list(dict.fromkeys(splits))


def _microbatches(pp: int, batch: int) -> int:
    """m for a p-stage 1F1B plan: 4·p, at most one sequence each."""
    return min(MICROBATCHES_PER_STAGE * pp, batch) if pp > 1 else 1


def _expert_degrees(experts: int, ranks: int) -> list[int]:
    """EP degrees for ``experts`` routed experts over ``ranks`` data ranks: powers of two
    dividing both (1 alone for a dense model)."""
    return [d for d in _powers(max(1, min(experts, ranks)), ranks)
            if not experts or experts % d == 0]


def candidate_plans(gpus: int, shape: ModelShape, *, gpus_per_node: int = 8,
                    max_tp: int = 64, sp_only: bool = False) -> Iterator[ParallelPlan]:
    """Every plan of exactly ``gpus`` GPUs the search tries: t a power of two inside a node
    (with and without SP, or with SP only), CP where each rank keeps at least
    :data:`MIN_CP_TOKENS` tokens, pipeline stages up to the layer count and the batch
    (1F1B, 4 micro-batches per stage as the batch allows), the data ranks fully sharded,
    HSDP or replicated, and EP over every power of two that divides both the data ranks
    and the experts."""
    for tp in _powers(min(gpus, max_tp, gpus_per_node), gpus):
        for cp in _powers(max(1, shape.seq_len // MIN_CP_TOKENS), gpus // tp):
            # 1F1B needs at least p micro-batches of one sequence or more
            for pp in _powers(max(1, min(shape.layers, shape.batch)), gpus // (tp * cp)):
                ranks = gpus // (tp * cp * pp)
                for fsdp, dp in _data_splits(ranks, tp, gpus_per_node):
                    for ep in _expert_degrees(shape.experts, fsdp * dp * cp):
                        for sp in ((True,) if sp_only or tp == 1 else (False, True)):
                            yield ParallelPlan(
                                tp=tp, sp=sp and tp > 1, cp=cp, fsdp=fsdp, dp=dp, ep=ep,
                                pp=pp, microbatches=_microbatches(pp, shape.batch))


def dropped_reason(cost: ParallelCost, memory_bytes: int) -> str | None:
    """Why a plan is not offered: a rule's error, or a peak over the GPU's memory."""
    errors = [n for n in cost.notes if " error on " in n]
    if errors:
        return errors[0]
    if cost.per_device_bytes.peak > memory_bytes:
        return (f"does not fit: peak {units.nbytes(cost.per_device_bytes.peak)} per GPU > "
                f"{units.nbytes(memory_bytes)}")
    return None


def time_per_sample(cost: ParallelCost) -> float:
    """Step time over the samples a step takes across the GPUs: each of the fsdp · dp data
    replicas runs its own batch, while tp, cp and pp ranks share one; the lower, the more
    throughput (the same order as MFU, the GPU count being fixed)."""
    return cost.step_time_s / (cost.plan.fsdp * cost.plan.dp)


def ranked(entries: Sequence[PlanEntry], memory_bytes: int) -> tuple[PlanEntry, ...]:
    """The entries with their ``dropped`` reasons, the plans offered first by throughput
    (:func:`time_per_sample`; ties: less memory), the best marked; dropped plans after, in
    search order."""
    judged = [replace(e, dropped=dropped_reason(e.cost, memory_bytes)) for e in entries]
    offered = sorted((e for e in judged if e.dropped is None),
                     key=lambda e: (time_per_sample(e.cost), e.cost.per_device_bytes.peak))
    if offered:
        offered[0] = replace(offered[0], best=True)
    return (*offered, *(e for e in judged if e.dropped is not None))


def search(cost_of: Callable[[ParallelPlan, str], ParallelCost], gpus: int, shape: ModelShape,
           memory_bytes: int, *, train: bool, gpus_per_node: int = 8, max_tp: int = 64,
           sp_only: bool = False, limit: int = 4096) -> tuple[PlanEntry, ...]:
    """Cost every candidate plan (and, in training, each checkpointing choice) with
    ``cost_of(plan, checkpointing)`` and rank them; ConfigError past ``limit`` plans."""
    choices = CHECKPOINTING if train else ("none",)
    plans = list(candidate_plans(gpus, shape, gpus_per_node=gpus_per_node, max_tp=max_tp,
                                 sp_only=sp_only))
    if len(plans) * len(choices) > limit:
        raise ConfigError(f"{len(plans) * len(choices):,} plans to cost for {gpus:,} GPUs",
                          "Give fewer GPUs, or --parallel one plan to cost it alone.")
    entries = [PlanEntry(cost_of(plan, choice), choice) for plan in plans for choice in choices]
    return ranked(entries, memory_bytes)
