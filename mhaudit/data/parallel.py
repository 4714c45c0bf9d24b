"""Parallel plans and what one device holds, sends and spends in a step under them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SOURCES = ("torch.distributed", "analytic")
"""Where a parallel cost comes from: the plan applied to the model on a fake process
group, or the closed-form model."""


@dataclass(frozen=True)
class ParallelPlan:
    """How a step is spread over GPUs: tensor, sequence, fully-sharded data and pipeline
    parallelism."""

    tp: int = 1
    """Tensor-parallel degree t: heads and MLP columns split over t GPUs."""
    sp: bool = False
    """Sequence parallelism beside TP: norms, dropouts and residuals split along the
    sequence over the same t GPUs."""
    fsdp: int = 1
    """Fully-sharded data-parallel degree (FSDP2 / ZeRO-3): parameters, gradients and
    optimizer states sharded over this many GPUs, each running its own micro-batch."""
    pp: int = 1
    """Pipeline stages: the layers split into this many consecutive groups."""

    @property
    def world_size(self) -> int:
        """GPUs the plan uses: tp · fsdp · pp."""
        return self.tp * self.fsdp * self.pp

    def text(self) -> str:
        """The plan in the ``--parallel`` grammar, e.g. ``tp=8,sp,fsdp=8,pp=1``."""
        sp = ",sp" if self.sp else ""
        return f"tp={self.tp}{sp},fsdp={self.fsdp},pp={self.pp}"


@dataclass(frozen=True)
class DeviceBytes:
    """Bytes one GPU holds under a plan, by what they hold; parts a phase lacks are 0."""

    params: int
    """This rank's parameter shard (FSDP's padded dim-0 shard of its TP slice)."""
    grads: int
    """This rank's gradient shard, as reduce-scattered (0 outside training)."""
    optimizer_states: int
    """Optimizer states of this rank's parameter shard (0 outside training)."""
    activations: int
    """Activations saved for the backward on this rank, split by TP and SP."""
    kv_cache: int
    """KV cache on this rank (KV heads replicated when t > h_kv); 0 in training."""
    temporaries: int
    """FSDP's gathered parameters and collective buffers at the peak: the root unit's, and
    the largest layer's twice (running and prefetched)."""
    peak: int
    """Peak bytes of the step on this rank: torch's measured peak, or the analytic sum of
    the parts (which leaves out the optimizer update's temporaries)."""


@dataclass(frozen=True)
class CollectiveBytes:
    """Per-step figures of each collective, one field per kind."""

    all_gather: int = 0
    reduce_scatter: int = 0
    all_reduce: int = 0
    all_to_all: int = 0
    send_recv: int = 0
    """Point-to-point sends (pipeline boundaries)."""

    @property
    def total(self) -> int:
        """Sum over the kinds."""
        return (self.all_gather + self.reduce_scatter + self.all_reduce + self.all_to_all
                + self.send_recv)


@dataclass(frozen=True)
class ParallelCost:
    """One phase (training or decode step) under one plan, per device."""

    plan: ParallelPlan
    """The plan costed."""
    phase: str
    """``train`` or ``decode``."""
    per_device_bytes: DeviceBytes
    """What each rank holds."""
    comm_bytes_per_step: CollectiveBytes
    """Bytes each rank sends per step, by collective (ring algorithms: an all-reduce of S
    bytes sends 2·(g−1)/g·S, an all-gather or reduce-scatter of S gathered bytes
    (g−1)/g·S, over the g ranks of its group)."""
    comm_calls_per_step: CollectiveBytes
    """Collective calls per step, by kind."""
    step_time_s: float
    """Compute time on the target plus the communication not hidden behind it, seconds:
    a lower bound."""
    fits: bool
    """True when ``per_device_bytes.peak`` fits the target's memory."""
    max_batch_size: int | None
    """Largest micro-batch per data-parallel replica that fits (0 when nothing does);
    None when no held bytes grow with the batch."""
    source: str
    """``torch.distributed`` or ``analytic`` (see :data:`SOURCES`)."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """How the figures were obtained, and why the analytic model was used where it was."""
    analytic_activations: int | None = None
    """The analytic model's activations per rank (Korthikanti et al.'s split) beside the
    figure torch measured, when ``source`` is ``torch.distributed``; None otherwise."""


def parallel_to_dict(cost: ParallelCost) -> dict[str, Any]:
    """The JSON object of one phase's ``parallel`` field (binding names, additive extras)."""
    plan = asdict(cost.plan)
    plan["world_size"] = cost.plan.world_size
    return {
        "plan": plan,
        "per_device_bytes": asdict(cost.per_device_bytes),
        "comm_bytes_per_step": asdict(cost.comm_bytes_per_step),
        "comm_calls_per_step": asdict(cost.comm_calls_per_step),
        "step_time_s": cost.step_time_s,
        "fits": cost.fits,
        "max_batch_size": cost.max_batch_size,
        "source": cost.source,
        "notes": list(cost.notes),
        "analytic_activations": cost.analytic_activations,
    }
