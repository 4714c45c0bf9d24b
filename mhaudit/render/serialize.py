"""The JSON report (schema version 1) as plain Python data; field names are a public contract."""

from __future__ import annotations

from typing import Any

from mhaudit import __version__
from mhaudit.data import (
    AttentionBlock,
    DecodeCost,
    Finding,
    Measurement,
    Projection,
    Report,
    ScalingPoint,
    SourceLocation,
    TargetEstimate,
    Timing,
    TrainingCost,
)

SCHEMA_VERSION = 1

FLOPS_CONVENTION = (
    "flops count 2 per multiply-add of the dense computation; bias adds are excluded"
)
EXPERTS_CONVENTION = (
    "routed experts are costed at top-k dispatch: tokens x k x one expert's FLOPs "
    "(routing is data-dependent; on meta tensors every token is assumed routed to k experts)"
)
CAUSAL_CONVENTION = (
    "flops.total is dense; causal_total counts unmasked query/key pairs only (a lower "
    "bound); causal_tiles_total counts every 128x128 tile holding one (a tile-skipping kernel)"
)


def finding_to_dict(finding: Finding) -> dict[str, Any]:
    """A flag as ``{code, name, severity, message, fix, block, numbers}``."""
    return {
        "code": finding.code,
        "name": finding.name,
        "severity": finding.severity.value,
        "message": finding.message,
        "fix": finding.fix,
        "block": finding.block,
        "numbers": dict(finding.numbers),
    }


def location_to_dict(where: SourceLocation | None) -> dict[str, Any] | None:
    """``{path, line, symbol}`` or None."""
    if where is None:
        return None
    return {"path": where.path, "line": where.line, "symbol": where.symbol}


