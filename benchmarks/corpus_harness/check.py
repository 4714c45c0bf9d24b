"""Audit one corpus entry on meta and check it against its ground truth and a real forward."""

from __future__ import annotations

import inspect
import time
from typing import Any

from zoo_harness.worker import FLOP_TOLERANCE, Result, _cpu_sdpa_formulas, _exception_line

from corpus_harness.entry import Entry, Want

FIELDS = (("heads", "num_heads"), ("kv_heads", "num_kv_heads"), ("head_dim", "head_dim"),
          ("v_head_dim", "v_head_dim"), ("d_model", "d_model"), ("kind", "kind"))


def block_problems(block: dict[str, Any], want: Want) -> list[str]:
    """How one report block differs from what its constructor declares."""
    out = [f"{key} {block.get(field)} (declared {getattr(want, key)})"
           for key, field in FIELDS if block.get(field) != getattr(want, key)]
    total = (block.get("params") or {}).get("total")
    if total != want.params:
        out.append(f"params {total} (declared {want.params})")
    return out


def as_keywords(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call as keyword inputs only (the library takes a tuple or a dict, not both)."""
    signature = inspect.signature(module.forward)
    bound = signature.bind_partial(*args, **kwargs).arguments
    out: dict[str, Any] = {}
    for name, value in bound.items():
        if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    return out


def audit_entry(entry: Entry) -> tuple[int, dict[str, Any] | None, str]:
    """``mhaudit.audit`` on the entry built under meta: exit code, report, error line."""
    import torch

    from mhaudit.api import audit
    from mhaudit.errors import MhauditError

    try:
        with torch.device("meta"):
            module, args, kwargs = entry.build()
        inputs: Any = as_keywords(module, args, kwargs) if kwargs else args
        report = audit(module.eval(), inputs, source=entry.name)
    except MhauditError as exc:
        return exc.exit_code, None, _exception_line(exc)
    except Exception as exc:  # a bug of mhaudit, not of the model
        return 4, None, _exception_line(exc)
    return 0, report.to_dict(), ""


def reference(entry: Entry) -> tuple[int, int | None, str]:
    """Parameters and FlopCounterMode's matmul + conv FLOPs of a real CPU forward."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    module, args, kwargs = entry.build()
    module.eval()
    params = sum(p.numel() for p in module.parameters())
    counter = FlopCounterMode(display=False, custom_mapping=_cpu_sdpa_formulas())
    try:  # with grad on: under no_grad, eval MultiheadAttention takes its fused fast path,
        with counter:  # _native_multi_head_attention, whose matmuls FlopCounterMode misses
            module(*args, **kwargs)
    except Exception as exc:
        return params, None, _exception_line(exc)
    return params, int(counter.get_total_flops()), ""


def compare(report: dict[str, Any], entry: Entry, params: int, flops: int | None) -> list[str]:
    """The failed checks of a report against the entry's truth and the reference."""
    blocks = report.get("blocks") or []
    failed = []
    if len(blocks) != len(entry.wants):
        failed.append(f"{len(blocks)} blocks for {len(entry.wants)} declared")
    for block, want in zip(blocks, entry.wants, strict=False):
        problems = block_problems(block, want)
        if problems:
            failed.append(f"{block.get('name')!r}: {', '.join(problems)}")
    total = report.get("model", {}).get("params_total")
    if total != params:
        failed.append(f"params_total {total} (module {params})")
    families = report.get("totals", {}).get("flops_by_family") or {}
    counted = int(families.get("matmul", 0)) + int(families.get("conv", 0))
    if flops is not None and abs(counted - flops) > FLOP_TOLERANCE * max(flops, 1):
        failed.append(f"matmul+conv FLOPs {counted} (FlopCounterMode {flops})")
    return failed


def run_entry(entry: Entry) -> Result:
    """Everything for one entry; never raises."""
    import torch

    start = time.monotonic()
    torch.set_num_threads(1)
    try:
        params, flops, forward_error = reference(entry)
    except Exception as exc:
        return Result(entry.name, "skipped", f"cannot build: {_exception_line(exc)}")
    code, report, line = audit_entry(entry)
    seconds = round(time.monotonic() - start, 1)
    if code == 4:
        return Result(entry.name, "exit 4", line, seconds=seconds)
    if report is None and forward_error:
        return Result(entry.name, "skipped", f"no real forward: {forward_error}", seconds=seconds)
    if report is None:
        return Result(entry.name, "exit 3", line, seconds=seconds)
    failed = compare(report, entry, params, flops)
    figures = {"blocks": len(report.get("blocks") or []), "declared": len(entry.wants)}
    if not report.get("blocks"):
        return Result(entry.name, "missed", "; ".join(failed), figures, seconds)
    if failed:
        return Result(entry.name, "wrong", "; ".join(failed), figures, seconds)
    note = f"no real forward for the FLOP check: {forward_error}" if forward_error else ""
    return Result(entry.name, "exact", note, figures, seconds)
