"""The training step and the decode step on a report, as the audit options ask."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any, Protocol

from mhaudit.cost.devices import dtype_bytes, get_profile
from mhaudit.cost.latent import LATENT_DECODE_CONVENTION
from mhaudit.data import DecodeCost, ParallelCost, ParallelPlan, Report
from mhaudit.load.target import LoadedModel
from mhaudit.phases.decode import decode_for_report
from mhaudit.phases.decode_context import by_context, longest_context
from mhaudit.phases.step_part import StepPart, step_part
from mhaudit.phases.step_weights import (
    expert_groups,
    gathered_parameters,
    prefill_only_bytes,
    step_weight_bytes,
)
from mhaudit.phases.training import training_step
from mhaudit.trace.export import TracedGraph
from mhaudit.trace.fold import FoldedList
from mhaudit.trace.real import CpuTwin


class PhaseOptions(Protocol):
    """The audit options the phases read."""

    @property
    def gpu(self) -> str: ...
    @property
    def train(self) -> bool: ...
    @property
    def optimizer(self) -> str: ...
    @property
    def precision(self) -> str: ...
    @property
    def checkpointing(self) -> str: ...
    @property
    def fold(self) -> bool: ...
    @property
    def decode(self) -> bool: ...
    @property
    def context(self) -> int | None: ...
    @property
    def dtype(self) -> str: ...
    @property
    def parallel(self) -> ParallelPlan | str | None: ...
    @property
    def reserve(self) -> tuple[tuple[str, str], ...]: ...


def with_phases(report: Report, loaded: LoadedModel, traced: TracedGraph,
                opts: PhaseOptions, plans: tuple[FoldedList, ...] = (),
                twin: CpuTwin | None = None) -> Report:
    """Add the training step and the decode step the options ask for; ``twin`` builds
    the model on CPU for a real step where a shape depends on the data."""
    profile = get_profile(opts.gpu)
    if opts.train:
        training = training_step(
            loaded.module, loaded.args, loaded.kwargs, report.blocks, profile,
            optimizer=opts.optimizer, precision=opts.precision,
            checkpointing=opts.checkpointing, fold_layers=opts.fold, twin=twin)
        if opts.parallel is not None:
            training = replace(training, parallel=_per_device(
                report, loaded, opts, "train", training=training))
        report = replace(report, training=training)
    if opts.decode:
        decode = _decode(report, loaded, traced, opts, plans)
        if opts.parallel is not None:
            decode = replace(decode, parallel=_per_device(
                report, loaded, opts, "decode", decode=decode))
        report = replace(report, decode=decode)
        if decode.flops_per_step_non_absorbed is not None:
            report = replace(report, conventions={
                **report.conventions, "latent_attention_decode": LATENT_DECODE_CONVENTION})
    return report


def _decode(report: Report, loaded: LoadedModel, traced: TracedGraph, opts: PhaseOptions,
            plans: tuple[FoldedList, ...]) -> DecodeCost:
    """The decode step and its curve against context, from one builder: the part of the
    model a step runs, the weights it reads."""
    e = dtype_bytes(report.model.dtype)
    part = step_part(traced, report.blocks, plans)
    weights = step_weight_bytes(loaded.module, gathered_parameters(traced, plans),
                                _decode_batch(report, part), e, part.prefill_only_params)
    experts = expert_groups([x for x in report.experts if _in_step(x.module, part)],
                            loaded.module, e)
    at = partial(decode_for_report, report, weights, e, get_profile(opts.gpu),
                 experts=experts, part=part)
    decode = at(opts.context)
    steps = tuple(b for b in report.blocks if part.runs(b))
    return replace(decode, by_context=by_context(
        decode, at, longest_context(loaded.module, steps)),
        prefill_only_weight_bytes=prefill_only_bytes(
            loaded.module, part.prefill_only_params, e))


def _per_device(report: Report, loaded: LoadedModel, opts: PhaseOptions, phase: str,
                **single: Any) -> ParallelCost:
    """The phase under the plan, on torch's engine where it applies (analytic elsewhere)."""
    from mhaudit.parallel import plan_costs

    assert opts.parallel is not None
    return plan_costs(loaded.module, loaded.args, loaded.kwargs, report.blocks, opts.parallel,
                      get_profile(opts.gpu), phase, dtype=report.model.dtype,
                      precision=str(opts.precision), optimizer=str(opts.optimizer),
                      context=opts.context, reserve=dict(opts.reserve),
                      experts=report.experts, **single)


def _decode_batch(report: Report, part: StepPart) -> int:
    selfs = [b for b in report.blocks if b.layout.kind == "self" and part.runs(b)]
    return selfs[0].layout.batch_size if selfs else 1


def _in_step(module: str, part: StepPart) -> bool:
    """Whether a step reads the weights of the layer at ``module`` (an expert layer)."""
    return not any(p.startswith(module + ".") for p in part.prefill_only_params)
