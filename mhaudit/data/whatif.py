"""What-if: the block to vary, and the costs of each alternative head layout."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayoutSpec:
    """The block to vary: widths, head counts and the audited shape.

    :func:`mhaudit.whatif.check_spec` checks the sizes before a sweep runs.
    """

    d_model: int
    heads: int
    kv_heads: int
    seq_len: int
    """Query positions n_q."""
    batch_size: int = 1
    dtype: str = "bfloat16"
    head_dim: int | None = None
    """d_k; None means d_model / heads. The inner width h·d_k is what the sweep splits."""
    seq_len_kv: int | None = None
    """Key/value positions n_kv; None means ``seq_len``."""
    kind: str = "self"
    causal: bool | None = True
    implementation: str = "sdpa"
    """``sdpa`` or ``eager``; every alternative uses the same implementation."""
    bias: bool = False
    """Whether Q, K, V and O carry biases."""
    name: str = "spec"
    """Where the spec came from: ``spec`` or the block's module name."""
    model_inputs: tuple[tuple[str, tuple[int, ...], str], ...] = ()
    """The audited model's tensor inputs (name, shape, dtype) the block's shape came from;
    empty for a spec, or at a sequence length the model was not audited at."""

    @property
    def inner_width(self) -> int:
        """h·d_k, constant across the sweep."""
        return self.heads * (self.head_dim or self.d_model // self.heads)


@dataclass(frozen=True)
class WhatIfRow:
    """The costs of one alternative layout (FLOPs: 2 per multiply-add)."""

    heads: int
    kv_heads: int
    head_dim: int
    current: bool
    """True for the layout the spec or block has."""
    params: int
    """Q, K, V and O weights and biases."""
    textbook_params: int
    """4·d_model² plus the biases."""
    flops: int
    """Forward FLOPs of the block (dense)."""
    attention_flops: int
    """QKᵀ, softmax and PV FLOPs."""
    scores_bytes: int
    """b·h·n_q·n_kv score bytes, were the scores materialised."""
    materializes_scores: bool
    """Whether the kernel on the target writes them to memory."""
    kv_cache_bytes_per_token: int
    backend: str
    """Attention kernel on the target (cudnn, flash, mem_efficient, math, eager)."""
    kernel_head_dim: int | None
    """Compiled head dim the chosen kernel runs; None when it has no fixed sizes."""
    padding_waste: float
    """Fraction of that kernel's head-dim work that is padding."""
    est_time_s: float
    """Roofline time on the profile, the block's ``target.roofline`` (see
    ``ROOFLINE_CONVENTION``): padded kernel FLOPs included, masked 128×128 tiles skipped by
    fused causal kernels."""
    arithmetic_intensity: float | None
    bound: str
    """``compute`` or ``memory``."""
    flags: tuple[str, ...]
    """Rule codes this layout raises."""
    measured_ms: float | None = None
    """Median measured forward time of the block in milliseconds, when asked."""
    decode_step_s: float = 0.0
    """Roofline time of the block's share of one decode step at n_kv cached tokens."""
    decode_kv_read_bytes: int = 0
    """Cached K/V bytes that decode step reads."""
    train_scores_saved_bytes: int | None = 0
    """Score-shaped bytes the block's forward keeps for the backward (fake-tensor run)."""


@dataclass(frozen=True)
class WhatIf:
    """The sweep over head counts and over KV head counts of one block."""

    spec: LayoutSpec
    gpu: str
    """Profile key of the target."""
    by_heads: tuple[WhatIfRow, ...]
    """h over the divisors of h·d_k, the spec's h/h_kv group size kept."""
    by_kv_heads: tuple[WhatIfRow, ...]
    """The spec's h with h_kv over the divisors of h."""

    @property
    def rows(self) -> tuple[WhatIfRow, ...]:
        """Both sweeps, without repeats, by h then h_kv descending."""
        unique = {(r.heads, r.kv_heads): r for r in (*self.by_heads, *self.by_kv_heads)}
        return tuple(sorted(unique.values(), key=lambda r: (r.heads, -r.kv_heads)))
