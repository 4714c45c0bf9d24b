"""The audited model, its blocks and totals: the report every renderer reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mhaudit.data.costs import (
    BlockMemory,
    ExpertLayer,
    FlopBreakdown,
    Measurement,
    ScalingPoint,
    TargetEstimate,
)
from mhaudit.data.findings import Finding
from mhaudit.data.layout import Layout, ParamBreakdown
from mhaudit.data.location import SourceLocation
from mhaudit.data.phases import DecodeCost, TrainingCost


@dataclass(frozen=True)
class AttentionBlock:
    """One attention block with everything mhaudit knows about it."""

    layout: Layout
    params: ParamBreakdown
    flops: FlopBreakdown
    memory: BlockMemory
    findings: tuple[Finding, ...] = ()
    target: TargetEstimate | None = None
    """Kernel and roofline estimate on the target GPU."""
    location: SourceLocation | None = None
    """The ``class`` line of the block's module, or where the model is built."""

    @property
    def name(self) -> str:
        """The block's qualified module name."""
        return self.layout.name


@dataclass(frozen=True)
class ModelInfo:
    """What was audited and how."""

    source: str
    """The target as given (file path, ``pkg.mod:NAME``, or a class name)."""
    class_name: str
    params_total: int
    """All parameters, tied weights counted once."""
    trace_method: str
    """Name of the tracer that produced the graph."""
    device: str
    dtype: str
    inputs: dict[str, Any]
    """Input names to shapes and dtypes, e.g. ``{"input_ids": [1, 128], ...}``."""
    param_bytes: int = 0
    """Parameter bytes at ``dtype``."""
    inputs_inferred: bool = False
    """True when mhaudit made the inputs up from the model's first layer."""
    location: SourceLocation | None = None
    """The target file and the line where the model is built, when known."""


@dataclass(frozen=True)
class Coverage:
    """What the cost engine could not account for; never silently zero."""

    ops_without_formula: dict[str, int] = field(default_factory=dict)
    """Op name to number of calls that no formula covers."""
    untraced_modules: tuple[str, ...] = ()
    """Modules the tracer could not see into."""


@dataclass(frozen=True)
class Totals:
    """Whole-model figures."""

    num_blocks: int
    attention_params: int
    """Sum of block params (each parameter counted once across blocks)."""
    params_total: int
    attention_params_share: float
    """attention_params / params_total."""
    flops: int
    """Whole-model forward FLOPs: every op with a formula."""
    attention_flops: int
    kv_cache_bytes_per_token: int
    """Sum over self-attention blocks."""
    param_bytes: int = 0
    """Parameter bytes at the audited dtype."""
    peak_activation_bytes: int | None = None
    """Estimated peak of live activations in the forward pass (inference)."""
    measured_peak_memory_bytes: int | None = None
    """Peak memory measured on a real device (``--device cpu|cuda``)."""
    latency_ms: float | None = None
    """Median measured forward latency in milliseconds."""
    flops_by_family: dict[str, int] = field(default_factory=dict)
    """``flops`` split into matmul, conv, softmax, norm, elementwise and other; sums to
    ``flops``. matmul + conv is what torch's FlopCounterMode counts."""
    params_active: int | None = None
    """Parameters one token touches: all of them, less (E − k)/E of each routed expert
    layer's stacked tensors (top-k dispatch)."""
    buffer_bytes: int = 0
    """Buffer bytes (rotary tables, masks, running stats) at the audited dtype."""
    peak_memory_bytes: int | None = None
    """Estimated inference peak: ``param_bytes`` + ``buffer_bytes`` +
    ``peak_activation_bytes``."""


@dataclass(frozen=True)
class BlockGroup:
    """Blocks with identical layouts and figures (repeated layers), shown as one row."""

    pattern: str
    """Names folded into one, e.g. ``layers.{0..31}.self_attn``."""
    names: tuple[str, ...]
    block: AttentionBlock
    """The first block of the group; the others match it in every figure."""

    @property
    def count(self) -> int:
        """How many blocks the group stands for."""
        return len(self.names)


@dataclass(frozen=True)
class Report:
    """The full result of an audit."""

    model: ModelInfo
    blocks: tuple[AttentionBlock, ...]
    totals: Totals
    findings: tuple[Finding, ...] = ()
    """Every finding, block findings included (each names its block; None for the model)."""
    coverage: Coverage = field(default_factory=Coverage)
    groups: tuple[BlockGroup, ...] = ()
    """The blocks folded by identical layout, in order of first appearance."""
    scaling: tuple[ScalingPoint, ...] = ()
    """Costs at other sequence lengths (``--seq-len 512,2048,8192``)."""
    measurement: Measurement | None = None
    """Real timings and memory when built on cpu or cuda."""
    experts: tuple[ExpertLayer, ...] = ()
    """Routed-expert layers, costed at top-k dispatch."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Optional named sections (``folded_layers``, ``fvcore``) merged into the JSON."""
    training: TrainingCost | None = None
    """One optimizer step, with ``--train``."""
    decode: DecodeCost | None = None
    """One generation step, with ``--decode``."""
    conventions: dict[str, str] = field(default_factory=dict)
    """Counting conventions that depend on the model, by name, beside the fixed ones
    (``latent_attention_decode``: the latent-attention decode form, absorbed by default)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (schema version 1) as plain Python data."""
        from mhaudit.render.serialize import report_to_dict

        return report_to_dict(self)
