"""One training step (forward, backward, optimizer update) measured on fake tensors.

The forward and the backward run for real on fake tensors, with every storage an
op makes tracked until it dies (:mod:`mhaudit.fake.live`); what a layer keeps
for the backward is therefore what the real backward graph keeps. Identical
layers run three of each kind, the copies left out standing in at their positions
(:mod:`mhaudit.trace.left_out`), and the timeline is folded to the full depth
(:mod:`mhaudit.memory.timeline`). The optimizer step runs on fake tensors of every
parameter's full shape, in steady state: its states exist before the step (they
were made by the previous one), and the gradients are gone when the next forward
starts (``zero_grad(set_to_none=True)``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from mhaudit.cost.devices import GpuProfile
from mhaudit.cost.kernels import KernelChoice
from mhaudit.data import AttentionBlock, BlockTraining, MemoryBreakdown, TrainingCost
from mhaudit.errors import ConfigError, TraceError, first_line
from mhaudit.fake.live import is_scores_of
from mhaudit.memory.timeline import Folded, Repeat, fold
from mhaudit.options import check_phase_options
from mhaudit.phases.fakestep import PRECISIONS, FakeRun, LayerRun, run_fake_step
from mhaudit.phases.optimizer_step import optimizer_step
from mhaudit.phases.selective import ScoreRecompute, selective_words
from mhaudit.phases.step_timeline import step_timeline
from mhaudit.phases.stepstate import RUNGS
from mhaudit.phases.target_attention import TargetAttention
from mhaudit.trace.export import DATA_DEPENDENT
from mhaudit.trace.fold import find_lists
from mhaudit.trace.left_out import Watch, stand_ins
from mhaudit.trace.real import CpuTwin, on_meta, plan_real_forward

COPIES = 3
"""Members of each group of identical layers that run; the middle one is copied."""


@dataclass(frozen=True)
class _Group:
    path: str
    run: tuple[int, ...]
    """Original indices that run."""
    members: tuple[int, ...]


def _layer_groups(model: nn.Module, fold_layers: bool) -> list[_Group]:
    groups: list[_Group] = []
    for plan in find_lists(model):
        if not plan.path:
            continue
        for members in plan.members:
            run = members[:COPIES] if fold_layers else members
            groups.append(_Group(plan.path, tuple(run), tuple(members)))
    return groups or _short_lists(model)


def _short_lists(model: nn.Module) -> list[_Group]:
    """Layer lists too short to fold (two or three layers of one class), run in full: every
    such list outside another (an encoder's and a decoder's), none inside a layer."""
    groups: list[_Group] = []
    for name, module in model.named_modules():
        children = list(module.children())
        inside = any(name.startswith(f"{g.path}.") for g in groups)
        if name and not inside and isinstance(module, (nn.ModuleList, nn.Sequential)) \
                and len(children) >= 2 and len({type(c) for c in children}) == 1:
            every = tuple(range(len(children)))
            groups.append(_Group(name, every, every))
    return groups


def recomputed_layers(model: nn.Module) -> list[nn.Module]:
    """The layers ``--checkpointing layers`` (or ``selective``) checkpoints: each member of
    every list of repeated layers."""
    modules = dict(model.named_modules())
    return [modules[f"{g.path}.{i}"] for g in _layer_groups(model, False) for i in g.members]


def _stand_in_sources(groups: Sequence[_Group]) -> dict[str, dict[int, int]]:
    """For each folded list, every member that does not run and the member it copies."""
    lists: dict[str, dict[int, int]] = {}
    for g in groups:
        lists.setdefault(g.path, {}).update(
            {i: g.run[-1] for i in g.members if i not in g.run})
    return lists


def _middle_name(name: str, groups: Sequence[_Group]) -> str:
    """The name of the same module in its group's middle member that runs."""
    for g in groups:
        match = re.match(rf"^{re.escape(g.path)}\.(\d+)(?=\.|$)", name)
        if match and int(match.group(1)) in g.members and int(match.group(1)) not in g.run:
            middle = g.run[min(1, len(g.run) - 1)]
            return f"{g.path}.{middle}{name[match.end():]}"
    return name


def _batch(blocks: Sequence[AttentionBlock], args: tuple[Any, ...], kwargs: dict[str, Any]
           ) -> int:
    if blocks:
        return blocks[0].layout.batch_size
    for value in (*args, *kwargs.values()):
        shape = getattr(value, "shape", None)
        if shape:
            return int(shape[0])
    return 1


