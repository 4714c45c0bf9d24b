"""The audit's FLOPs and memory checked against FlopCounterMode and MemTracker."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from mhaudit.cost.devices import dtype_bytes
from mhaudit.data import Agreement, ExpertLayer, Report, Unchecked, Verification
from mhaudit.memory.fakes import fake_forward

FLOPS_TOLERANCE = 0.0
"""matmul + conv FLOPs are the same arithmetic: they must agree exactly."""
PEAK_TOLERANCE = 0.10
"""The inference peak: allocator-free live bytes in both, within 10%."""


def verify(report: Report, model: nn.Module, args: tuple[Any, ...],
           kwargs: Mapping[str, Any]) -> Verification:
    """The report's matmul + conv FLOPs and inference peak against torch's counters, run on
    fake CPU copies of ``model``'s state and inputs (nothing allocated); with a training
    step on the report, its peak against MemTracker on one real CPU step where it fits
    (:func:`~mhaudit.verify.training.training_check`)."""
    reference, missed = _counted_flops(model, args, kwargs, report.experts)
    families = report.totals.flops_by_family
    how = "FlopCounterMode over the forward on fake tensors"
    if missed:
        how += (f", plus {missed:,} FLOPs of routed experts it does not see (tokens · k · "
                "one expert's matmuls)")
    rows = [Agreement("matmul + conv flops", families.get("matmul", 0) + families.get("conv", 0),
                      reference + missed, "FlopCounterMode", FLOPS_TOLERANCE, how)]
    if report.totals.peak_activation_bytes is not None:
        tracked = _tracked_peak(model, args, kwargs)
        own = next((p.element_size() for p in model.parameters() if p.is_floating_point()), 0)
        audited = dtype_bytes(report.model.dtype)
        scaled = tracked * audited // own if own else tracked
        how = "MemTracker's activation peak of one no_grad forward on fake tensors"
        if own and own != audited:
            how += (f", at the model's {own}-byte floats and scaled to {report.model.dtype} "
                    "as the report's bytes are")
        inputs = sum(t.numel() * (audited if t.is_floating_point() else t.element_size())
                     for t in tree_leaves((args, dict(kwargs))) if isinstance(t, torch.Tensor))
        how += ("; the report's peak plus the inputs' bytes, which MemTracker counts as "
                "activations")
        rows.append(Agreement("inference peak activation bytes",
                              report.totals.peak_activation_bytes + inputs, scaled,
                              "MemTracker", PEAK_TOLERANCE, how))
    unchecked: list[Unchecked] = []
    if report.training is not None:
        from mhaudit.verify.training import training_check

        step = training_check(report.training, model, args, kwargs)
        if isinstance(step, Agreement):
            rows.append(step)
        else:
            unchecked.append(step)
    return Verification(tuple(rows), tuple(unchecked))


def _run(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
         counter: Any, dtype: torch.dtype | None = None) -> None:
    """One no_grad forward of fake CPU copies (floating state and inputs at ``dtype``; None
    keeps their own) under ``counter``."""
    with fake_forward(model, args, kwargs, dtype) as forward:
        if hasattr(counter, "track_external"):
            counter.track_external(model)
        forward(counter)


def _cpu_flash(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any,
               out_shape: Any = None, **kwargs: Any) -> int:
    """torch's own SDPA count (``sdpa_flop_count``) for the CPU flash kernel, which the fake
    CPU run takes where a GPU runs flash, cuDNN or memory-efficient attention; torch counts
    those three, not its CPU twin."""
    return int(sdpa_flop_count(query_shape, key_shape, value_shape))  # type: ignore[no-untyped-call]


def _counted_flops(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                   experts: tuple[ExpertLayer, ...]) -> tuple[int, int]:
    """FlopCounterMode's total, and the routed-expert FLOPs it missed."""
    counter = FlopCounterMode(display=False, custom_mapping={
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash})
    _run(model, args, kwargs, counter)
    per_module = counter.get_flop_counts()
    params = dict(model.named_parameters())
    missed = 0
    for layer in experts:
        seen = sum(sum(ops.values()) for name, ops in per_module.items()
                   if name.endswith(f".{layer.module}") or name == layer.module)
        if seen or layer.num_experts < 1:
            continue  # the counter saw the experts' matmuls (a bmm over gathered weights)
        per_token = sum(2 * math.prod(params[w].shape) // layer.num_experts
                        for w in layer.weights if w in params and params[w].dim() == 3)
        missed += layer.tokens * layer.top_k * per_token
    return int(counter.get_total_flops()), missed


def _tracked_peak(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> int:
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    _run(model, args, kwargs, tracker)
    (peak,) = tracker.get_tracker_snapshot("peak").values()
    return int(next((v for k, v in peak.items() if str(k).endswith("ACT")), 0))
