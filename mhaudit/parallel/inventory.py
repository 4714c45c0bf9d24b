"""The model's parameters as a plan sees them: shape, FSDP unit and TP module of each."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torch import nn

from mhaudit.data.parallel import ParallelPlan
from mhaudit.parallel.roles import TpModule, unit_of
from mhaudit.parallel.shard import elements, fsdp_shard_elements, tp_local_shape


@dataclass(frozen=True)
class ParamInfo:
    """One parameter tensor (tied weights listed once)."""

    name: str
    shape: tuple[int, ...]
    unit: str
    """FSDP unit owning it (``""`` for the root)."""
    module: TpModule | None
    """The TP module it belongs to; None when the plan replicates it."""
    is_bias: bool
    experts: int = 0
    """E when the tensor stacks a routed-expert layer's E experts (sharded by
    :mod:`mhaudit.parallel.experts`, not with its unit); 0 otherwise."""


@dataclass(frozen=True)
class UnitShard:
    """Elements of one FSDP unit on one rank."""

    unit: str
    shard_elements: int
    """This rank's padded FSDP shard of the unit's TP-local parameters."""
    gathered_elements: int
    """The unit's TP-local parameters as one all-gather returns them (padding included)."""
    tensors: int
    """Parameter tensors in the unit."""
    group: int = 0
    """Ranks its FSDP shards span when not ``plan.fsdp`` (routed experts); 0 for fsdp."""


def inventory(model: nn.Module, modules: Sequence[TpModule], units: Sequence[str],
              routed: Mapping[str, int] | None = None) -> tuple[ParamInfo, ...]:
    """Every parameter with its unit and TP module; ``routed`` maps the stacked tensors
    of routed experts to their E (:func:`mhaudit.parallel.experts.routed_tensors`)."""
    by_name = {m.name: m for m in modules}
    out = []
    for name, param in model.named_parameters():
        owner, _, leaf = name.rpartition(".")
        out.append(ParamInfo(name, tuple(param.shape), unit_of(name, units),
                             by_name.get(owner), leaf == "bias",
                             (routed or {}).get(name, 0)))
    return tuple(out)


def unit_shards(params: Sequence[ParamInfo], units: Sequence[str],
                plan: ParallelPlan) -> tuple[UnitShard, ...]:
    """Per-unit shard and gathered elements under ``plan`` (TP first, then FSDP2)."""
    out = []
    for unit in units:
        shard = gathered = tensors = 0
        for p in params:
            if p.unit != unit or p.experts:
                continue
            local = tp_local_shape(p.shape, p.is_bias, p.module, plan.tp)
            rows = fsdp_shard_elements(local, plan.fsdp)
            shard += rows
            gathered += rows * plan.fsdp
            tensors += 1
        out.append(UnitShard(unit, shard, gathered, tensors))
    return tuple(out)


def total_elements(params: Sequence[ParamInfo]) -> int:
    """Elements of every parameter, unsharded."""
    return sum(elements(p.shape) for p in params)