def _block_rows(blocks: Sequence[AttentionBlock], run: Any, groups: Sequence[_Group],
                forward_end: int) -> tuple[BlockTraining, ...]:
    saved: dict[str, int] = {}
    scores: dict[str, int] = {}
    shapes = {b.name: b.layout for b in blocks}
    for rec in run.log.records:
        if rec.owner is None or rec.phase != "forward":
            continue
        if rec.freed is not None and rec.freed < forward_end:
            continue
        saved[rec.owner] = saved.get(rec.owner, 0) + rec.nbytes
        lay = shapes.get(rec.owner)
        if lay is not None and is_scores_of(rec.shape, lay):
            scores[rec.owner] = scores.get(rec.owner, 0) + rec.nbytes
    rows = []
    for block in blocks:
        source = _middle_name(block.name, groups)
        rows.append(BlockTraining(block.name, saved.get(source, 0), scores.get(source, 0)))
    return tuple(rows)


def _marked(log: Any, key: str) -> bool:
    events = ("forward_start", "forward_end", "backward_start", "backward_end")
    return all(log.mark(event, key) is not None for event in events)


def _grad_params(model: nn.Module, groups: Sequence[_Group], run_ids: frozenset[int]
                 ) -> tuple[list[nn.Parameter], list[int]]:
    """The parameters that got a gradient in the run, and how many of the full model's
    parameters each stands for (a middle layer's stand for its folded copies)."""
    named = dict(model.named_parameters())
    counts: dict[int, int] = {}
    sources: dict[int, nn.Parameter] = {}
    for name, param in named.items():
        source = named.get(_middle_name(name, groups), param)
        if id(source) in run_ids:
            counts[id(source)] = counts.get(id(source), 0) + 1
            sources[id(source)] = source
    return [sources[k] for k in counts], list(counts.values())


def training_step(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    blocks: Sequence[AttentionBlock],
    profile: GpuProfile,
    *,
    optimizer: str = "adamw",
    precision: str = "fp32",
    checkpointing: str = "none",
    fold_layers: bool = True,
    twin: CpuTwin | None = None,
) -> TrainingCost:
    """Peak memory, its breakdown and FLOPs of one steady-state optimizer step.

    The step runs on fake tensors; where a shape depends on the data (``nonzero``
    routing), it runs as the inference does: for real on CPU (the model's own weights,
    or ``twin``, its CPU build) where that fits the real-forward limit, else on fake
    tensors with data-dependent sizes at their upper bound (:mod:`mhaudit.phases.stepstate`).
    """
    check_phase_options(optimizer, precision, checkpointing)
    options: dict[str, Any] = {"optimizer": optimizer, "precision": precision,
                               "checkpointing": checkpointing}
    try:
        return _training_step(model, args, kwargs, blocks, profile, fold_layers=fold_layers,
                              **options)
    except TraceError as exc:
        if not isinstance(exc.__cause__, DATA_DEPENDENT):
            raise
        first = exc
    return _data_dependent_step(model, args, kwargs, blocks, profile, twin, first,
                                fold_layers=fold_layers, **options)


def _data_dependent_step(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                         blocks: Sequence[AttentionBlock], profile: GpuProfile,
                         twin: CpuTwin | None, first: TraceError, *, fold_layers: bool,
                         **options: Any) -> TrainingCost:
    """The step of a model whose shapes depend on the data, on the rung the inference's
    ladder would take: real on CPU where it may run, else at the upper bounds; one error
    naming what to do where neither can."""
    decision = plan_real_forward(model, twin)
    if decision.ran:
        source = (twin.build() if twin is not None and on_meta(model)
                  else contextlib.nullcontext((model, args, kwargs)))
        with source as (built, b_args, b_kwargs):
            return _training_step(built, b_args, b_kwargs, blocks, profile, fold_layers=False,
                                  rung="real-cpu", **options)
    try:
        return _training_step(model, args, kwargs, blocks, profile, fold_layers=fold_layers,
                              rung="fake-bounded", **options)
    except TraceError as exc:
        raise TraceError(
            f"the training step reads a value from the data that fake tensors cannot hold "
            f"({first_line(first.__cause__ or first)}) and no real CPU step may run: "
            f"{decision.reason}",
            "Audit the model's file or config.json (mhaudit builds it on CPU when its "
            "weights fit), or build it with --device cpu.") from exc


