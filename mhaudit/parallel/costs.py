"""One library call: a phase of the user's model costed per device under a parallel plan."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from torch import nn
from torch.jit import ScriptModule

from mhaudit.cost.devices import GpuProfile, canonical_dtype, dtype_bytes
from mhaudit.cost.overhead import Reserve, as_reserve, memory_terms
from mhaudit.cost.stepspec import DECODE, PHASES, TRAIN, StepSpec, precision_bytes
from mhaudit.data import AttentionBlock, DecodeCost, ExpertLayer, Severity, TrainingCost
from mhaudit.data.parallel import (
    ContextCost,
    DeviceBytes,
    ExpertCost,
    MemoryTerm,
    ParallelCost,
    ParallelPlan,
)
from mhaudit.errors import ConfigError, MhauditError, first_line
from mhaudit.parallel import analytic, pipeline
from mhaudit.parallel.collectives import StepComm, collectives
from mhaudit.parallel.context import context_cost, ring_traffic
from mhaudit.parallel.engine import EngineRun, engine_blocker, run_plan
from mhaudit.parallel.experts import (
    Routing,
    expert_cost,
    expert_shards,
    expert_traffic,
    routed_tensors,
)
from mhaudit.parallel.inventory import (
    ParamInfo,
    UnitShard,
    inventory,
    total_elements,
    unit_shards,
)
from mhaudit.parallel.plan import as_plan
from mhaudit.parallel.roles import TpModule, fsdp_units, tp_modules
from mhaudit.parallel.seqpar import sp_layout
from mhaudit.rules.base import RuleContext
from mhaudit.rules.config import RuleConfig
from mhaudit.rules.engine import check_block


def _forward_flops(blocks: Sequence[AttentionBlock], params: int, batch: int, tokens: int,
                   context: int) -> int:
    """2·N per token for the weights plus each block's QKᵀ and PV over its keys
    (Kaplan et al.'s count): an estimate where the phase gave no FLOPs."""
    core = 0
    for b in blocks:
        lay = b.layout
        keys = context or lay.seq_len_kv
        core += 2 * lay.num_heads * (lay.head_dim + lay.v_head_dim) * keys * tokens * batch
    return 2 * params * batch * tokens + core


def _core_flops(blocks: Sequence[AttentionBlock], batch: int, tokens: int) -> int:
    """Forward FLOPs of the attention cores: 2·b·h·n_q·n_kv·(d_k + d_v) per block."""
    return _forward_flops(blocks, 0, batch, tokens, 0)


def _model_flops(training: TrainingCost | None, blocks: Sequence[AttentionBlock],
                 params: int, batch: int, tokens: int) -> int:
    """The training step's FLOPs without recomputation: the measured step less what its
    own checkpointing recomputed (a layer's forward is a third of forward + backward; the
    attention cores' forward under selective), else 3 forwards by Kaplan et al.'s count."""
    if training is None:
        return 3 * _forward_flops(blocks, params, batch, tokens, 0)
    if training.checkpointing == "layers":
        return training.flops * 3 // 4
    if training.checkpointing == "selective":
        return max(0, training.flops - _core_flops(blocks, batch, tokens))
    return training.flops


def _recompute_flops(model: int, blocks: Sequence[AttentionBlock], batch: int, tokens: int,
                     mode: str) -> int:
    """FLOPs ``mode`` adds to a step of ``model`` FLOPs: every layer's forward again
    (model / 3) under full recomputation, the attention cores' forward under selective."""
    if mode in ("layers", "full"):
        return model // 3
    if mode == "selective":
        return _core_flops(blocks, batch, tokens)
    return 0


def _recompute_mode(checkpointing: str | None, training: TrainingCost | None) -> str:
    """The checkpointing a plan is costed under: as asked, else the training step's own."""
    mode = checkpointing or (training.checkpointing if training is not None else "none")
    if mode not in analytic.RECOMPUTE_MODES:
        raise ConfigError(f"unknown checkpointing {mode!r}",
                          f"Use one of: {', '.join(analytic.RECOMPUTE_MODES)}.")
    return mode


def _same_mode(a: str, b: str) -> bool:
    full = ("layers", "full")
    return a == b or (a in full and b in full)


def _saved_activations(training: TrainingCost | None, mode: str) -> int | None:
    """The training step's activations under ``mode`` when its peak falls in the forward or
    backward, where they are about what the forward saved: as measured when the step ran
    under ``mode``; for ``selective`` from a step without checkpointing, less the score
    tensors its blocks saved (what the paper's selective recomputation drops). None after
    the forward and backward (the optimizer update's peak holds almost none) or for any
    other pair of modes, so that the paper's count is used."""
    if training is None or training.peak_phase == "optimizer":
        return None
    if _same_mode(training.checkpointing, mode):
        return training.breakdown.activations
    if training.checkpointing == "none" and mode == "selective":
        return training.breakdown.activations - sum(
            b.scores_saved_bytes for b in training.blocks)
    return None


_MODE_WORDS = {
    "none": "",
    "selective": ", checkpointing selective: the attention core (QKᵀ, softmax, its dropout, "
                 "P·V) recomputed, its 5·a·s/h score term not kept",
    "layers": ", checkpointing layers (full recomputation): only each layer's input kept, "
              "2·s·b·h at 16 bits",
}
_MODE_WORDS["full"] = _MODE_WORDS["layers"]


def _spec(blocks: Sequence[AttentionBlock], params: int, phase: str, dtype: str,
          precision: str, optimizer: str, training: TrainingCost | None,
          decode: DecodeCost | None, context: int | None,
          activations: int | None, mode: str = "none") -> StepSpec:
    lay = blocks[0].layout if blocks else None
    batch = lay.batch_size if lay else 1
    e = dtype_bytes(canonical_dtype(dtype))
    if phase == TRAIN:
        stored, compute = precision_bytes(precision, e)
        tokens = lay.seq_len_q if lay else 1
        model = _model_flops(training, blocks, params, batch, tokens)
        acts = activations if activations is not None else _saved_activations(training, mode)
        flops = model + _recompute_flops(model, blocks, batch, tokens, mode)
        return StepSpec(TRAIN, stored, compute, optimizer, batch, tokens, 0, acts, flops,
                        model_flops=model)
    ctx = decode.context if decode else (context if context is not None else (
        lay.seq_len_kv if lay else 0))
    batch = decode.batch_size if decode else batch
    flops = decode.flops_per_step if decode else _forward_flops(blocks, params, batch, 1, ctx)
    share = 1.0 - decode.prefill_only_weight_bytes / decode.param_bytes \
        if decode and decode.param_bytes else 1.0
    return StepSpec(DECODE, e, e, "none", batch, 1, ctx, None, flops, share)


def _torch_run(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
               blocks: Sequence[AttentionBlock], modules: Sequence[TpModule],
               units: Sequence[str], plan: ParallelPlan, spec: StepSpec, precision: str,
               use_torch: bool, mode: str = "none", sp_why: str | None = None
               ) -> tuple[EngineRun | None, str | None]:
    """torch's run of the plan, or why there is none (None for a one-GPU plan). torch's
    run recomputes nothing, so a plan with checkpointing takes the analytic model."""
    if plan.world_size == 1:
        return None, None
    heads = [(b.layout.num_heads, b.layout.num_kv_heads) for b in blocks]
    why = (engine_blocker(modules, heads, plan, spec.phase) or sp_why) if use_torch else (
        "not asked")
    if why is None and mode != "none" and spec.phase == TRAIN:
        why = f"torch's run of the plan does not recompute ({mode} checkpointing asked)"
    if why is not None:
        return None, why
    try:
        return run_plan(model, args, kwargs, modules, units, plan, spec.optimizer,
                        precision), None
    except MhauditError:
        raise
    except Exception as exc:  # torch's APIs reject what they cannot shard in many ways
        return None, f"torch could not run the plan on this model ({first_line(exc, 160)})"


def _plan_modules(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                  blocks: Sequence[AttentionBlock], plan: ParallelPlan
                  ) -> tuple[tuple[TpModule, ...], str | None]:
    """The modules the TP plan splits and, under ``sp``, the embedding, norms and head of
    the SP plan (:func:`~mhaudit.parallel.seqpar.sp_layout`), with why torch cannot run it.
    A TorchScript module is refused: torch.distributed shards nn.Module code."""
    if isinstance(model, ScriptModule):
        raise ConfigError("a TorchScript module cannot be planned over devices (torch.distributed"
                          " shards nn.Module code, which scripting hides)",
                          "Audit the module before torch.jit.script.")
    modules = tp_modules(model, blocks)
    if not plan.sp:
        return modules, None
    sp = sp_layout(model, args, kwargs, blocks, modules)
    return modules + sp.modules, sp.blocker


@dataclass(frozen=True)
class _Analytic:
    """The closed-form model's figures of one plan."""

    held: DeviceBytes
    comm: StepComm
    experts: ExpertCost | None
    context: ContextCost | None
    blocker: str | None
    """Why torch's engine cannot run the plan (an axis it does not simulate), or None."""
    params: tuple[ParamInfo, ...] = ()
    """The parameter inventory the figures were made from."""
    shards: tuple[UnitShard, ...] = ()
    """Every unit's shards on one rank, the routed experts' included."""
    d_model: int = 0


def _analytic(model: nn.Module, blocks: Sequence[AttentionBlock], modules: Sequence[TpModule],
              units: Sequence[str], plan: ParallelPlan, spec: StepSpec,
              routing: Routing | None, mode: str = "none") -> _Analytic:
    """States, activations (under checkpointing ``mode``), cache and collectives per rank;
    routed experts under ep and the context-parallel ring under cp."""
    routed = routed_tensors(model, routing.layers) if routing and plan.ep > 1 else {}
    params = inventory(model, modules, units, routed)
    d_model = blocks[0].layout.d_model if blocks else 0
    shards = unit_shards(params, units, plan) + expert_shards(params, d_model, plan)
    more = expert_traffic(routing, d_model, spec, plan) + ring_traffic(blocks, spec, plan)
    comm = collectives(modules, shards, d_model, spec, plan, more)
    states = analytic.state_bytes(shards, spec, plan)
    held = analytic.device_bytes(states, analytic.activation_bytes(blocks, spec, plan, mode),
                                 analytic.kv_cache_bytes(blocks, spec, plan))
    context = context_cost(blocks, spec, plan)
    if context is not None and context.chunk_scores_bytes:  # a math kernel's chunk scores
        held = replace(held, temporaries=held.temporaries + context.chunk_scores_bytes,
                       peak=held.peak + context.chunk_scores_bytes,
                       tensor_peak=held.tensors + context.chunk_scores_bytes)
    blocker = ("expert parallelism is not simulated on the fake world" if routed else
               "context parallelism is not simulated on the fake world"
               if plan.cp > 1 else None)
    return _Analytic(held, comm, expert_cost(routing, shards, d_model, spec, plan),
                     context, blocker, tuple(params), shards, d_model)


def _stage_experts(figures: _Analytic, pipe: pipeline.Staged | None, routing: Routing | None,
                   spec: StepSpec, plan: ParallelPlan) -> ExpertCost | None:
    """The experts' figures on the pipeline rank ``per_device_bytes`` describes (its
    layers only); every layer's without pipeline stages."""
    if pipe is None:
        return figures.experts
    worst = pipe.cost.stages[pipe.cost.worst_stage]
    return expert_cost(routing, figures.shards, figures.d_model, spec, plan,
                       (pipe.cost.worst_stage, worst.layers))


def plan_costs(
    model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
    blocks: Sequence[AttentionBlock], plan: ParallelPlan | str, profile: GpuProfile,
    phase: str = TRAIN, *, dtype: str = "bfloat16", precision: str = "fp32",
    optimizer: str = "adamw", context: int | None = None,
    training: TrainingCost | None = None, decode: DecodeCost | None = None,
    activation_bytes: int | None = None, use_torch: bool = True,
    reserve: Reserve | Mapping[str, str] | None = None, checkpointing: str | None = None,
    experts: Sequence[ExpertLayer] = (), capacity_factor: float = 1.0,
) -> ParallelCost:
    """Per-device cost of one ``phase`` (``train`` or ``decode``) of ``model`` under ``plan``.

    The TP plan comes from ``blocks`` (Q/K/V and MLP up/gate column-wise, O and MLP down
    row-wise) and FSDP wraps each layer holding a block, then the root. With ``use_torch``
    a training step is run by torch on a fake process group (``source`` is then
    ``torch.distributed``); where torch cannot apply the plan, the analytic model answers
    and ``notes`` says why. ``training``/``decode`` are the single-device phase results,
    when the audit has them: their activations, FLOPs, batch and context are used.
    ``activation_bytes`` is a single-device count of the bytes saved for the backward
    (MemTracker's, say) that the plan then splits; it takes precedence over ``training``'s.
    ``reserve`` sets the memory beyond tensors (``{"cuda_context": "600MiB"}``); terms it
    leaves out come from the environment or the libraries' defaults.
    ``experts`` are the audit's routed-expert layers (``Report.experts``), split over
    ``plan.ep`` (:mod:`mhaudit.parallel.experts`); ``capacity_factor`` sizes their
    dispatch buffers (1.0: dropless).
    ``checkpointing`` (none, selective, layers = full; default: the training step's) sets what
    each layer keeps (:func:`analytic.korthikanti_bytes`); ``activation_bytes`` is under it."""
    plan, mode = as_plan(plan), _recompute_mode(checkpointing, training)
    if phase not in PHASES:
        raise ConfigError(f"unknown parallel phase {phase!r}", "Use train or decode.")
    routing = Routing(tuple(experts), capacity_factor) if experts else None
    modules, sp_why = _plan_modules(model, args, kwargs, blocks, plan)
    units = fsdp_units(model, blocks)
    spec = _spec(blocks, total_elements(inventory(model, modules, units)), phase, dtype,
                 precision, optimizer, training, decode, context, activation_bytes, mode)
    model_figures = _analytic(model, blocks, modules, units, plan, spec, routing, mode)
    run, why = (None, model_figures.blocker) if model_figures.blocker else _torch_run(
        model, args, kwargs, blocks, modules, units, plan, spec, precision, use_torch, mode,
        sp_why)
    held, comm, source, notes, analytic_acts = _measured(run, why, model_figures, spec, plan,
                                                         mode)
    pipe = pipeline.stage_plan(model, args, kwargs, blocks, model_figures.params, units, spec,
                               plan, precision)
    on_stage = _stage_experts(model_figures, pipe, routing, spec, plan)
    notes += _axis_notes(on_stage, model_figures.context)
    held, notes = (pipe.held, [*notes, *pipe.notes]) if pipe else (held, notes)
    timing = analytic.step_parts(spec, comm, held, plan, profile, **pipeline.timing(pipe))
    errors = plan_errors(blocks, plan, profile, dtype)
    held, terms = with_terms(held, memory_terms(plan, profile, held.tensors, as_reserve(reserve)))
    return ParallelCost(
        plan=plan, phase=phase, per_device_bytes=held, comm_bytes_per_step=comm.sent,
        comm_calls_per_step=comm.calls, step_time_s=timing.total,
        fits=held.peak <= profile.memory_bytes and not errors,
        max_batch_size=0 if errors else analytic.max_batch_size(held, spec.batch, profile),
        source=source, notes=(*notes, *errors), analytic_activations=analytic_acts,
        memory_terms=terms, step_parts=timing,
        mfu=model_flops_utilisation(spec.useful_flops, plan, timing.total, profile),
        experts=on_stage, context=model_figures.context,
        pipeline=pipe.cost if pipe else None)


def _split_notes(spec: StepSpec, mode: str = "none") -> list[str]:
    if spec.phase != TRAIN:
        return []
    return ["activations split as Korthikanti et al. 2022 split them"
            + (" (the single-device count in that proportion)" if spec.activation_bytes
               else " (their per-layer count)") + _MODE_WORDS[mode]]


def _measured(run: EngineRun | None, why: str | None, figures: _Analytic, spec: StepSpec,
              plan: ParallelPlan, mode: str = "none"
              ) -> tuple[DeviceBytes, StepComm, str, list[str], int | None]:
    """Bytes, collectives, source, notes and the analytic activations beside torch's: torch's
    figures in place of the analytic ones where it ran (the KV cache stays analytic), the
    analytic ones and why otherwise."""
    held, comm = figures.held, figures.comm
    if run is None:
        notes = _split_notes(spec, mode) + ([f"analytic model: {why}"] if why is not None
                                            else [])
        return held, comm, "analytic", notes, None
    note = (f"states, buffers, activations, peak and collectives measured by torch on rank 0 "
            f"of a fake world of {plan.world_size}; the analytic split (Korthikanti et "
            f"al. 2022) gives {held.activations:,} B of activations")
    return (replace(run.held, kv_cache=held.kv_cache),
            replace(comm, sent=run.sent, calls=run.calls), "torch.distributed", [note],
            held.activations)


def with_terms(held: DeviceBytes, terms: tuple[MemoryTerm, ...]
               ) -> tuple[DeviceBytes, tuple[MemoryTerm, ...]]:
    """``held`` with the memory beyond tensors added (each term in its field, and the peak
    the tensors' peak plus all of them), and the terms."""
    sizes = {t.name: t.bytes for t in terms}
    tensors = held.tensors
    return replace(held, tensor_peak=tensors, peak=tensors + sum(sizes.values()),
                   **sizes), terms


def model_flops_utilisation(flops: int, plan: ParallelPlan, time_s: float,
                            profile: GpuProfile) -> float | None:
    """The step's FLOPs on one model replica spread over the ranks that share it
    (tp · cp · pp), per second of the step, over the target's dense bf16 peak; None
    without FLOPs or time."""
    if flops <= 0 or time_s <= 0:
        return None
    per_rank = flops / (plan.tp * plan.cp * plan.pp)
    return per_rank / time_s / (profile.peak_tflops_bf16 * 1e12)


def _axis_notes(experts: ExpertCost | None, context: ContextCost | None) -> list[str]:
    """What the expert and context figures assume."""
    notes = []
    if experts is not None:
        notes.append(f"routed experts: {experts.experts_per_rank} of {experts.num_experts} "
                     f"per rank{' (uneven split)' if experts.uneven else ''}, balanced "
                     f"routing (each expert receives tokens·k/E)"
                     + ("" if experts.stage is None else
                        f"; their figures count pipeline rank {experts.stage}'s "
                        f"{experts.layers} routed layers"))
    if context is not None and not context.kv_cache_split:
        notes.append("context parallelism: ring attention splits a training step; a decode "
                     "step's KV cache is not split over cp")
    return notes


def plan_errors(blocks: Sequence[AttentionBlock], plan: ParallelPlan, profile: GpuProfile,
                dtype: str) -> tuple[str, ...]:
    """What the rules call an error at the plan's tensor-parallel degree and not without
    it (MHA008: heads that do not shard), each as ``CODE block: message``: a plan with
    one does not run, so it does not fit. The rules' own checks decide, not a copy."""
    if plan.tp <= 1:
        return ()
    config = RuleConfig()
    alone = RuleContext.for_target(profile, dtype)
    split = RuleContext.for_target(profile, dtype, plan.tp)
    found: list[str] = []
    for block in blocks:
        before = {f.code for f in check_block(block, alone, config)
                  if f.severity == Severity.ERROR}
        found += [f"{f.code} error on {block.name or '(root)'}: {f.message}"
                  for f in check_block(block, split, config)
                  if f.severity == Severity.ERROR and f.code not in before]
    return tuple(dict.fromkeys(found))

