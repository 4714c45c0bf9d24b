"""The data model: frozen dataclasses that every stage takes and returns.

Units live in names. ``flops`` always means floating-point operations counted
as 2 per multiply-add (dense work, bias adds excluded unless a field says so);
fields ending in ``_bytes`` are bytes; ``params`` are element counts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Severity(str, enum.Enum):
    """How serious a finding is, in increasing order."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        """0 for info, 1 for warning, 2 for error."""
        return ("info", "warning", "error").index(self.value)


@dataclass(frozen=True)
class Finding:
    """One coded flag raised by a rule."""

    code: str
    """Stable rule code, e.g. ``MHA005``."""
    name: str
    """Kebab-case rule name, e.g. ``materialized-attention-scores``."""
    severity: Severity
    """Severity after configuration overrides."""
    message: str
    """One sentence stating the problem and its cost in numbers."""
    fix: str
    """One sentence saying what to change."""
    block: str | None = None
    """Qualified name of the block the finding is about; ``None`` for the model."""
    numbers: dict[str, float] = field(default_factory=dict)
    """The figures behind the message, for machines."""


@dataclass(frozen=True)
class Projection:
    """One of the Q, K, V or O projections of a block, as the graph shows it."""

    module: str
    """Qualified name of the module that owns the weight (``""`` for the root)."""
    weight: str
    """Qualified name of the weight parameter."""
    in_features: int
    """Input width of the projection."""
    out_features: int
    """Output width used by this role (a slice of a fused weight)."""
    fused_width: int
    """Full output width of the weight; larger than ``out_features`` when fused."""
    weight_params: int
    """Weight elements attributed to this role."""
    bias_params: int
    """Bias elements attributed to this role (0 without a bias)."""
    rank: int = 0
    """Bottleneck width of a low-rank factorised projection (x → r → out through a
    down- and an up-projection, norms between); 0 when the role is one matrix."""

    @property
    def fused(self) -> bool:
        """True when this role uses a slice of a wider (fused) weight."""
        return self.fused_width != self.out_features

    @property
    def params(self) -> int:
        """Weight plus bias elements."""
        return self.weight_params + self.bias_params


@dataclass(frozen=True)
class Layout:
    """What the graph says an attention block computes (shapes, not costs)."""

    name: str
    """Qualified name of the smallest module containing all projections."""
    module_type: str
    """Class name of that module."""
    kind: str
    """``"self"`` or ``"cross"``."""
    implementation: str
    """``"sdpa"`` (fused kernel op) or ``"eager"`` (explicit softmax(QKᵀ)V)."""
    d_model: int
    """Input width of the Q projection."""
    num_heads: int
    """Query heads h."""
    num_kv_heads: int
    """Key/value heads h_kv (h for MHA, 1 for MQA, between for GQA)."""
    head_dim: int
    """Query/key head dim d_k."""
    v_head_dim: int
    """Value head dim d_v."""
    batch_size: int
    """Batch size b at the audited shape."""
    seq_len_q: int
    """Query positions n_q at the audited shape."""
    seq_len_kv: int
    """Key/value positions n_kv at the audited shape."""
    d_out: int
    """Output width of the O projection (d_model when absent)."""
    causal: bool | None
    """True for a causal mask, False for none, None when unknown."""
    scale: float | None
    """Softmax scale applied to QKᵀ, when the graph shows one."""
    q: Projection | None
    k: Projection | None
    v: Projection | None
    o: Projection | None
    kv_shared: bool = False
    """True when K and V read the same projection output."""
    core_count: int = 1
    """Attention cores merged into this block (per-head modules give h cores)."""
    cached_width: int | None = None
    """Elements per position the code writes to its KV cache (K and V, or the latent
    they are expanded from); None when the traced forward wrote no cache."""


@dataclass(frozen=True)
class Deviation:
    """One explained difference between the textbook count and the real one."""

    reason: str
    """Plain-language cause, e.g. ``GQA (8 KV heads of 64) saves ...``."""
    params: int
    """Signed parameter difference this cause accounts for."""


@dataclass(frozen=True)
class ParamBreakdown:
    """Parameter counts of one block against the textbook 4·d² (+ biases)."""

    q: int
    k: int
    v: int
    o: int
    q_bias: int
    k_bias: int
    v_bias: int
    o_bias: int
    textbook: int
    """4·d_model² plus d_model for each bias the layout has."""
    formula: int
    """d·h·d_k + 2·d_kv·h_kv·d_k·… for the actual layout, from the derived shape."""
    formula_text: str
    """The formula with numbers, e.g. ``64·8·8 + 2·64·8·8 + 8·8·64 + 4·64``."""
    deviations: tuple[Deviation, ...]
    """Why ``total`` differs from ``textbook``; the params add up exactly."""

    @property
    def total(self) -> int:
        """q + k + v + o (each weight plus bias)."""
        return self.q + self.k + self.v + self.o

    @property
    def delta(self) -> int:
        """total - textbook: what the deviations add up to."""
        return self.total - self.textbook

    @property
    def num_biases(self) -> int:
        """How many of Q, K, V and O have a bias."""
        return sum(1 for b in (self.q_bias, self.k_bias, self.v_bias, self.o_bias) if b)


@dataclass(frozen=True)
class FlopBreakdown:
    """Forward FLOPs of one block (2 per multiply-add, dense, bias adds excluded)."""

    q_proj: int
    k_proj: int
    v_proj: int
    scores: int
    """QKᵀ: 2·b·h·n_q·n_kv·d_k."""
    softmax: int
    """Exp, sum and divide over the score matrix: 3·b·h·n_q·n_kv (SOFTMAX_FLOPS_PER_ELEMENT)."""
    context: int
    """probs·V: 2·b·h·n_q·n_kv·d_v."""
    o_proj: int
    causal_total: int | None = None
    """What a causal kernel that skips masked tiles does; None when not causal."""

    @property
    def total(self) -> int:
        """Sum of the seven parts."""
        return (
            self.q_proj + self.k_proj + self.v_proj + self.scores
            + self.softmax + self.context + self.o_proj
        )


@dataclass(frozen=True)
class BlockMemory:
    """Activation and cache bytes of one block at the audited shape and dtype."""

    q_bytes: int
    k_bytes: int
    v_bytes: int
    scores_bytes: int | None
    """b·h·n_q·n_kv·element size when the layout materialises scores, else None."""
    scores_bytes_if_materialized: int
    """The same figure whether or not the layout materialises it."""
    kv_cache_bytes_per_token: int
    """2·h_kv·d_k·bytes (K and V) for one position; 0 for cross-attention caches."""
    kv_cache_bytes: int
    """KV cache for the audited batch and n_kv."""


@dataclass(frozen=True)
class Roofline:
    """A roofline time estimate for some work on one GPU profile."""

    flops: int
    """Work in FLOPs (2 per multiply-add)."""
    bytes_moved: int
    """HBM traffic in bytes."""
    compute_time_s: float
    """flops / peak dense bf16/fp16 tensor throughput, in seconds."""
    memory_time_s: float
    """bytes_moved / memory bandwidth, in seconds."""
    time_s: float
    """max(compute_time_s, memory_time_s): a lower bound on the real time."""
    arithmetic_intensity: float | None
    """FLOPs per byte moved; None when no bytes move."""
    bound: str
    """``"compute"`` when compute_time_s ≥ memory_time_s, else ``"memory"``."""


@dataclass(frozen=True)
class TargetEstimate:
    """How one block runs on the target GPU profile: its kernel and a roofline time."""

    gpu: str
    """Profile key, e.g. ``h100``."""
    gpu_name: str
    """Marketing name, e.g. ``NVIDIA H100 SXM``."""
    dtype: str
    kernel: str
    """``cudnn``, ``flash``, ``mem_efficient``, ``math`` or ``eager``."""
    kernel_head_dim: int | None
    """Compiled head dim the kernel runs (d_k rounded up), when it has fixed sizes."""
    padding_waste: float
    """Fraction of the head-dim work spent on padding."""
    materializes_scores: bool
    reason: str
    """Why this kernel, naming what ruled out faster ones."""
    roofline: Roofline


@dataclass(frozen=True)
class AttentionBlock:
    """One attention block with everything mhaudit knows about it."""

    layout: Layout
    params: ParamBreakdown
    flops: FlopBreakdown
    memory: BlockMemory
    flags: tuple[Finding, ...] = ()
    target: TargetEstimate | None = None
    """Kernel and roofline estimate on the target GPU."""

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


@dataclass(frozen=True)
class Timing:
    """Wall-clock times of repeated runs, in milliseconds."""

    median_ms: float
    min_ms: float
    max_ms: float
    repeats: int

    @property
    def spread_ms(self) -> float:
        """max - min."""
        return self.max_ms - self.min_ms


@dataclass(frozen=True)
class Measurement:
    """What a measured run on a real device found."""

    device: str
    forward: Timing
    """The whole forward pass."""
    blocks: dict[str, Timing]
    """Attention block name to the time of its module's forward."""
    peak_memory_bytes: int | None
    """CUDA max allocated during a forward, or the peak of tracked tensor allocations on CPU."""
    peak_memory_method: str


