"""The two phases beside the prefill forward: one training step and one decode step."""

from __future__ import annotations

from dataclasses import dataclass, field

from mhaudit.data.parallel import ParallelCost


@dataclass(frozen=True)
class MemoryBreakdown:
    """Live bytes by what they hold, at one moment of a training step."""

    params: int
    """Parameters (master weights) at the training precision."""
    grads: int
    """Parameter gradients alive at that moment."""
    optimizer_states: int
    """Optimizer state tensors (AdamW: exp_avg and exp_avg_sq; the step counters)."""
    activations: int
    """Tensors made by the forward (and by recomputation) that are still alive, inputs included."""
    temporaries: int
    """Other tensors made in the backward or the optimizer step (gradients of activations)."""
    buffers: int = 0
    """Module buffers (masks, rotary tables)."""

    @property
    def total(self) -> int:
        """The sum of the parts."""
        return (self.params + self.grads + self.optimizer_states + self.activations
                + self.temporaries + self.buffers)


@dataclass(frozen=True)
class BlockTraining:
    """What one attention block keeps alive for the backward."""

    name: str
    """The block's qualified module name."""
    saved_bytes: int
    """Bytes the block's forward made that are still alive when the forward ends."""
    scores_saved_bytes: int
    """The part of ``saved_bytes`` shaped like the score matrix (b·h·n_q·n_kv elements:
    probabilities, dropout masks); 0 for kernels that keep only log-sum-exps."""


@dataclass(frozen=True)
class TimelinePoint:
    """Live bytes at one point of a training step, in time order."""

    step: str
    """``forward``, ``backward`` or ``optimizer``."""
    live_bytes: int
    """Every byte alive there: weights, grads, optimizer states, activations, temporaries,
    buffers (as ``breakdown`` counts them at the peak)."""


@dataclass(frozen=True)
class TrainingCost:
    """One optimizer step (forward, backward, update), measured on fake tensors."""

    optimizer: str
    """``adamw``, ``adam``, ``sgd``, ``sgd-momentum`` or ``none``."""
    precision: str
    """``fp32``, ``bf16`` or ``bf16-mixed`` (fp32 weights, grads and states; bf16 autocast)."""
    checkpointing: str
    """``none`` or ``layers`` (each repeated layer recomputed in the backward)."""
    loss: str
    """Where the loss came from: ``.loss``, ``first scalar output`` or ``sum of outputs``."""
    peak_bytes: int
    """Peak of live tensor bytes over the step (no allocator rounding or caching)."""
    peak_phase: str
    """``forward``, ``backward`` or ``optimizer``: where the peak falls."""
    breakdown: MemoryBreakdown
    """What is alive at the peak; ``breakdown.total == peak_bytes``."""
    flops: int
    """Forward + backward + recomputation FLOPs (2 per multiply-add) of every op with a
    formula; the optimizer update is not counted."""
    blocks: tuple[BlockTraining, ...]
    """One entry per attention block of the report, in report order."""
    memory_bytes: int
    """Device memory of the target GPU profile."""
    fits: bool
    """``peak_bytes <= memory_bytes``."""
    max_batch_size: int
    """Largest batch whose peak fits, the activations and temporaries at the
    forward/backward peak scaled linearly with the batch (0 when none fits)."""
    batch_size: int
    """Batch size of the audited inputs."""
    folded_layers: int = 0
    """Layers whose costs were copied from a traced representative rather than run."""
    ops_without_formula: dict[str, int] = field(default_factory=dict)
    """Ops of the step no FLOP formula covers (not counted in ``flops``)."""
    convention: str = ""
    """How the step was run, stated for the report."""
    parallel: ParallelCost | None = None
    """Per-device cost of the step under ``--parallel``; None without a plan."""
    attention_kernel: str | None = None
    """The kernel the target runs the SDPA blocks of the step on (``math`` when it keeps
    the scores); what they save for the backward follows it. None without SDPA."""
    attention_kernel_reason: str | None = None
    """Why torch's dispatch rules chose that kernel (the check that ruled out each faster
    backend), for the calls that ran on it; None without SDPA."""
    host_state_bytes: int = 0
    """Optimizer states torch keeps on the host for the target's CUDA parameters (Adam's
    ``step`` counters), not in ``peak_bytes``; a CPU run keeps them with the rest."""
    timeline: tuple[TimelinePoint, ...] = ()
    """Live bytes over the step, folded to the full depth and thinned to a few hundred
    points (each the highest of the ops it stands for); the optimizer update is one point,
    its peak. Empty when the step was not tracked op by op."""
    timeline_peak_index: int | None = None
    """The point of ``timeline`` at ``peak_bytes``; None without a timeline."""
    rung: str = "fake"
    """Where the step ran: ``fake`` (fake tensors), ``real-cpu`` (for real on a CPU build,
    where a shape depends on the data and the weights fit the real-forward limit) or
    ``fake-bounded`` (fake tensors, data-dependent sizes at their upper bound)."""
    bounds: tuple[str, ...] = ()
    """Data-dependent sizes read at their upper bound (``fake-bounded``): the peak and
    the FLOPs are then upper bounds."""


