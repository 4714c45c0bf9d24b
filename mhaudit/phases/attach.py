"""The training step and the decode step on a report, as the audit options ask."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from mhaudit.cost.devices import dtype_bytes, get_profile
from mhaudit.cost.latent import LATENT_DECODE_CONVENTION
from mhaudit.data import ParallelCost, ParallelPlan, Report
from mhaudit.load.target import LoadedModel
from mhaudit.phases.decode import decode_for_report
from mhaudit.phases.decode_context import by_context, longest_context
from mhaudit.phases.step_weights import expert_groups, gathered_parameters, step_weight_bytes
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
        e = dtype_bytes(report.model.dtype)
        weights = step_weight_bytes(loaded.module, gathered_parameters(traced),
                                    _decode_batch(report), e)
        experts = expert_groups(report.experts, loaded.module, e)
        decode = decode_for_report(report, weights, e, profile, opts.context, experts)
        decode = replace(decode, by_context=by_context(
            report, decode, weights, e, profile, experts, longest_context(loaded.module)))
        if opts.parallel is not None:
            decode = replace(decode, parallel=_per_device(
                report, loaded, opts, "decode", decode=decode))
        report = replace(report, decode=decode)
        if decode.flops_per_step_non_absorbed is not None:
            report = replace(report, conventions={
                **report.conventions, "latent_attention_decode": LATENT_DECODE_CONVENTION})
    return report


def _per_device(report: Report, loaded: LoadedModel, opts: PhaseOptions, phase: str,
                **single: Any) -> ParallelCost:
    """The phase under the plan, on torch's engine where it applies (analytic elsewhere)."""
    from mhaudit.parallel import plan_costs

    assert opts.parallel is not None
    return plan_costs(loaded.module, loaded.args, loaded.kwargs, report.blocks, opts.parallel,
                      get_profile(opts.gpu), phase, dtype=report.model.dtype,
                      precision=str(opts.precision), optimizer=str(opts.optimizer),
                      context=opts.context, **single)


def _decode_batch(report: Report) -> int:
    selfs = [b for b in report.blocks if b.layout.kind == "self"]
    return selfs[0].layout.batch_size if selfs else 1
