"""The library entry points: ``audit(model, inputs)`` and ``audit_target("model.py")``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import torch
from torch import nn
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from mhaudit.assemble import (
    build_report,
    expand_layouts,
    located,
    with_fvcore_count,
    with_measured,
)
from mhaudit.contain.capture import captured_logs, printed_to_log
from mhaudit.contain.contain import (
    contained,
    preserved_state,
    process_guard,
    stop_timer,
    time_limit,
)
from mhaudit.contain.offline import hub_offline
from mhaudit.cost.builder import build_block
from mhaudit.cost.devices import canonical_dtype, dtype_bytes, get_profile
from mhaudit.cost.scaling import project
from mhaudit.data import Report
from mhaudit.detect.blocks import detect
from mhaudit.detect.cores import Core
from mhaudit.detect.declared import declared_mismatches
from mhaudit.detect.locate import block_locations, class_location, model_location
from mhaudit.detect.unread import unread_cores
from mhaudit.errors import ConfigError, LoadError, TraceError, first_line
from mhaudit.fake.run import run_dtype
from mhaudit.load.checks import check_module, check_runs_on, refused_on_meta
from mhaudit.load.target import (
    LoadedModel,
    load_target,
    model_folder,
    model_inputs,
)
from mhaudit.memory.peak import fake_forward_peak, peak_of
from mhaudit.options import AuditOptions, FlopsBackend, resolve_options
from mhaudit.progress import listening, stage
from mhaudit.rules import RuleContext, evaluate
from mhaudit.trace.flex import eager_flex
from mhaudit.trace.fold import FoldedList, module_positions, traced_folded
from mhaudit.trace.real import (
    Built,
    CpuTwin,
    StateValues,
    attach_values,
    forward_limit,
    seeded,
    weights_bytes,
)
from mhaudit.trace.recorder import RecordedGraph
from mhaudit.trace.traced import TracedGraph


def audit(
    model: nn.Module,
    example_inputs: Any = None,
    *,
    options: AuditOptions | None = None,
    source: str | None = None,
    **overrides: Any,
) -> Report:
    """Audit a built model. Inputs are a tuple of args, a dict of kwargs, or one tensor.

    Without inputs, mhaudit infers them from the first layer (token ids for an
    embedding, ``(batch, seq, d)`` floats for a linear layer).
    """
    check_module(model)
    opts = resolve_options(options, overrides)
    if source is not None and not isinstance(source, str):
        raise ConfigError(f"source must be a string, not {type(source).__name__}",
                          "Pass a label such as source=\"my_model\".")
    args, kwargs, inferred = model_inputs(
        model, None if example_inputs is None else lambda: example_inputs,
        opts.batch_size, opts.seq_len, opts.input_shape, opts.input_shapes)
    loaded = LoadedModel(model, args, kwargs, source or type(model).__name__,
                         inputs_inferred=inferred)
    with listening(opts.on_stage), hub_offline(), captured_logs(), time_limit(opts.timeout), \
            process_guard(loaded.source):
        return audit_loaded(loaded, opts)


def audit_target(target: str, options: AuditOptions | None = None, **overrides: Any) -> Report:
    """Load ``model.py[:NAME]``, ``pkg.mod:NAME`` or a ``config.json`` and audit it.

    Model code is contained: anything it raises, ``sys.exit`` included, becomes a
    LoadError or TraceError; ``timeout`` bounds building and tracing. The working
    directory and ``sys.path`` are restored afterwards, and the hub stays offline.
    """
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if not isinstance(target, str) or not target.strip():
        raise ConfigError(f"audit_target() needs a target string, not {target!r}",
                          "Pass e.g. \"model.py\", \"model.py:NAME\" or \"config.json\".")
    opts = resolve_options(options, overrides)
    with listening(opts.on_stage), preserved_state(model_folder(target)), hub_offline(), \
            captured_logs(), time_limit(opts.timeout), process_guard(target):
        stage("loading")
        loaded = _load(target, opts)
        return audit_loaded(loaded, opts, cpu_twin(target, loaded, opts))


def _load(target: str, opts: AuditOptions) -> LoadedModel:
    """Build ``target`` on the audit's device; a model that does not build on meta (a
    sparse buffer, ``.item()`` in a constructor) is built on CPU where its weights fit
    the real-forward limit, and the report says so."""
    def on(device: str) -> LoadedModel:
        return load_target(target, device=device, batch_size=opts.batch_size,
                           seq_len=opts.seq_len, input_shape=opts.input_shape,
                           input_shapes=opts.input_shapes)

    try:
        return on(opts.device)
    except LoadError as exc:
        if opts.device != "meta" or not refused_on_meta(exc):
            raise
        meta_failure = exc
    with seeded():
        loaded = on("cpu")
    size, limit = weights_bytes(loaded.module), forward_limit()
    if size > limit:
        raise LoadError(f"{meta_failure.message}; built on CPU instead, its weights "
                        f"({size:,} B) exceed the real-forward limit ({limit:,} B)",
                        meta_failure.tip) from meta_failure
    return replace(loaded, device="cpu", note=(
        f"built on CPU: building on meta failed "
        f"({first_line(meta_failure.__cause__ or meta_failure, 120)}); "
        f"its weights ({size:,} B) fit the real-forward limit"))


def cpu_twin(target: str, loaded: LoadedModel, opts: AuditOptions) -> CpuTwin | None:
    """How to build ``target`` again on CPU at the same size, for a real forward where a
    value read from the data decides a shape; None when the model already runs for real."""
    if opts.device != "meta" or loaded.device:
        return None

    @contextlib.contextmanager
    def build() -> Iterator[Built]:
        with seeded():  # the same weights, and the same draws in forward, on every run
            twin = load_target(target, device="cpu", batch_size=opts.batch_size,
                               seq_len=opts.seq_len, input_shape=opts.input_shape,
                               input_shapes=opts.input_shapes)
            yield twin.module, twin.args, twin.kwargs

    return CpuTwin(build, weights_bytes(loaded.module))


def audit_loaded(loaded: LoadedModel, opts: AuditOptions, twin: CpuTwin | None = None
                 ) -> Report:
    """Trace, detect, count, cost and check one loaded model; ``twin`` builds it on CPU
    for a real forward (:mod:`mhaudit.trace.real`)."""
    check_runs_on(loaded, opts.device)
    try:
        return _audit_loaded(loaded, opts, twin)
    except GuardOnDataDependentSymNode as exc:
        raise TraceError(f"{loaded.source}: a shape depends on the data ({first_line(exc)})",
                         "Build the model with --device cpu so that real values fix the "
                         "shapes, or give example inputs that avoid the data-dependent "
                         "branch.") from exc
    except RecursionError as exc:
        raise TraceError(f"{loaded.source}: the model nests too deeply to walk "
                         "(RecursionError)", "Flatten the module tree; torch itself walks "
                         "modules recursively.") from exc


def _audit_loaded(loaded: LoadedModel, opts: AuditOptions, twin: CpuTwin | None) -> Report:
    dtype = canonical_dtype(opts.dtype)
    with contextlib.ExitStack() as folding:
        stage("tracing")
        with contained("forward() while tracing", loaded.source, trace=True), printed_to_log():
            traced, plans = folding.enter_context(
                traced_folded(loaded.module, loaded.args, loaded.kwargs, opts.fold, twin,
                              run_dtype(dtype)))
        stop_timer()
        attach_values(traced, StateValues(loaded.module, loaded.args, loaded.kwargs, twin))
        stage("detecting")
        read: list[Core] = []
        layouts = expand_layouts(detect(traced, loaded.module, read), plans,
                                 module_positions(traced) if plans else None)
        unread = unread_cores(traced, read)
        declared = declared_mismatches(loaded.module, layouts)
        stage("costing")
        peak = _fake_peak(loaded, traced, plans, run_dtype(dtype))
    profile = get_profile(opts.gpu)
    blocks = tuple(build_block(layout, dtype, profile) for layout in layouts)
    ctx = RuleContext.for_target(profile, dtype, opts.checked_tensor_parallel)
    blocks = evaluate(blocks, ctx, opts.rule_config)
    where = model_location(loaded.source) or class_location(type(loaded.module))
    found = block_locations(loaded.module, [b.name for b in blocks], where)
    blocks = located(blocks, found)
    report = build_report(loaded, traced, blocks, dtype, opts.device, plans, peak, where,
                          unread, declared)
    if opts.scaling_seq_lens:
        report = replace(report, scaling=project(blocks, opts.scaling_seq_lens, dtype_bytes(dtype)))
    if opts.flops_backend == FlopsBackend.FVCORE:
        report = with_fvcore(report, loaded)
    if opts.device != "meta":
        stage("measuring")
        report = with_measurement(report, loaded, opts)
    if opts.train or opts.decode:
        from mhaudit.phases.attach import with_phases  # imported only for the steps

        stage("phases")
        report = with_phases(report, loaded, traced, opts, plans, twin)
    if opts.verify:
        stage("measuring")
        report = with_verification(report, loaded)
    return report


def with_verification(report: Report, loaded: LoadedModel) -> Report:
    """Put the figures beside FlopCounterMode's and MemTracker's on the same model."""
    from mhaudit.verify.checks import verify

    with contained("forward() while verifying", loaded.source, trace=True):
        checked = verify(report, loaded.module, loaded.args, loaded.kwargs)
    return replace(report, verification=checked)


def _fake_peak(loaded: LoadedModel, traced: TracedGraph, plans: tuple[FoldedList, ...],
               dtype: torch.dtype | None) -> int | None:
    """The activation peak of the eager forward on fake tensors at ``dtype`` (counted while
    the record ran, or in a forward of its own); None when it cannot run there (the
    graph's lifetime estimate is used instead)."""
    if isinstance(traced, RecordedGraph) and traced.storages is not None:
        return peak_of(traced.storages, plans).activation_bytes
    try:
        return fake_forward_peak(loaded.module, loaded.args, loaded.kwargs, plans,
                                 dtype).activation_bytes
    except Exception:  # any failure of user code on fake tensors: fall back to the graph
        return None


def with_fvcore(report: Report, loaded: LoadedModel) -> Report:
    """Add fvcore's whole-model count (its MACs × 2) beside mhaudit's own."""
    from mhaudit.flops.fvcore_backend import fvcore_flops  # only with --flops-backend fvcore

    with contained("forward() under fvcore", loaded.source, trace=True):
        result = fvcore_flops(loaded.module, loaded.args, loaded.kwargs)
    return with_fvcore_count(report, result)


def with_measurement(report: Report, loaded: LoadedModel, opts: AuditOptions) -> Report:
    """Run the model for real and put latency and peak memory on the report."""
    from mhaudit.measure.device import measure  # only on a real device

    # flex_attention's torch.compile refuses the measuring modes: it runs eagerly
    with contained("forward() while measuring", loaded.source, trace=True), eager_flex():
        result = measure(
            loaded.module, loaded.args, loaded.kwargs, [b.name for b in report.blocks],
            device=opts.device, repeats=opts.repeats, progress=opts.progress, dtype=opts.dtype,
        )
    return with_measured(report, result)
