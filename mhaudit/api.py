"""The library entry points: ``audit(model, inputs)`` and ``audit_target("model.py")``."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass, replace
from typing import Any

from torch import nn

from mhaudit.assemble import (
    build_report,
    expand_layouts,
    located,
    with_fvcore_count,
    with_measured,
)
from mhaudit.cost.builder import build_block
from mhaudit.cost.devices import DEFAULT_GPU, canonical_dtype, dtype_bytes, get_profile
from mhaudit.cost.fvcore_backend import fvcore_flops
from mhaudit.cost.measure import Progress, measure
from mhaudit.cost.peak import fake_forward_peak
from mhaudit.cost.phases import with_phases
from mhaudit.cost.scaling import project
from mhaudit.cost.training import validate_phases
from mhaudit.data import Report
from mhaudit.detect.blocks import detect
from mhaudit.detect.locate import block_locations, class_location, model_location
from mhaudit.errors import ConfigError, TraceError
from mhaudit.load.capture import captured_logs, printed_to_log
from mhaudit.load.checks import check_module, check_options, check_runs_on
from mhaudit.load.contain import contained, preserved_state, stop_timer, time_limit
from mhaudit.load.offline import hub_offline
from mhaudit.load.target import (
    LoadedModel,
    infer_inputs,
    load_target,
    model_folder,
    normalize_inputs,
)
from mhaudit.rules import RuleConfig, RuleContext, evaluate
from mhaudit.trace.fold import FoldedList, traced_folded


@dataclass(frozen=True)
class AuditOptions:
    """How to build, trace and cost a model."""

    batch_size: int = 1
    """Batch size for inferred inputs."""
    seq_len: int = 128
    """Sequence length for inferred inputs."""
    device: str = "meta"
    """Where to build the model: ``meta`` (nothing allocated), ``cpu`` or ``cuda[:i]``."""
    dtype: str = "bfloat16"
    """Element type that bytes and kernels are costed at."""
    gpu: str = DEFAULT_GPU
    """Target GPU profile for kernels and roofline estimates."""
    tensor_parallel: int | None = None
    """Tensor-parallel degree for MHA008."""
    input_shape: tuple[int, ...] | None = None
    """Shape of a single input tensor, overriding example_inputs()."""
    rule_config: RuleConfig | None = None
    """Rule selection, severities and thresholds; None for the defaults."""
    scaling_seq_lens: tuple[int, ...] = ()
    """Sequence lengths to project block costs to."""
    flops_backend: str = "graph"
    """``graph`` (mhaudit's formulas), or ``fvcore`` to add fvcore's figure for comparison."""
    fold: bool = True
    """Trace one representative of repeated identical layers and multiply its costs."""
    repeats: int = 10
    """Timed forwards when measuring on cpu or cuda."""
    progress: Progress | None = None
    """Called with (done, total) while measuring."""
    timeout: float | None = None
    """Seconds building and tracing may take before the audit gives up (None: no limit)."""
    train: bool = False
    """Add a ``training`` section: one optimizer step measured on fake tensors."""
    optimizer: str = "adamw"
    """``adamw``, ``adam``, ``sgd``, ``sgd-momentum`` or ``none`` (with ``train``)."""
    precision: str = "fp32"
    """``fp32``, ``bf16`` or ``bf16-mixed`` (with ``train``)."""
    checkpointing: str = "none"
    """``none`` or ``layers``: recompute each repeated layer in the backward (with ``train``)."""
    decode: bool = False
    """Add a ``decode`` section: one generation step at ``context``."""
    context: int | None = None
    """Cached tokens for the decode step; None means the audited sequence length."""

    def validate(self) -> None:
        """Raise ConfigError for values no stage can use: wrong types, ranges, empty lists."""
        check_options(self)
        validate_phases(self.optimizer, self.precision, self.checkpointing, self.context)


def resolve_options(options: AuditOptions | None, overrides: dict[str, Any]) -> AuditOptions:
    """``options`` with ``overrides`` applied and validated; unknown names are refused."""
    if options is not None and not isinstance(options, AuditOptions):
        raise ConfigError(f"options must be an AuditOptions, not {type(options).__name__}",
                          "Pass options=AuditOptions(...) or the fields as keywords.")
    fields = [f.name for f in dataclasses.fields(AuditOptions)]
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ConfigError(f"unknown audit option {unknown[0]!r}",
                          f"Valid options: {', '.join(fields)}.")
    opts = replace(options or AuditOptions(), **overrides)
    opts.validate()
    return opts


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
    if example_inputs is None:
        args: tuple[Any, ...] = (infer_inputs(model, opts.batch_size, opts.seq_len),)
        kwargs: dict[str, Any] = {}
    else:
        args, kwargs = normalize_inputs(example_inputs)
    loaded = LoadedModel(model, args, kwargs, source or type(model).__name__,
                         inputs_inferred=example_inputs is None)
    with hub_offline(), captured_logs(), time_limit(opts.timeout):
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
    with preserved_state(model_folder(target)), hub_offline(), captured_logs(), \
            time_limit(opts.timeout):
        loaded = load_target(
            target,
            device=opts.device,
            batch_size=opts.batch_size,
            seq_len=opts.seq_len,
            input_shape=opts.input_shape,
        )
        return audit_loaded(loaded, opts)


def audit_loaded(loaded: LoadedModel, opts: AuditOptions) -> Report:
    """Trace, detect, count, cost and check one loaded model."""
    check_runs_on(loaded, opts.device)
    try:
        return _audit_loaded(loaded, opts)
    except RecursionError as exc:
        raise TraceError(f"{loaded.source}: the model nests too deeply to walk "
                         "(RecursionError)", "Flatten the module tree; torch itself walks "
                         "modules recursively.") from exc


def _audit_loaded(loaded: LoadedModel, opts: AuditOptions) -> Report:
    with contextlib.ExitStack() as folding:
        with contained("forward() while tracing", loaded.source, trace=True), printed_to_log():
            traced, plans = folding.enter_context(
                traced_folded(loaded.module, loaded.args, loaded.kwargs, opts.fold))
        stop_timer()
        layouts = expand_layouts(detect(traced, loaded.module), plans)
        peak = _fake_peak(loaded, plans)
    profile = get_profile(opts.gpu)
    dtype = canonical_dtype(opts.dtype)
    blocks = tuple(build_block(layout, dtype, profile) for layout in layouts)
    ctx = RuleContext.for_target(profile, dtype, opts.tensor_parallel)
    blocks = evaluate(blocks, ctx, opts.rule_config)
    where = model_location(loaded.source) or class_location(type(loaded.module))
    found = block_locations(loaded.module, [b.name for b in blocks], where)
    blocks = located(blocks, found)
    report = build_report(loaded, traced, blocks, dtype, opts.device, plans, peak, where)
    if opts.scaling_seq_lens:
        report = replace(report, scaling=project(blocks, opts.scaling_seq_lens, dtype_bytes(dtype)))
    if opts.flops_backend == "fvcore":
        report = with_fvcore(report, loaded)
    if opts.device != "meta":
        report = with_measurement(report, loaded, opts)
    if opts.train or opts.decode:
        report = with_phases(report, loaded, traced, opts, plans)
    return report


def _fake_peak(loaded: LoadedModel, plans: tuple[FoldedList, ...]) -> int | None:
    """The activation peak of the eager forward on fake tensors; None when it cannot run
    there (the graph's lifetime estimate is used instead)."""
    try:
        return fake_forward_peak(loaded.module, loaded.args, loaded.kwargs, plans).activation_bytes
    except Exception:  # any failure of user code on fake tensors: fall back to the graph
        return None


def with_fvcore(report: Report, loaded: LoadedModel) -> Report:
    """Add fvcore's whole-model count (its MACs × 2) beside mhaudit's own."""
    with contained("forward() under fvcore", loaded.source, trace=True):
        result = fvcore_flops(loaded.module, loaded.args, loaded.kwargs)
    return with_fvcore_count(report, result)


def with_measurement(report: Report, loaded: LoadedModel, opts: AuditOptions) -> Report:
    """Run the model for real and put latency and peak memory on the report."""
    with contained("forward() while measuring", loaded.source, trace=True):
        result = measure(
            loaded.module, loaded.args, loaded.kwargs, [b.name for b in report.blocks],
            device=opts.device, repeats=opts.repeats, progress=opts.progress, dtype=opts.dtype,
        )
    return with_measured(report, result)
