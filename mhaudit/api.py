"""The library entry points: ``audit(model, inputs)`` and ``audit_target("model.py")``."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from mhaudit.contain.capture import captured_logs, printed_to_log
from mhaudit.contain.contain import contained, preserved_state, stop_timer, time_limit
from mhaudit.contain.offline import hub_offline
from mhaudit.cost.builder import build_block
from mhaudit.cost.devices import DEFAULT_GPU, canonical_dtype, dtype_bytes, get_profile
from mhaudit.cost.fvcore_backend import fvcore_flops
from mhaudit.cost.graph import graph_flops, peak_activation_bytes
from mhaudit.cost.measure import Progress, measure
from mhaudit.cost.moe import expert_tensor_numel, inactive_fraction, routed_experts
from mhaudit.cost.peak import fake_forward_peak
from mhaudit.cost.phases import with_phases
from mhaudit.cost.scaling import project
from mhaudit.cost.training import validate_phases
from mhaudit.data import (
    AttentionBlock,
    Coverage,
    ExpertLayer,
    ModelInfo,
    Report,
    Totals,
)
from mhaudit.detect.blocks import detect
from mhaudit.detect.locate import block_locations, class_location, model_location
from mhaudit.errors import ConfigError, TraceError
from mhaudit.load.checks import check_module, check_options, check_runs_on
from mhaudit.load.describe import describe_inputs
from mhaudit.load.target import (
    LoadedModel,
    infer_inputs,
    load_target,
    model_folder,
    normalize_inputs,
)
from mhaudit.render.grouping import group_blocks
from mhaudit.rules import RuleConfig, RuleContext, evaluate
from mhaudit.trace.export import TracedGraph
from mhaudit.trace.fold import (
    FoldedList,
    describe,
    expand_layouts,
    expand_names,
    node_weight,
    traced_folded,
)


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
    blocks = tuple(replace(b, location=loc) for b, loc in zip(blocks, found, strict=True))
    report = build_report(loaded, traced, blocks, dtype, opts, plans, peak)
    report = replace(report, model=replace(report.model, location=where))
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
    extras = dict(report.extras)
    extras["fvcore"] = {
        "flops": result.flops,
        "convention": "fvcore counts one multiply-add as one flop; shown here doubled",
        "unsupported_ops": dict(result.unsupported_ops),
    }
    return replace(report, extras=extras)


def with_measurement(report: Report, loaded: LoadedModel, opts: AuditOptions) -> Report:
    """Run the model for real and put latency and peak memory on the report."""
    with contained("forward() while measuring", loaded.source, trace=True):
        result = measure(
            loaded.module, loaded.args, loaded.kwargs, [b.name for b in report.blocks],
            device=opts.device, repeats=opts.repeats, progress=opts.progress, dtype=opts.dtype,
        )
    totals = replace(
        report.totals,
        latency_ms=result.forward.median_ms,
        measured_peak_memory_bytes=result.peak_memory_bytes,
    )
    return replace(report, totals=totals, measurement=result)


def build_report(
    loaded: LoadedModel,
    traced: TracedGraph,
    blocks: Sequence[AttentionBlock],
    dtype: str,
    opts: AuditOptions,
    plans: tuple[FoldedList, ...] = (),
    activation_peak: int | None = None,
) -> Report:
    """Put the model facts, blocks, totals and coverage together.

    ``activation_peak`` is the fake-tensor forward's peak at the model's dtypes; without
    it the graph's tensor-lifetime estimate is used.
    """
    model = loaded.module
    params_total = sum(p.numel() for p in model.parameters())
    param_bytes = params_total * dtype_bytes(dtype)
    costs = graph_flops(traced.graph)
    excluded = set(traced.params) | set(traced.buffers)
    info = ModelInfo(
        source=loaded.source,
        class_name=type(model).__name__,
        params_total=params_total,
        trace_method=traced.method,
        device=opts.device,
        dtype=dtype,
        inputs=describe_inputs(model, loaded.args, loaded.kwargs),
        param_bytes=param_bytes,
        inputs_inferred=loaded.inputs_inferred,
    )
    attention_params = _attention_params(blocks)
    weights = _node_weights(traced, plans)
    graph_peak = peak_activation_bytes(traced.graph, excluded)
    activations = _scale_bytes(
        activation_peak if activation_peak is not None else graph_peak, traced, dtype
    )
    buffer_bytes = sum(
        b.numel() * (dtype_bytes(dtype) if b.is_floating_point() else b.element_size())
        for b in model.buffers()
    )
    experts = routed_experts(traced.graph, traced.params, traced.module_path)
    totals = Totals(
        num_blocks=len(blocks),
        attention_params=attention_params,
        params_total=params_total,
        attention_params_share=attention_params / params_total if params_total else 0.0,
        flops=sum(f * weights(name) for name, f in costs.node_flops.items()),
        attention_flops=sum(b.flops.total for b in blocks),
        kv_cache_bytes_per_token=sum(b.memory.kv_cache_bytes_per_token for b in blocks),
        param_bytes=param_bytes,
        peak_activation_bytes=activations,
        buffer_bytes=buffer_bytes,
        peak_memory_bytes=param_bytes + buffer_bytes + activations,
        flops_by_family=costs.by_family(weights),
        params_active=params_total - _inactive_params(model, experts, plans),
    )
    flags = tuple(f for b in blocks for f in b.findings)
    coverage = Coverage(
        ops_without_formula=dict(costs.ops_without_formula),
        untraced_modules=untraced_modules(model, traced, plans),
    )
    extras = {"folded_layers": describe(plans)} if plans else {}
    return Report(info, tuple(blocks), totals, flags, coverage, group_blocks(blocks),
                  experts=experts, extras=extras)


def _node_weights(traced: TracedGraph, plans: tuple[FoldedList, ...]) -> Callable[[str], int]:
    """Node name to how many layers it stands for (folded layers count once per layer)."""
    weights: dict[str, int] = {}
    for node in traced.graph.nodes if plans else ():
        weight = node_weight(traced.module_path(node), plans)
        weights[node.name] = weight
        for arg in node.args:  # a wrapped submodule graph is costed under its get_attr name
            if isinstance(arg, torch.fx.Node) and arg.op == "get_attr":
                weights[arg.name] = weight
    return lambda name: weights.get(name.split(".")[0], 1)


def _inactive_params(
    model: nn.Module, experts: Sequence[ExpertLayer], plans: tuple[FoldedList, ...]
) -> int:
    """Expert parameters a token does not touch, (E − k)/E of each layer, every layer."""
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    return sum(
        round(expert_tensor_numel(shapes, layer) * inactive_fraction(layer))
        * node_weight(layer.module, plans)
        for layer in experts
    )


def untraced_modules(
    model: nn.Module, traced: TracedGraph, plans: tuple[FoldedList, ...]
) -> tuple[str, ...]:
    """Modules holding parameters the forward never used (their costs are not counted)."""
    read = {
        traced.params[node.name] for node in traced.graph.nodes
        if node.op == "placeholder" and node.name in traced.params and node.users
    }
    used: set[int] = set()
    for name in expand_names(read, plans):
        with contextlib.suppress(AttributeError):
            used.add(id(model.get_parameter(name)))
    owners = {
        name.rpartition(".")[0] for name, p in model.named_parameters() if id(p) not in used
    }
    return tuple(sorted(owners))


def _attention_params(blocks: Sequence[AttentionBlock]) -> int:
    """Block parameters with weights shared between blocks counted once."""
    seen: dict[tuple[str, str, int], int] = {}
    for block in blocks:
        for role in ("q", "k", "v", "o"):
            proj = getattr(block.layout, role)
            if proj is not None:
                seen[(proj.weight, role, proj.out_features)] = proj.params
    return sum(seen.values())


def _scale_bytes(graph_bytes: int, traced: TracedGraph, dtype: str) -> int:
    """Convert activation bytes traced at the model's dtype to the audited dtype."""
    traced_bytes = _traced_element_bytes(traced)
    return graph_bytes * dtype_bytes(dtype) // traced_bytes if traced_bytes else graph_bytes


def _traced_element_bytes(traced: TracedGraph) -> int:
    for node in traced.graph.nodes:
        if node.name in traced.params:
            value = node.meta.get("val")
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                return int(value.element_size())
    return 0