def _training_step(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                   blocks: Sequence[AttentionBlock], profile: GpuProfile, *, optimizer: str,
                   precision: str, checkpointing: str, fold_layers: bool, rung: str = "fake"
                   ) -> TrainingCost:
    """The step on ``rung`` (:data:`~mhaudit.phases.stepstate.RUNGS`)."""
    groups = _layer_groups(model, fold_layers)
    if checkpointing != "none" and not groups:
        raise ConfigError(f"--checkpointing {checkpointing} found no list of repeated layers "
                          "to recompute",
                          "Keep the layers in an nn.ModuleList, or use --checkpointing none.")
    policy = ScoreRecompute(b.layout for b in blocks) if checkpointing == "selective" else None
    modules = dict(model.named_modules())
    layers = [LayerRun(f"{g.path}.{i}", modules[f"{g.path}.{i}"]) for g in groups for i in g.run]
    repeats = [Repeat(f"{g.path}.{g.run[1]}", len(g.members) - len(g.run))
               for g in groups if len(g.run) >= 2 and len(g.members) > len(g.run)]
    attention = _target_attention(blocks, profile, precision)
    run = _run_folded(model, groups, repeats, fold_layers, lambda: run_fake_step(
        model, args, kwargs, precision=precision, layers=layers,
        blocks=_run_blocks(blocks, modules), recompute=checkpointing != "none",
        attention=attention, rung=rung, policy=policy))
    if run is None:  # the layers cannot be folded: run every one
        return _training_step(model, args, kwargs, blocks, profile, optimizer=optimizer,
                              precision=precision, checkpointing=checkpointing,
                              fold_layers=False, rung=rung)
    kernel, why = attention_kernel(attention.choices.values())
    if policy is not None and not policy.recomputed:  # no scores: the step without it
        plain = _training_step(model, args, kwargs, blocks, profile, optimizer=optimizer,
                               precision=precision, checkpointing="none",
                               fold_layers=fold_layers, rung=rung)
        return replace(plain, checkpointing=checkpointing, convention=plain.convention
                       + selective_words(0, plain.attention_kernel))
    folded = fold(run.log, repeats, run.forward_end)
    params, copies = _grad_params(model, groups, run.grad_params)
    master = PRECISIONS[precision][0]
    opt = optimizer_step(params, optimizer, master, copies)
    during, update = _peaks(folded, opt, run.input_bytes, *_state_bytes(model, master))
    breakdown, phase = (update, "optimizer") if update.total > during.total else (
        during, folded.peak.phase)
    batch, memory = _batch(blocks, args, kwargs), profile.memory_bytes
    max_batch = _max_batch(during, update, batch, memory)
    extra = sum(r.extra for r in repeats)
    convention = _rung_words(rung, run.bounds) + _convention(
        precision, run.loss, optimizer, len(layers), extra, checkpointing,
        opt.host_state_bytes, kernel) + (selective_words(policy.recomputed, kernel)
                                         if policy is not None else "")
    fixed = during.total - sum(folded.peak.live)  # alive all along: weights, states, inputs
    timeline, peak_at = step_timeline(run.log, repeats, run.forward_end, fixed, update.total,
                                      phase == "optimizer")
    return TrainingCost(
        optimizer=optimizer, precision=precision, checkpointing=checkpointing, loss=run.loss,
        peak_bytes=breakdown.total, peak_phase=phase, breakdown=breakdown, flops=folded.flops,
        blocks=_block_rows(blocks, run, groups, run.forward_end), memory_bytes=memory,
        fits=breakdown.total <= memory, max_batch_size=max_batch, batch_size=batch,
        folded_layers=extra, ops_without_formula=dict(run.log.missing), convention=convention,
        attention_kernel=kernel, attention_kernel_reason=why,
        host_state_bytes=opt.host_state_bytes, timeline=timeline, timeline_peak_index=peak_at,
        rung=rung, bounds=run.bounds,
    )


def _run_folded(model: nn.Module, groups: Sequence[_Group], repeats: Sequence[Repeat],
                fold_layers: bool, step: Callable[[], FakeRun]) -> FakeRun | None:
    """``step`` run with stand-ins for the members of ``groups`` that do not run; None when
    folding does not hold: the forward does not call its layers as modules, walks into a
    left-out one, or a layer reshapes what it passes on."""
    watch = Watch()
    try:
        with stand_ins(model, _stand_in_sources(groups), watch):
            run = step()
    except TraceError:
        if fold_layers and watch.spoiled:
            return None
        raise
    if fold_layers and (watch.spoiled or not all(_marked(run.log, r.key) for r in repeats)):
        return None
    return run