@dataclass(frozen=True)
class ScalingPoint:
    """Attention costs projected to another sequence length (self-attention n_q = n_kv = n)."""

    seq_len: int
    attention_flops: int
    """Sum of block FLOPs at this length."""
    scores_bytes: int
    """Sum of b·h·n_q·n_kv·element size over blocks, materialised or not."""
    kv_cache_bytes: int
    """KV cache of all self-attention blocks for the batch at this length."""
    block_flops: dict[str, int]
    """Block name to its FLOPs at this length."""


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
    flags: tuple[Finding, ...] = ()
    """Every finding, block findings included (each names its block; None for the model)."""
    coverage: Coverage = field(default_factory=Coverage)
    groups: tuple[BlockGroup, ...] = ()
    """The blocks folded by identical layout, in order of first appearance."""
    scaling: tuple[ScalingPoint, ...] = ()
    """Costs at other sequence lengths (``--seq-len 512,2048,8192``)."""
    measurement: Measurement | None = None
    """Real timings and memory when built on cpu or cuda."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Optional named sections (``folded_layers``, ``fvcore``) merged into the JSON."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (schema version 1) as plain Python data."""
        from mhaudit.serialize import report_to_dict

        return report_to_dict(self)


@dataclass(frozen=True)
class BudgetLimit:
    """One budget line: a metric, its limit and how a breach counts."""

    metric: str
    """Report metric, e.g. ``params_total`` or ``kv_cache_bytes_per_token``."""
    limit: float
    """Largest allowed value (absolute)."""
    severity: Severity = Severity.ERROR
    """ERROR fails the gate; WARNING is reported only."""


@dataclass(frozen=True)
class BudgetResult:
    """The outcome of checking one metric against its budget or baseline."""

    metric: str
    actual: float | None
    """The measured value; None when the report has no such figure."""
    limit: float | None
    """The absolute limit, or the baseline value times the allowed growth."""
    baseline: float | None
    """The baseline value, when a baseline was given."""
    severity: Severity
    passed: bool
    message: str
    """One sentence with metric, limit, actual and delta."""

    @property
    def delta_percent(self) -> float | None:
        """Growth over the baseline in percent, when both exist."""
        if self.actual is None or not self.baseline:
            return None
        return 100.0 * (self.actual - self.baseline) / self.baseline


@dataclass(frozen=True)
class GateOutcome:
    """The CI gate's verdict: budget results plus the flags that failed it."""

    results: tuple[BudgetResult, ...]
    failing_flags: tuple[Finding, ...]
    fail_on: str
    """``"error"``, ``"warning"`` or ``"never"``."""

    @property
    def passed(self) -> bool:
        """True when no error-severity budget failed and no flag failed the gate."""
        budget_ok = all(r.passed or r.severity is not Severity.ERROR for r in self.results)
        return budget_ok and not self.failing_flags
