"""The plan applied to the user's model by torch itself: FSDP2 and DTensor TP on a fake
process group under FakeTensorMode, measured by FSDPMemTracker/MemTracker and CommDebugMode."""

from __future__ import annotations

import copy
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn
from torch.utils._pytree import tree_leaves, tree_map

from mhaudit.data.parallel import CollectiveBytes, DeviceBytes, ParallelPlan
from mhaudit.fake.commcount import CommBytesMode
from mhaudit.fake.mode import FakeMode
from mhaudit.parallel.roles import COLWISE, EMBEDDING, SEQUENCE, TpModule
from mhaudit.parallel.world import DATA_AXES, fake_world, mesh_axes, submesh

T = TypeVar("T")


@dataclass(frozen=True)
class EngineRun:
    """What torch measured on rank 0 of the fake world."""

    held: DeviceBytes
    sent: CollectiveBytes
    calls: CollectiveBytes


def engine_blocker(modules: Sequence[TpModule], heads: Sequence[tuple[int, int]],
                   plan: ParallelPlan, phase: str) -> str | None:
    """Why torch cannot run this plan on this model here; None when it can."""
    if phase != "train":
        return "a decode step with its cache is not run on the fake world"
    if dist.is_initialized():
        return "a process group is already initialised in this process"
    if plan.pp > 1:
        return "pipeline stages are not simulated"
    if plan.tp > 1:
        if not modules or not all(m.torch_splits for m in modules):
            return "a projection is fused or not an nn.Linear, which ColwiseParallel cannot split"
        if any(h % plan.tp or kv % plan.tp for h, kv in heads):
            return f"the heads or KV heads do not split evenly over t = {plan.tp}"
    return None


def _fake_inputs(value: Any, dtype: torch.dtype) -> Any:
    """Zeros shaped like the inputs (under the caller's fake mode); floats at ``dtype``,
    the weights' dtype, as a real step at that precision is given them."""
    return tree_map(lambda t: torch.zeros(t.shape, device="cpu", dtype=dtype
                                          if t.is_floating_point() else t.dtype)
                    if isinstance(t, torch.Tensor) else t, value)


def _loss(out: Any) -> torch.Tensor:
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    leaves = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not leaves:
        raise RuntimeError("the model returned no floating-point tensor to take a loss from")
    return leaves[0].float().sum()


def _tp_style(mod: TpModule, sp: bool) -> Any:
    """torch's style for one module: Colwise/RowwiseParallel; under SP (torchtitan's
    ``parallelize_llama``) the row-wise ones scatter along the sequence, the embedding takes
    whole token ids, the norms run ``SequenceParallel`` and the head gathers its logits."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
    )

    if mod.role == SEQUENCE:
        return SequenceParallel()
    if mod.role == COLWISE:
        return ColwiseParallel(output_layouts=Replicate()) if mod.output_gathered else (
            ColwiseParallel())
    if not sp:
        return RowwiseParallel()
    return RowwiseParallel(input_layouts=Replicate() if mod.role == EMBEDDING else Shard(-1),
                           output_layouts=Shard(1), use_local_output=False)


def _apply_tp(twin: nn.Module, mesh: Any, modules: Sequence[TpModule], sp: bool) -> None:
    """The TP plan; under SP each norm feeding projections then all-gathers its output
    along the sequence, once for all of them."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleOutput, parallelize_module

    parallelize_module(twin, mesh, {m.name: _tp_style(m, sp) for m in modules})
    for mod in modules:
        if mod.role == SEQUENCE and mod.output_gathered:
            gather = PrepareModuleOutput(output_layouts=Shard(1),
                                         desired_output_layouts=Replicate(),
                                         use_local_output=False)
            parallelize_module(twin.get_submodule(mod.name), mesh, gather)


def _apply(twin: nn.Module, mesh: Any, modules: Sequence[TpModule], units: Sequence[str],
           plan: ParallelPlan, precision: str) -> None:
    """The TP plan on the mesh's ``tp`` dim, then FSDP2 unit by unit on its data dims:
    ``fully_shard`` over (dp_replicate, dp_shard) is HSDP, over dp_shard alone FSDP, and
    replicas without shards run FSDP2's ``replicate`` (DDP's gradient all-reduce, per
    unit). Under bf16-mixed FSDP gathers bf16 parameters and reduces fp32 gradients."""
    from torch.distributed._composable.replicate_with_fsdp import replicate
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if plan.tp > 1:
        _apply_tp(twin, submesh(mesh, ("tp",)), modules, plan.sp)
    data = [name for name, _ in mesh_axes(plan) if name in DATA_AXES]
    if not data:
        return
    policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if precision == "bf16-mixed" else MixedPrecisionPolicy())
    wrap: Any = fully_shard if plan.fsdp > 1 else replicate
    for unit in units:
        wrap(twin.get_submodule(unit) if unit else twin, mesh=submesh(mesh, data),
             mp_policy=policy)


