"""Costs of a block and of the model: FLOPs, bytes, kernel estimates and measurements."""

from __future__ import annotations

from dataclasses import dataclass


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
    score_map: int = 0
    """Learned maps of the score map between QKᵀ and ·V (head mixing): b·h·n_q·n_kv times
    ``Layout.learned_map_ops``."""
    causal_total: int | None = None
    """Projections plus the core over the unmasked query/key pairs only (the mask as the
    code applies it, windows included): a lower bound of any masked kernel's work; None
    when the block is not causal."""
    causal_tiles_total: int | None = None
    """Projections plus the core over every 128×128 score tile holding an unmasked pair:
    what a tile-skipping kernel (FlashAttention) computes; None when not causal."""
    visited_fraction: float | None = None
    """Share of the score tiles a block mask visits (``flex``): scores, softmax and context
    count those tiles only; None when the core has no block mask."""
    dense_core: int | None = None
    """scores + softmax + context over every tile, the figure without the block mask (the
    one torch's FlopCounterMode counts for flex_attention, softmax aside); None when the
    core has no block mask."""

    @property
    def total(self) -> int:
        """Sum of the seven parts and the score map's learned maps."""
        return (
            self.q_proj + self.k_proj + self.v_proj + self.scores
            + self.softmax + self.context + self.o_proj + self.score_map
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
    """Cache bytes each generated token adds: K and V per KV head (or the latent of
    latent attention) for causal self-attention; 0 for encoder (non-causal) and
    cross-attention, whose K/V do not grow with generated tokens."""
    kv_cache_bytes: int
    """K/V cache held at the audited batch and n_kv: per-token bytes · b · min(n_kv,
    window) for causal self-attention, ``kv_cache_bytes_static`` for cross-attention,
    0 for encoders."""
    kv_cache_bytes_static: int = 0
    """Cross-attention K/V computed once per source sequence (b · n_kv positions) and
    reused for every generated token; 0 for self-attention."""


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
    """KV cache held at this length for the batch: causal self-attention up to its window,
    plus cross-attention's static cache; encoders hold none."""
    block_flops: dict[str, int]
    """Block name to its FLOPs at this length."""


@dataclass(frozen=True)
class ExpertLayer:
    """A layer of routed experts as the graph runs them: top-k of E per token."""

    module: str
    """Qualified name of the module holding the stacked expert weights."""
    router: str
    """Module that picks the experts (its ``topk`` over E scores); ``""`` when unseen."""
    num_experts: int
    """Experts E (leading dim of the stacked weights)."""
    top_k: int
    """Experts each token is dispatched to (0 when no router was found)."""
    tokens: int
    """Tokens routed at the audited shape: dispatched rows / top_k."""
    weights: tuple[str, ...]
    """Qualified names of the stacked expert weights the grouped GEMMs read."""
