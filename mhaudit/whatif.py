"""What-if analysis: the costs of alternative head layouts of one attention block."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from mhaudit.cost.builder import build_block
from mhaudit.cost.devices import GpuProfile, canonical_dtype, dtype_bytes
from mhaudit.data import AttentionBlock, Layout, Projection
from mhaudit.errors import ConfigError
from mhaudit.load.device import parse_device
from mhaudit.rules.base import RuleContext
from mhaudit.rules.config import RuleConfig
from mhaudit.rules.engine import check_block
from mhaudit.rules.heads import divisors, reduced_kv_heads


@dataclass(frozen=True)
class LayoutSpec:
    """The block to vary: widths, head counts and the audited shape."""

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

    def __post_init__(self) -> None:
        for key in ("d_model", "heads", "kv_heads", "seq_len", "batch_size", "head_dim",
                    "seq_len_kv"):
            value = getattr(self, key)
            if value is None and key in ("head_dim", "seq_len_kv"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"layout spec: {key} must be a positive integer, "
                                  f"got {value!r}", f"Give {key} as 1 or more.")
        if self.head_dim is None and self.d_model % self.heads:
            raise ConfigError(f"layout spec: {self.heads} heads do not divide d_model "
                              f"{self.d_model}", "Pick a divisor of d_model, or give head_dim.")
        if self.heads % self.kv_heads:
            raise ConfigError(f"layout spec: {self.kv_heads} KV heads do not divide "
                              f"{self.heads} heads", "Pick a divisor of the head count.")
        if self.implementation not in ("sdpa", "eager"):
            raise ConfigError(f"layout spec: unknown implementation {self.implementation!r}",
                              "Use sdpa or eager.")
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))

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


def spec_from_block(block: AttentionBlock, dtype: str) -> LayoutSpec:
    """The spec of an audited block, to sweep its head layout."""
    lay = block.layout
    return LayoutSpec(
        d_model=lay.d_model, heads=lay.num_heads, kv_heads=max(1, lay.num_kv_heads),
        seq_len=lay.seq_len_q, batch_size=lay.batch_size, dtype=dtype, head_dim=lay.head_dim,
        seq_len_kv=lay.seq_len_kv, kind=lay.kind, causal=lay.causal,
        implementation="eager" if lay.implementation == "eager" else "sdpa",
        bias=any(p is not None and p.bias_params > 0 for p in (lay.q, lay.k, lay.v, lay.o)),
        name=lay.name,
    )


def _projection(name: str, d_in: int, d_out: int, bias: bool) -> Projection:
    return Projection(name, f"{name}.weight", d_in, d_out, d_out, d_in * d_out,
                      d_out if bias else 0)


def layout_for(spec: LayoutSpec, heads: int, kv_heads: int) -> Layout:
    """The layout of ``spec`` with ``heads`` query and ``kv_heads`` KV heads (d_v = d_k)."""
    d_k = spec.inner_width // heads
    d = spec.d_model
    return Layout(
        name=spec.name, module_type="WhatIf", kind=spec.kind, implementation=spec.implementation,
        d_model=d, num_heads=heads, num_kv_heads=kv_heads, head_dim=d_k, v_head_dim=d_k,
        batch_size=spec.batch_size, seq_len_q=spec.seq_len,
        seq_len_kv=spec.seq_len_kv or spec.seq_len, d_out=d, causal=spec.causal,
        scale=d_k**-0.5,
        q=_projection("q_proj", d, heads * d_k, spec.bias),
        k=_projection("k_proj", d, kv_heads * d_k, spec.bias),
        v=_projection("v_proj", d, kv_heads * d_k, spec.bias),
        o=_projection("o_proj", heads * d_k, d, spec.bias),
    )


def _row(spec: LayoutSpec, ctx: RuleContext, config: RuleConfig, heads: int,
         kv_heads: int) -> WhatIfRow:
    block = build_block(layout_for(spec, heads, kv_heads), spec.dtype, ctx.profile)
    lay, flops, memory, target = block.layout, block.flops, block.memory, block.target
    assert target is not None
    roof = target.roofline
    from mhaudit.phases.whatif_columns import phase_columns  # torch: only when a sweep runs

    phases = phase_columns(lay, spec.dtype, ctx.profile)
    return WhatIfRow(
        heads=heads, kv_heads=kv_heads, head_dim=lay.head_dim,
        current=(heads, kv_heads) == (spec.heads, spec.kv_heads),
        params=block.params.total, textbook_params=block.params.textbook, flops=flops.total,
        attention_flops=flops.scores + flops.context + flops.softmax,
        scores_bytes=memory.scores_bytes_if_materialized,
        materializes_scores=target.materializes_scores,
        kv_cache_bytes_per_token=memory.kv_cache_bytes_per_token, backend=target.kernel,
        kernel_head_dim=target.kernel_head_dim, padding_waste=target.padding_waste,
        est_time_s=roof.time_s, arithmetic_intensity=roof.arithmetic_intensity,
        bound=roof.bound, flags=tuple(f.code for f in check_block(block, ctx, config)),
        decode_step_s=phases.decode_step_s, decode_kv_read_bytes=phases.decode_kv_read_bytes,
        train_scores_saved_bytes=phases.train_scores_saved_bytes,
    )


def whatif(
    spec: LayoutSpec, profile: GpuProfile, *, try_heads: Sequence[int] | None = None,
    config: RuleConfig | None = None, device: str | None = None, repeats: int = 20,
) -> WhatIf:
    """Sweep h over the divisors of h·d_k (or ``try_heads``) and h_kv over the divisors of h.

    Along the h sweep the spec's group size h/h_kv is kept where it divides h (else
    the largest h_kv that does). With ``device`` (``cuda``, ``cuda:1``, ``cpu``) each
    layout is also run with random weights and timed. The rules run on every layout;
    the default ``config`` ignores MHA010, since a spec says nothing about fusion.
    """
    ctx = RuleContext(profile, spec.dtype, dtype_bytes(spec.dtype))
    config = config or RuleConfig(ignore=("MHA010",))
    width = spec.inner_width
    heads = tuple(try_heads) if try_heads else divisors(width)
    bad = [h for h in heads if h < 1 or width % h]
    if bad:
        raise ConfigError(f"head count {bad[0]} does not divide the inner width {width}",
                          f"Try divisors of {width}.")
    group = spec.heads // spec.kv_heads
    by_heads = tuple(_row(spec, ctx, config, h, reduced_kv_heads(h, group))
                     for h in sorted(set(heads)))
    by_kv = tuple(_row(spec, ctx, config, spec.heads, kv)
                  for kv in reversed(divisors(spec.heads)))
    if device is not None:
        timed: dict[tuple[int, int], float | None] = {}
        for row in (*by_heads, *by_kv):
            key = (row.heads, row.kv_heads)
            if key not in timed:
                timed[key] = measure_block_ms(layout_for(spec, *key), spec.dtype, device,
                                              repeats=repeats)
        by_heads = tuple(replace(r, measured_ms=timed[(r.heads, r.kv_heads)]) for r in by_heads)
        by_kv = tuple(replace(r, measured_ms=timed[(r.heads, r.kv_heads)]) for r in by_kv)
    return WhatIf(spec, profile.key, by_heads, by_kv)


def measure_block_ms(
    layout: Layout, dtype: str, device: str, *, repeats: int = 20, warmup: int = 3,
) -> float | None:
    """Median forward time of the layout with random weights on ``device``; None on OOM.

    Times :func:`~mhaudit.measure.reference.reference_block` with
    :func:`~mhaudit.measure.timer.time_calls`.
    """
    import torch

    from mhaudit.measure.reference import reference_block
    from mhaudit.measure.timer import time_calls

    dev = torch.device(parse_device(device))
    if dev.type == "meta":
        raise ConfigError("cannot time layouts on the meta device", "Use --device cpu or cuda.")
    tdtype = getattr(torch, canonical_dtype(dtype))
    try:
        def rand(*shape: int) -> torch.Tensor:
            sample: torch.Tensor = torch.randn(*shape, device=dev, dtype=tdtype)
            return sample / math.sqrt(shape[-1])

        block = reference_block(layout, rand, causal=bool(layout.causal), device=dev)
        samples = time_calls(block.forward, str(dev), repeats=max(1, repeats), warmup=warmup)
        return statistics.median(samples) * 1e3
    except torch.cuda.OutOfMemoryError:
        return None
    finally:
        if dev.type == "cuda":
            torch.cuda.empty_cache()


def plot_whatif(result: WhatIf, path: str | Path) -> Path:
    """Draw the sweep to ``path`` (PNG); see :mod:`mhaudit.render.whatif_plot`."""
    from mhaudit.render.whatif_plot import plot_whatif as draw

    return draw(result, path)
