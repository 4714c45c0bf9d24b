"""The full result of an audit, and its JSON form (schema version 1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mhaudit.data.blocks import AttentionBlock, BlockGroup, Coverage, ModelInfo, Totals
from mhaudit.data.costs import ExpertLayer, Measurement, ScalingPoint
from mhaudit.data.findings import Finding
from mhaudit.data.phases import DecodeCost, TrainingCost
from mhaudit.data.schema import (
    CAUSAL_CONVENTION,
    EXPERTS_CONVENTION,
    FLOPS_CONVENTION,
    SCHEMA_VERSION,
    SCORE_BIAS_CONVENTION,
    SCORE_FORM_CONVENTION,
    TOOL_VERSION,
    block_to_dict,
    data_dependence_to_dict,
    decode_to_dict,
    finding_to_dict,
    measurement_to_dict,
    model_to_dict,
    scaling_to_dict,
    totals_to_dict,
    training_to_dict,
    verification_to_dict,
)
from mhaudit.data.verify import Verification


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
    verification: Verification | None = None
    """The figures beside torch's counters, with ``--verify``."""
    conventions: dict[str, str] = field(default_factory=dict)
    """Counting conventions that depend on the model, by name, beside the fixed ones
    (``latent_attention_decode``: the latent-attention decode form, absorbed by default)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (schema version 1) as plain Python data."""
        return report_to_dict(self)


def _sections(report: Report) -> dict[str, Any]:
    """The optional sections, present only when the audit made them."""
    data: dict[str, Any] = {}
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
    if report.verification is not None:
        data["verification"] = verification_to_dict(report.verification)
    return data


def report_to_dict(report: Report) -> dict[str, Any]:
    """The whole report, per the JSON contract."""
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "mhaudit", "version": TOOL_VERSION},
        "conventions": {"flops": FLOPS_CONVENTION, "bytes": "bytes at model.dtype",
                        "causal": CAUSAL_CONVENTION, "experts": EXPERTS_CONVENTION,
                        "score_bias": SCORE_BIAS_CONVENTION,
                        "score_form": SCORE_FORM_CONVENTION, **report.conventions},
        "model": model_to_dict(report.model),
        "blocks": [block_to_dict(b) for b in report.blocks],
        "groups": [
            {"pattern": g.pattern, "count": g.count, "names": list(g.names)}
            for g in report.groups
        ],
        "totals": totals_to_dict(report.totals),
        "flags": [finding_to_dict(f) for f in report.findings],
        "coverage": {
            "ops_without_formula": dict(report.coverage.ops_without_formula),
            "untraced_modules": list(report.coverage.untraced_modules),
            "untraced_attention": list(report.coverage.untraced_attention),
            "unread_projections": list(report.coverage.unread_projections),
            "unread_cores": [{"module": u.module, "op": u.op, "why": u.why}
                             for u in report.coverage.unread_cores],
            "declared_mismatch": [
                {"module": m.module, "attribute": m.attribute, "declared": m.declared,
                 "detected": m.detected} for m in report.coverage.declared_mismatch],
        },
    }
    if report.coverage.inputs_left_out:
        data["coverage"]["inputs_left_out"] = [
            {"input": i.name, "why": i.why} for i in report.coverage.inputs_left_out]
    if report.coverage.untraced_towers:
        data["coverage"]["untraced_towers"] = list(report.coverage.untraced_towers)
    if report.coverage.data_dependent is not None:
        data["coverage"]["data_dependent"] = data_dependence_to_dict(
            report.coverage.data_dependent)
    data.update(_sections(report))
    data.update(report.extras)
    return data