def _state_bytes(model: nn.Module, master: torch.dtype) -> tuple[int, int]:
    """Bytes of the full model's parameters and buffers, floats at ``master``."""
    params = sum(p.numel() for p in model.parameters()) * master.itemsize
    buffers = sum(b.numel() * (master.itemsize if b.is_floating_point() else b.element_size())
                  for b in model.buffers())
    return params, buffers


def _rung_words(rung: str, bounds: Sequence[str]) -> str:
    """Where the step ran, when not on plain fake tensors, in words."""
    if rung == "fake":
        return ""
    words = f"run {RUNGS[rung]}, a shape depending on the data"
    if bounds:
        words += f" ({'; '.join(bounds)}: peak and FLOPs are upper bounds)"
    return words + "; "


def _run_blocks(blocks: Sequence[AttentionBlock], modules: dict[str, nn.Module]
                ) -> list[tuple[str, nn.Module]]:
    """Each block's name and module, where the model has it."""
    return [(b.name, modules[b.name]) for b in blocks if b.name in modules]


def _target_attention(blocks: Sequence[AttentionBlock], profile: GpuProfile, precision: str
                      ) -> TargetAttention:
    """SDPA as ``profile`` runs it at the step's compute dtype, each block's calls read
    with its detected layout."""
    compute = "float32" if precision == "fp32" else "bfloat16"
    return TargetAttention(profile, compute, {b.name: b.layout for b in blocks}, lambda: None)


def attention_kernel(choices: Iterable[KernelChoice]) -> tuple[str | None, str | None]:
    """The kernel the step's SDPA calls ran on, as torch's rules chose it for each call
    (``math`` when any of them keeps its scores), and why; (None, None) without SDPA."""
    chosen = list(choices)
    kernels = {"math" if c.materializes_scores else c.backend for c in chosen}
    if not kernels:
        return None, None
    kernel = "math" if "math" in kernels else "/".join(sorted(kernels))
    reasons = sorted({c.reason for c in chosen
                      if ("math" if c.materializes_scores else c.backend) == kernel})
    return kernel, "; ".join(reasons) or None


def _convention(precision: str, loss: str, optimizer: str, layers: int, extra: int,
                checkpointing: str, host_state_bytes: int, kernel: str | None) -> str:
    """What the step's figures count, in words."""
    return (
        f"steady-state step: forward ({precision}), backward from the {loss}, "
        f"{optimizer} update (torch.optim, foreach, states made by the previous step); "
        "live tensor bytes as torch's MemTracker counts them (no allocator rounding); "
        f"{layers} layers run" + (f", {extra} folded from them" if extra else "")
        + ("; checkpointing: torch.utils.checkpoint (non-reentrant), which stops recomputing "
           "at each layer's last tensor the backward needs" if checkpointing == "layers" else "")
        + (f"; {host_state_bytes} B of step counters on the host, where torch keeps them "
           "for CUDA parameters (not fused, not capturable)" if host_state_bytes else "")
        + (f"; SDPA keeps what the target's {kernel} kernel keeps (output and log-sum-exp, "
           "not the scores)" if kernel not in (None, "math") else "")
        + "; max_batch_size scales activations and temporaries linearly with the batch")


def _max_batch(during: MemoryBreakdown, update: MemoryBreakdown, batch: int, memory: int
               ) -> int:
    """Largest batch whose forward/backward peak fits, activations and temporaries scaled."""
    fixed = during.params + during.buffers + during.optimizer_states + during.grads
    per_sample = (during.activations + during.temporaries) / batch
    if update.total > memory or fixed >= memory:
        return 0
    if per_sample <= 0:
        return batch
    return int((memory - fixed) // per_sample)


def _peaks(folded: Folded, opt: Any, inputs: int, params: int, buffers: int
           ) -> tuple[MemoryBreakdown, MemoryBreakdown]:
    """What is alive at the forward/backward peak and at the update's peak."""
    act, grads, temps = folded.peak.live
    during = MemoryBreakdown(params=params, grads=grads, optimizer_states=opt.state_bytes,
                             activations=act + inputs, temporaries=temps, buffers=buffers)
    left_act, _, left_temp = folded.end
    update = MemoryBreakdown(params=params, grads=opt.grad_bytes,
                             optimizer_states=opt.state_bytes, activations=left_act + inputs,
                             temporaries=left_temp + opt.temporary_bytes, buffers=buffers)
    return during, update
