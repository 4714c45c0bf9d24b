"""The JSON report (schema version 1) as plain Python data; field names are a public contract."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from mhaudit.data.blocks import AttentionBlock, ModelInfo, Totals
from mhaudit.data.costs import Measurement, ScalingPoint, TargetEstimate, Timing
from mhaudit.data.findings import Finding
from mhaudit.data.layout import Layout, ParamBreakdown, Projection
from mhaudit.data.location import SourceLocation
from mhaudit.data.parallel import parallel_to_dict
from mhaudit.data.phases import DecodeCost, TrainingCost
from mhaudit.data.tracing import DataDependence
from mhaudit.data.verify import Verification
from mhaudit.data.whatif import WhatIf

TOOL_VERSION = "0.1.0"
"""The version of mhaudit (``mhaudit.__version__``), written into every report."""

SCHEMA_VERSION = 1

FLOPS_CONVENTION = (
    "flops count 2 per multiply-add of the dense computation; bias adds are excluded"
)
EXPERTS_CONVENTION = (
    "routed experts are costed at top-k dispatch: tokens x k x one expert's FLOPs "
    "(routing is data-dependent; on meta tensors every token is assumed routed to k experts)"
)
SCORE_BIAS_CONVENTION = (
    "learned score biases (relative-position tables and embeddings, their projections, "
    "content and position bias vectors) are outside params q, k, v, o and total: each "
    "block lists them in params.score_bias, a table shared by layers in the first block "
    "that reads it; buffers such as ALiBi slopes hold no parameters"
)
SCORE_FORM_CONVENTION = (
    "score_form says how a block weighs V: softmax (an n_q x n_kv softmax of QK^T), kernel "
    "(QK^T through another elementwise map; flops.softmax counts the map), linear "
    "(phi(K)^T V first: no n x n matrix), separable (one score per token pooled into a "
    "context vector; one head over the width, the scores are the width-1 Q projection), "
    "channel (d_k x d_k scores per head over the channels, contracted over the tokens; "
    "heads are the channel groups), query_softmax (softmax over the queries, as slot "
    "attention normalises, then renormalised over the keys), unfolded (local attention as "
    "unfold, multiply and sum: n x window scores); scores_bytes counts what each form writes"
)
FLEX_CONVENTION = (
    "a flex block (torch's flex_attention) counts QK^T, softmax and PV over the 128x128 "
    "score tiles its block mask visits, partial and full (flops.visited_fraction of them), "
    "plus score_mod's pointwise ops per visited score in flops.softmax; flops.dense_core is "
    "the core over every tile, and FlopCounterMode counts the products of every tile"
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
        "groups": p.groups,
    }


def _layout_to_dict(lay: Layout) -> dict[str, Any]:
    """The layout fields of a block entry: kind, widths, head counts and shapes."""
    fields = ("kind", "implementation", "d_model", "num_heads", "num_kv_heads", "head_dim",
              "v_head_dim", "batch_size", "seq_len_q", "seq_len_kv", "d_out", "causal", "scale",
              "kv_shared", "core_count", "cached_width", "sinks", "head_mixing",
              "padded_head_dim", "windowed", "streams", "latent_width", "score_dtype", "window",
              "window_chunk", "global_keys", "causal_alignment", "score_form",
              "explicit_mask", "dropout_p", "sdpa_gqa")
    data: dict[str, Any] = {"name": lay.name, "module_type": lay.module_type}
    data.update({key: getattr(lay, key) for key in fields})
    if lay.block_mask_read is not None:
        data["block_mask_read"] = lay.block_mask_read
    if lay.mask_unknown is not None:
        data["mask_unknown"] = lay.mask_unknown
    if lay.tied_rows != 1:
        data["tied_rows"] = lay.tied_rows
    data["projections"] = {r: _projection(getattr(lay, r)) for r in ("q", "k", "v", "o")}
    return data


def _params_to_dict(par: ParamBreakdown) -> dict[str, Any]:
    return {
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
        "score_bias": par.score_bias,
        **({"score_map": par.score_map} if par.score_map else {}),
        **({"kv_transform": par.kv_transform} if par.kv_transform else {}),
        **({"absorbed": par.absorbed} if par.absorbed else {}),
    }


_FLOP_FIELDS = ("q_proj", "k_proj", "v_proj", "scores", "softmax", "context", "o_proj", "total",
                "causal_total", "causal_tiles_total")
_BLOCK_MASK_FIELDS = ("visited_fraction", "dense_core")
"""Flop fields of a core with a block mask (flex_attention), present only on such blocks."""
_MEMORY_FIELDS = ("q_bytes", "k_bytes", "v_bytes", "scores_bytes",
                  "scores_bytes_if_materialized", "kv_cache_bytes_per_token", "kv_cache_bytes",
                  "kv_cache_bytes_static")


def block_to_dict(block: AttentionBlock) -> dict[str, Any]:
    """One entry of ``blocks``."""
    data = _layout_to_dict(block.layout)
    data["params"] = _params_to_dict(block.params)
    data["flops"] = {key: getattr(block.flops, key) for key in _FLOP_FIELDS}
    if block.flops.visited_fraction is not None:
        data["flops"].update({key: getattr(block.flops, key) for key in _BLOCK_MASK_FIELDS})
    if block.flops.score_map:
        data["flops"]["score_map"] = block.flops.score_map
    data["memory"] = {key: getattr(block.memory, key) for key in _MEMORY_FIELDS}
    data["flags"] = [finding_to_dict(f) for f in block.findings]
    data["target"] = None if block.target is None else target_to_dict(block.target)
    data["location"] = location_to_dict(block.location)
    return data


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
    """The ``training`` section: one optimizer step (``parallel`` with a plan)."""
    b = t.breakdown
    data = {
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
        "attention_kernel": t.attention_kernel,
        "attention_kernel_reason": t.attention_kernel_reason,
        "host_state_bytes": t.host_state_bytes,
        "timeline": [{"step": p.step, "live_bytes": p.live_bytes} for p in t.timeline],
        "timeline_peak_index": t.timeline_peak_index,
        "rung": t.rung,
        "bounds": list(t.bounds),
    }
    if t.parallel is not None:
        data["parallel"] = parallel_to_dict(t.parallel)
    return data


def decode_to_dict(d: DecodeCost) -> dict[str, Any]:
    """The ``decode`` section: one generation step (``parallel`` with a plan)."""
    data = {
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
        "applicable": d.applicable,
        "prefill_only_flops": d.prefill_only_flops,
        "prefill_only_weight_bytes": d.prefill_only_weight_bytes,
        "by_context": [
            {"context": p.context, "flops_per_step": p.flops_per_step,
             "kv_read_bytes": p.kv_read_bytes, "bytes_per_step": p.bytes_per_step,
             "time_per_step_s": p.time_per_step_s, "bound": p.bound}
            for p in d.by_context
        ],
    }
    if d.parallel is not None:
        data["parallel"] = parallel_to_dict(d.parallel)
    return data


_TOTAL_FIELDS = ("num_blocks", "params_total", "attention_params", "attention_params_share",
                 "flops", "flops_by_family", "params_active", "attention_flops",
                 "kv_cache_bytes_per_token", "param_bytes", "peak_activation_bytes",
                 "buffer_bytes", "peak_memory_bytes", "peak_activation_is_lower_bound",
                 "measured_peak_memory_bytes", "latency_ms")


def model_to_dict(info: ModelInfo) -> dict[str, Any]:
    return {
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
        **({"note": info.note} if info.note else {}),
    }


def totals_to_dict(totals: Totals) -> dict[str, Any]:
    data = {key: getattr(totals, key) for key in _TOTAL_FIELDS}
    data["flops_by_family"] = dict(totals.flops_by_family)
    return data


def data_dependence_to_dict(dep: DataDependence) -> dict[str, Any]:
    """``coverage.data_dependent``: the rung that answered, why the earlier ones gave up,
    the real-forward decision and any stated bounds."""
    real = dep.real_forward
    return {
        "answered_by": dep.rung,
        "exact": dep.exact,
        "causes": [{"rung": rung, "cause": cause} for rung, cause in dep.causes],
        "real_forward": None if real is None else {
            "ran": real.ran, "reason": real.reason, "weights_bytes": real.weights_bytes,
            "limit_bytes": real.limit_bytes},
        "bounds": list(dep.bounds),
    }


def verification_to_dict(v: Verification) -> dict[str, Any]:
    """The ``verification`` section: each figure beside torch's counter."""
    return {
        "agrees": v.agrees,
        "rows": [{"figure": r.figure, "ours": r.ours, "reference": r.reference,
                  "counter": r.counter, "difference": r.difference, "tolerance": r.tolerance,
                  "agrees": r.agrees, "how": r.how} for r in v.rows],
        "unchecked": [{"figure": u.figure, "reason": u.reason} for u in v.unchecked],
        "declared_mismatch": len(v.declared_mismatch),
    }


def whatif_to_dict(result: WhatIf) -> dict[str, Any]:
    """A what-if sweep: ``spec``, ``gpu``, ``by_heads``, ``by_kv_heads`` and the merged ``rows``."""
    data = asdict(result)
    data["rows"] = [asdict(r) for r in result.rows]
    return data
