"""The audited model's parts: its blocks, their groups, the model, totals and coverage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mhaudit.data.costs import BlockMemory, FlopBreakdown, TargetEstimate
from mhaudit.data.findings import Finding
from mhaudit.data.layout import Layout, ParamBreakdown
from mhaudit.data.location import SourceLocation
from mhaudit.data.tracing import DataDependence


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
    note: str = ""
    """How the model was built when not as asked (on CPU where meta refused it)."""


@dataclass(frozen=True)
class UnreadCore:
    """An op that can be an attention core and is in no block."""

    module: str
    """Qualified name of the module that ran it (``""`` for the root)."""
    op: str
    """Its op name (``softmax``, ``scaled_dot_product_attention``, ``logsumexp``, ...)."""
    why: str
    """Why no block was made of it, in words."""


@dataclass(frozen=True)
class LeftOutInput:
    """An input of another modality than the text that mhaudit made from a config and left
    out, because the forward did not run on it (the text's path was audited without it)."""

    name: str
    """The forward argument left out (``pixel_values``, ``image_sizes``, ...)."""
    why: str
    """The forward's error on the inputs with it, in one line."""


@dataclass(frozen=True)
class DeclaredMismatch:
    """An attribute of a block's module that declares a layout the block does not have."""

    module: str
    """Qualified name of the module that holds the attribute (``""`` for the root)."""
    attribute: str
    """The attribute's name (``num_heads``; ``config.num_attention_heads`` for a value
    read from the config the module holds)."""
    declared: int
    """The value the attribute declares."""
    detected: int
    """The value the graph shows for the same quantity (heads, KV heads, head dim, ...)."""


@dataclass(frozen=True)
class Coverage:
    """What the cost engine could not account for; never silently zero."""

    ops_without_formula: dict[str, int] = field(default_factory=dict)
    """Op name to number of calls that no formula covers."""
    untraced_modules: tuple[str, ...] = ()
    """Modules the tracer could not see into."""
    untraced_attention: tuple[str, ...] = ()
    """Of those, the modules laid out as attention (three or more projections of one input
    or output width): attention layers the forward never ran, so no block describes them."""
    unread_projections: tuple[str, ...] = ()
    """Modules whose projections the forward computed but no output reads (an attention
    path that returned a constant without reading Q, K or V): no block is made of them."""
    untraced_towers: tuple[str, ...] = ()
    """The outermost modules none of whose parameters the forward used: a tower no input
    reached (an audio encoder with no placeholder token, a decoder only generation runs)."""
    data_dependent: DataDependence | None = None
    """How a value read from the data was fixed (a real forward or a stated bound)."""
    unread_cores: tuple[UnreadCore, ...] = ()
    """Ops that can be an attention core (SDPA, flex_attention, a softmax, log-softmax,
    logsumexp or summed exp over a product of two activations) and are in no block."""
    declared_mismatch: tuple[DeclaredMismatch, ...] = ()
    """Attributes of the blocks' modules (``num_heads``, ``head_dim``, ``embed_dim``, the
    config they hold) whose values disagree with the detected layout."""
    inputs_left_out: tuple[LeftOutInput, ...] = ()
    """Inputs made from a config that the forward did not run on, left out so that the
    text's path could be audited: the towers they feed are not in the report."""


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
    peak_activation_is_lower_bound: bool = False
    """True when ``peak_activation_bytes`` comes from the graph's tensor lifetimes (the
    eager forward could not run on fake tensors): each tensor freed at its last use in the
    graph, where eager code that keeps its locals longer peaks higher. Never below the
    bytes of the forward's own outputs."""


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