def _projection(p: Projection | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {
        "module": p.module,
        "weight": p.weight,
        "in_features": p.in_features,
        "out_features": p.out_features,
        "fused_width": p.fused_width,
        "fused": p.fused,
        "weight_params": p.weight_params,
        "bias_params": p.bias_params,
        "rank": p.low_rank_width,
    }


def block_to_dict(block: AttentionBlock) -> dict[str, Any]:
    """One entry of ``blocks``."""
    lay, par, fl, mem = block.layout, block.params, block.flops, block.memory
    return {
        "name": lay.name,
        "module_type": lay.module_type,
        "kind": lay.kind,
        "implementation": lay.implementation,
        "d_model": lay.d_model,
        "num_heads": lay.num_heads,
        "num_kv_heads": lay.num_kv_heads,
        "head_dim": lay.head_dim,
        "v_head_dim": lay.v_head_dim,
        "batch_size": lay.batch_size,
        "seq_len_q": lay.seq_len_q,
        "seq_len_kv": lay.seq_len_kv,
        "d_out": lay.d_out,
        "causal": lay.causal,
        "scale": lay.scale,
        "kv_shared": lay.kv_shared,
        "core_count": lay.core_count,
        "cached_width": lay.cached_width,
        "sinks": lay.sinks,
        "head_mixing": lay.head_mixing,
        "padded_head_dim": lay.padded_head_dim,
        "windowed": lay.windowed,
        "streams": lay.streams,
        "latent_width": lay.latent_width,
        "score_dtype": lay.score_dtype,
        "window": lay.window,
        "causal_alignment": lay.causal_alignment,
        "projections": {r: _projection(getattr(lay, r)) for r in ("q", "k", "v", "o")},
        "params": {
            "q": par.q,
            "k": par.k,
            "v": par.v,
            "o": par.o,
            "total": par.total,
            "textbook": par.textbook,
            "formula": par.formula,
            "formula_text": par.formula_text,
            "biases": {"q": par.q_bias, "k": par.k_bias, "v": par.v_bias, "o": par.o_bias},
            "deviations": [{"reason": d.reason, "params": d.params} for d in par.deviations],
        },
        "flops": {
            "q_proj": fl.q_proj,
            "k_proj": fl.k_proj,
            "v_proj": fl.v_proj,
            "scores": fl.scores,
            "softmax": fl.softmax,
            "context": fl.context,
            "o_proj": fl.o_proj,
            "total": fl.total,
            "causal_total": fl.causal_total,
            "causal_tiles_total": fl.causal_tiles_total,
        },
        "memory": {
            "q_bytes": mem.q_bytes,
            "k_bytes": mem.k_bytes,
            "v_bytes": mem.v_bytes,
            "scores_bytes": mem.scores_bytes,
            "scores_bytes_if_materialized": mem.scores_bytes_if_materialized,
            "kv_cache_bytes_per_token": mem.kv_cache_bytes_per_token,
            "kv_cache_bytes": mem.kv_cache_bytes,
            "kv_cache_bytes_static": mem.kv_cache_bytes_static,
        },
        "flags": [finding_to_dict(f) for f in block.findings],
        "target": None if block.target is None else target_to_dict(block.target),
        "location": location_to_dict(block.location),
    }


def target_to_dict(target: TargetEstimate) -> dict[str, Any]:
    """Kernel choice and roofline estimate on the target GPU."""
    roof = target.roofline
    return {
        "gpu": target.gpu,
        "gpu_name": target.gpu_name,
        "dtype": target.dtype,
        "kernel": target.kernel,
        "kernel_head_dim": target.kernel_head_dim,
        "padding_waste": target.padding_waste,
        "materializes_scores": target.materializes_scores,
        "reason": target.reason,
        "roofline": {
            "flops": roof.flops,
            "bytes_moved": roof.bytes_moved,
            "compute_time_s": roof.compute_time_s,
            "memory_time_s": roof.memory_time_s,
            "time_s": roof.time_s,
            "arithmetic_intensity": roof.arithmetic_intensity,
            "bound": roof.bound,
        },
    }


def timing_to_dict(timing: Timing) -> dict[str, Any]:
    """Median, min, max, spread (ms) and the number of repeats."""
    return {
        "median_ms": timing.median_ms,
        "min_ms": timing.min_ms,
        "max_ms": timing.max_ms,
        "spread_ms": timing.spread_ms,
        "repeats": timing.repeats,
    }


def measurement_to_dict(m: Measurement) -> dict[str, Any]:
    """Measured latencies and peak memory."""
    return {
        "device": m.device,
        "forward": timing_to_dict(m.forward),
        "blocks": {name: timing_to_dict(t) for name, t in m.blocks.items()},
        "peak_memory_bytes": m.peak_memory_bytes,
        "peak_memory_method": m.peak_memory_method,
    }


def scaling_to_dict(point: ScalingPoint) -> dict[str, Any]:
    """Costs at one sequence length."""
    return {
        "seq_len": point.seq_len,
        "attention_flops": point.attention_flops,
        "scores_bytes": point.scores_bytes,
        "kv_cache_bytes": point.kv_cache_bytes,
        "block_flops": dict(point.block_flops),
    }


def training_to_dict(t: TrainingCost) -> dict[str, Any]:
    """The ``training`` section: one optimizer step."""
    b = t.breakdown
    return {
        "optimizer": t.optimizer,
        "precision": t.precision,
        "checkpointing": t.checkpointing,
        "loss": t.loss,
        "batch_size": t.batch_size,
        "peak_bytes": t.peak_bytes,
        "peak_phase": t.peak_phase,
        "breakdown_bytes": {
            "params": b.params,
            "grads": b.grads,
            "optimizer_states": b.optimizer_states,
            "activations": b.activations,
            "temporaries": b.temporaries,
            "buffers": b.buffers,
        },
        "flops": t.flops,
        "blocks": [
            {"name": r.name, "saved_bytes": r.saved_bytes,
             "scores_saved_bytes": r.scores_saved_bytes}
            for r in t.blocks
        ],
        "memory_bytes": t.memory_bytes,
        "fits": t.fits,
        "max_batch_size": t.max_batch_size,
        "folded_layers": t.folded_layers,
        "ops_without_formula": dict(t.ops_without_formula),
        "convention": t.convention,
    }


def decode_to_dict(d: DecodeCost) -> dict[str, Any]:
    """The ``decode`` section: one generation step."""
    return {
        "context": d.context,
        "batch_size": d.batch_size,
        "flops_per_step": d.flops_per_step,
        "weight_bytes": d.weight_bytes,
        "kv_read_bytes": d.kv_read_bytes,
        "kv_write_bytes": d.kv_write_bytes,
        "bytes_per_step": d.bytes_per_step,
        "time_per_step_s": d.time_per_step_s,
        "tokens_per_s": d.tokens_per_s,
        "bound": d.bound,
        "kv_cache_bytes": d.kv_cache_bytes,
        "param_bytes": d.param_bytes,
        "memory_bytes": d.memory_bytes,
        "fits": d.fits,
        "blocks": [
            {"name": r.name, "flops": r.flops, "kv_read_bytes": r.kv_read_bytes,
             "time_s": r.time_s}
            for r in d.blocks
        ],
        "convention": d.convention,
        "flops_per_step_non_absorbed": d.flops_per_step_non_absorbed,
    }


def report_to_dict(report: Report) -> dict[str, Any]:
    """The whole report, per the JSON contract."""
    info, totals = report.model, report.totals
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "mhaudit", "version": __version__},
        "conventions": {"flops": FLOPS_CONVENTION, "bytes": "bytes at model.dtype",
                        "causal": CAUSAL_CONVENTION, "experts": EXPERTS_CONVENTION,
                        **report.conventions},
        "model": {
            "source": info.source,
            "class": info.class_name,
            "params_total": info.params_total,
            "param_bytes": info.param_bytes,
            "trace_method": info.trace_method,
            "device": info.device,
            "dtype": info.dtype,
            "inputs": info.inputs,
            "inputs_inferred": info.inputs_inferred,
            "location": location_to_dict(info.location),
        },
        "blocks": [block_to_dict(b) for b in report.blocks],
        "groups": [
            {"pattern": g.pattern, "count": g.count, "names": list(g.names)}
            for g in report.groups
        ],
        "totals": {
            "num_blocks": totals.num_blocks,
            "params_total": totals.params_total,
            "attention_params": totals.attention_params,
            "attention_params_share": totals.attention_params_share,
            "flops": totals.flops,
            "flops_by_family": dict(totals.flops_by_family),
            "params_active": totals.params_active,
            "attention_flops": totals.attention_flops,
            "kv_cache_bytes_per_token": totals.kv_cache_bytes_per_token,
            "param_bytes": totals.param_bytes,
            "peak_activation_bytes": totals.peak_activation_bytes,
            "buffer_bytes": totals.buffer_bytes,
            "peak_memory_bytes": totals.peak_memory_bytes,
            "measured_peak_memory_bytes": totals.measured_peak_memory_bytes,
            "latency_ms": totals.latency_ms,
        },
        "flags": [finding_to_dict(f) for f in report.findings],
        "coverage": {
            "ops_without_formula": dict(report.coverage.ops_without_formula),
            "untraced_modules": list(report.coverage.untraced_modules),
        },
    }
    if report.experts:
        data["experts"] = [
            {"module": e.module, "router": e.router, "num_experts": e.num_experts,
             "top_k": e.top_k, "tokens": e.tokens, "weights": list(e.weights)}
            for e in report.experts
        ]
    if report.scaling:
        data["scaling"] = [scaling_to_dict(p) for p in report.scaling]
    if report.measurement is not None:
        data["measurement"] = measurement_to_dict(report.measurement)
    if report.training is not None:
        data["training"] = training_to_dict(report.training)
    if report.decode is not None:
        data["decode"] = decode_to_dict(report.decode)
    data.update(report.extras)
    return data
