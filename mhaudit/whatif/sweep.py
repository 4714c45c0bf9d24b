"""The what-if sweep: the costs of alternative head layouts of one attention block."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from mhaudit.cost.builder import build_block
from mhaudit.cost.devices import GpuProfile, canonical_dtype, dtype_bytes
from mhaudit.data import AttentionBlock, Layout, LayoutSpec, Projection, WhatIf, WhatIfRow
from mhaudit.errors import ConfigError
from mhaudit.load.device import parse_device
from mhaudit.options import check_traced_shape
from mhaudit.rules.base import RuleContext
from mhaudit.rules.config import RuleConfig
from mhaudit.rules.engine import check_block
from mhaudit.rules.heads import divisors, reduced_kv_heads
from mhaudit.whatif.spec import check_spec


def spec_from_block(block: AttentionBlock, dtype: str) -> LayoutSpec:
    """The spec of an audited block, to sweep its head layout."""
    lay = block.layout
    return check_spec(LayoutSpec(
        d_model=lay.d_model, heads=lay.num_heads, kv_heads=max(1, lay.num_kv_heads),
        seq_len=lay.seq_len_q, batch_size=lay.batch_size, dtype=dtype, head_dim=lay.head_dim,
        seq_len_kv=lay.seq_len_kv, kind=lay.kind, causal=lay.causal,
        implementation="eager" if lay.implementation == "eager" else "sdpa",
        bias=any(p is not None and p.bias_params > 0 for p in (lay.q, lay.k, lay.v, lay.o)),
        name=lay.name,
    ))


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
    spec = check_spec(spec)
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
        check_traced_shape(("batch_size", "seq_len"), (spec.batch_size, spec.seq_len))
        if spec.seq_len_kv is not None:
            check_traced_shape(("batch_size", "seq_len_kv"), (spec.batch_size, spec.seq_len_kv))
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
    except (torch.cuda.OutOfMemoryError, MemoryError):
        return None
    except RuntimeError as exc:  # the CPU allocator's "can't allocate memory"
        if "allocate" in str(exc):
            return None
        raise
    finally:
        if dev.type == "cuda":
            torch.cuda.empty_cache()


def plot_whatif(result: WhatIf, path: str | Path) -> Path:
    """Draw the sweep to ``path`` (PNG); see :mod:`mhaudit.render.whatif_plot`."""
    from mhaudit.atomic import write_text_atomic
    from mhaudit.render.whatif_plot import whatif_png

    out = Path(path)
    write_text_atomic(out, whatif_png(result))  # whole, or not at all
    return out