def _grads_take_param_placements(model: nn.Module) -> None:
    """Give each DTensor gradient its parameter's placements as soon as it is accumulated:
    a norm weight's gradient, a partial sum over the sequence shards, is all-reduced once
    (as Megatron-LM does after the backward; left partial, every optimizer op would
    all-reduce it again), and a whole gradient of a split weight (the embedding's) keeps
    only this rank's rows. Installed before the memory tracker's own hooks, which then
    file the result as the gradient."""
    from torch.distributed.tensor import DTensor

    def settle(param: torch.Tensor) -> None:
        grad = param.grad
        if isinstance(grad, DTensor) and isinstance(param, DTensor) and (
                grad.placements != param.placements):
            param.grad = grad.redistribute(placements=param.placements)

    for param in model.parameters():
        if isinstance(param, DTensor):
            param.register_post_accumulate_grad_hook(settle)  # type: ignore[no-untyped-call]


def _snapshot_bytes(snap: Mapping[Any, Any]) -> dict[str, int]:
    dev: Mapping[Any, Any] = next(iter(snap.values()), {})
    return {str(getattr(k, "value", k)): int(v) for k, v in dev.items()}


def _held(current: dict[str, int], forward: dict[str, int], peak: dict[str, int]
          ) -> DeviceBytes:
    """Per-rank bytes from the trackers' categories: FSDPMemTracker's sharded ones, or
    MemTracker's when FSDP is off. Activations are the tracker's activation category at
    the end of the forward, what autograd keeps for the backward on this rank."""
    params = current.get("Sharded Param", current.get("Parameter", 0))
    grads = current.get("Sharded Grad", current.get("Gradient", 0))
    states = current.get("OptState", current.get("Optstate", 0))
    acts = forward.get("Activation", 0)
    temps = sum(peak.get(k, 0) for k in ("Unsharded Param", "All Gather", "Reduce Scatter",
                                          "Unsharded Grad"))
    total = peak.get("Total", 0)
    return DeviceBytes(params, grads, states, acts, 0, temps, total, tensor_peak=total)


def model_key(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """What a reading of ``model`` on its inputs depends on: the module tree and the inputs'
    shapes and dtypes (other values by their repr). Equal keys, equal readings."""
    inputs = tuple((tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else repr(t)
                   for t in tree_leaves((args, dict(kwargs))))
    return tuple((name, type(mod)) for name, mod in model.named_modules()), inputs


def read_once(cache: weakref.WeakKeyDictionary[nn.Module, tuple[Any, Any]], model: nn.Module,
              key: Any, read: Callable[[], T]) -> T:
    """``read()``, kept in ``cache`` for ``model`` under ``key``: the last reading of each
    model, read again only when what it was read from (``key``) changes."""
    known = cache.get(model)
    if known is None or known[0] != key:
        known = key, read()
        cache[model] = known
    value: T = known[1]
    return value


def _meta_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose parameters and buffers are meta tensors of the same shapes
    (their data is never copied, so a model with real weights costs nothing extra)."""
    memo: dict[int, Any] = {}
    for param in model.parameters():
        memo[id(param)] = nn.Parameter(torch.empty_like(param, device="meta"),
                                       requires_grad=param.requires_grad)
    for buf in model.buffers():
        memo[id(buf)] = torch.empty_like(buf, device="meta")
    return copy.deepcopy(model, memo)


def _optimizer(model: nn.Module, name: str) -> torch.optim.Optimizer | None:
    params = list(model.parameters())
    if name in ("adamw", "adam"):
        return (torch.optim.AdamW if name == "adamw" else torch.optim.Adam)(params)
    if name.startswith("sgd"):
        return torch.optim.SGD(params, lr=0.1, momentum=0.9 if name == "sgd-momentum" else 0.0)
    return None


def run_plan(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
             modules: Sequence[TpModule], units: Sequence[str], plan: ParallelPlan,
             optimizer: str, precision: str) -> EngineRun:
    """One training step of a meta copy of ``model`` under ``plan``, on rank 0 of a fake
    world: sharded by ``parallelize_module`` and ``fully_shard``, materialised as fake
    tensors, run forward, backward and (AdamW or SGD) step, at ``precision`` (fp32; bf16
    weights; or bf16-mixed: fp32 weights, bf16 autocast and FSDP gathers)."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker

    weights = torch.bfloat16 if precision == "bf16" else torch.float32
    twin = _meta_copy(model).to(weights)
    cast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed")
    with fake_world(plan) as mesh, warnings.catch_warnings():
        # FSDP2's hooks warn about module outputs that are views or need no gradient
        warnings.simplefilter("ignore", UserWarning)
        _apply(twin, mesh, modules, units, plan, precision)
        with FakeMode(allow_non_fake_inputs=True):
            twin.to_empty(device="cpu")
            _grads_take_param_placements(twin)
            opt = _optimizer(twin, optimizer)
            fargs, fkwargs = _fake_inputs(args, weights), _fake_inputs(dict(kwargs), weights)
            sharded = plan.fsdp * plan.dp > 1
            tracker: Any = FSDPMemTracker(twin, opt) if sharded else MemTracker()
            if not sharded:
                tracker.track_external(twin, *([opt] if opt is not None else []))
            comm = CommBytesMode()
            with tracker, comm:
                with cast:
                    loss = _loss(twin(*fargs, **fkwargs))
                forward = _snapshot_bytes(tracker.get_tracker_snapshot())
                loss.backward()  # type: ignore[no-untyped-call]
                if opt is not None:
                    opt.step()
            current = _snapshot_bytes(tracker.get_tracker_snapshot())
            peak = _snapshot_bytes(tracker.get_tracker_snapshot("peak"))
    return EngineRun(_held(current, forward, peak), comm.collective_bytes(),
                     comm.collective_calls())