@dataclass(frozen=True)
class BlockDecode:
    """One attention block in one decode step."""

    name: str
    flops: int
    """Projections for the new tokens plus QKᵀ, softmax and PV against the cache."""
    kv_read_bytes: int
    """Cached K/V (or latent) bytes read at the context, window-capped."""
    time_s: float
    """Roofline time of the block's share: its weights, cache reads and FLOPs."""


@dataclass(frozen=True)
class DecodePoint:
    """The decode step at one more context: the same closed forms, another cache length."""

    context: int
    """Tokens in the cache."""
    flops_per_step: int
    kv_read_bytes: int
    """Cache bytes read at this context (window-capped, cross caches included)."""
    bytes_per_step: int
    """Weights once, the cache read at this context and written for the new tokens."""
    time_per_step_s: float
    """Roofline time on the target."""
    bound: str
    """``compute`` or ``memory``."""


@dataclass(frozen=True)
class DecodeCost:
    """One generation step: every sequence of the batch emits one token at ``context``."""

    context: int
    """Tokens already in the cache."""
    batch_size: int
    """Sequences decoded together."""
    flops_per_step: int
    """Weight FLOPs for batch_size new tokens plus attention over the cache."""
    weight_bytes: int
    """Weights read once per step (gathered embedding rows only; touched experts only)."""
    kv_read_bytes: int
    """Cache bytes read: every layer's K/V at the context (window-capped), cross caches."""
    kv_write_bytes: int
    """Cache bytes written for the new tokens."""
    bytes_per_step: int
    """weight_bytes + kv_read_bytes + kv_write_bytes."""
    time_per_step_s: float
    """Roofline: max(flops / peak, bytes / bandwidth) on the target."""
    tokens_per_s: float
    """batch_size / time_per_step_s."""
    bound: str
    """``compute`` or ``memory``."""
    kv_cache_bytes: int
    """The cache for the batch at the context (window-capped, cross caches included)."""
    param_bytes: int
    """All weights resident on the device."""
    memory_bytes: int
    """Device memory of the target GPU profile."""
    fits: bool
    """``param_bytes + kv_cache_bytes <= memory_bytes``."""
    blocks: tuple[BlockDecode, ...]
    convention: str = ""
    """How the step was counted, stated for the report."""
    flops_per_step_non_absorbed: int | None = None
    """``flops_per_step`` with latent attention at its per-head dims (K and V expanded from
    the latent for every cached position's scores); None without latent attention."""
    applicable: bool = True
    """False when no block keeps K/V that grows with generated tokens (an encoder): the
    figures are a step's arithmetic, not a generation step anyone runs."""
    parallel: ParallelCost | None = None
    """Per-device cost of the step under ``--parallel``; None without a plan."""
    prefill_only_flops: int = 0
    """Forward FLOPs that run once, in prefill, and not in a step: encoders, towers,
    cross-attention K/V projections (0 when the whole model runs each step)."""
    prefill_only_weight_bytes: int = 0
    """Resident weights a step does not read: those only prefill reads (in
    ``param_bytes``, not in ``weight_bytes``)."""
    by_context: tuple[DecodePoint, ...] = ()
    """The step at several contexts up to the model's longest (the generating part's
    config's ``max_target_positions`` or ``max_position_embeddings``, else 16×
    ``context``), computed from the same formulas, not traced; empty when not
    applicable."""
