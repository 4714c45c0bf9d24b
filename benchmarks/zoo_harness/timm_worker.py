"""Audit one timm model from a model file at a small image size and check it against the module."""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoo_harness.worker import FLOP_TOLERANCE, Result, _exception_line, run_cli

SIZES = (64, 96, 128, 160, 224, 256)
"""Image sizes tried in order: the first at which the model builds and runs is audited."""
MAX_PARAMS = 400_000_000
"""Models larger than this are not built on CPU here (the reference and mhaudit's CPU twin
would each hold a copy of the weights)."""
MODEL_FILE = '''"""timm's {name} at {size}x{size} pixels ({kwargs}), built without weights."""

import timm
import torch


def build_model():
    return timm.create_model({name!r}, pretrained=False, **{kwargs!r})


def example_inputs():
    return (torch.randn(1, {chans}, {size}, {size}),)
'''


@dataclass
class Built:
    """The size a model runs at, and what the real CPU module says there."""

    size: int = 0
    kwargs: dict[str, Any] = field(default_factory=dict)
    chans: int = 3
    params: int | None = None
    flops: int | None = None
    declared: list[Any] = field(default_factory=list)
    build_error: str = ""
    forward_error: str = ""


def _create(name: str, kwargs: dict[str, Any]) -> Any:
    import timm

    model = timm.create_model(name, pretrained=False, **kwargs).eval()
    # No parameter requires grad: FlopCounterMode's module tracker hooks the autograd graph of
    # any module input that does (a class token passed to a block) and fails under no_grad.
    return model.requires_grad_(False)


def _in_chans(model: Any) -> int:
    cfg = getattr(model, "pretrained_cfg", None) or {}
    size = cfg.get("input_size") if isinstance(cfg, dict) else None
    return int(size[0]) if isinstance(size, (list, tuple)) and size else 3


def _count_forward(model: Any, size: int, chans: int) -> int:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from zoo_harness.worker import _cpu_sdpa_formulas

    counter = FlopCounterMode(display=False, custom_mapping=_cpu_sdpa_formulas())
    with torch.no_grad(), counter:
        model(torch.randn(1, chans, size, size))
    return int(counter.get_total_flops())


def _too_big(name: str) -> str:
    """Why ``name`` is not built on CPU here ("" when it fits), counted on meta."""
    import torch

    try:
        with torch.device("meta"):
            model = _create(name, {})
    except Exception:  # the CPU build says why
        return ""
    params = sum(p.numel() for p in model.parameters())
    return f"{params:,} parameters, over {MAX_PARAMS:,} for a CPU forward here" \
        if params > MAX_PARAMS else ""


def _builds(name: str) -> list[tuple[int, dict[str, Any]]]:
    """(size, constructor kwargs) candidates: ``img_size`` where the constructor takes it."""
    return [(s, {"img_size": s}) for s in SIZES] + [(s, {}) for s in SIZES]


def build_reference(name: str) -> Built:
    """The first candidate size at which the model builds and runs on CPU, with its counts.

    Built under mhaudit's seed, as its CPU build for a real forward is."""
    from mhaudit.trace.real import seeded
    from zoo_harness.timm_expect import declared_modules

    built = Built()
    model, model_kwargs = None, None
    too_big = _too_big(name)
    if too_big:
        built.build_error = too_big
        return built
    with seeded():
        for size, kwargs in _builds(name):
            if model is None or kwargs != model_kwargs:
                try:
                    model, model_kwargs = _create(name, kwargs), kwargs
                except Exception as exc:
                    model = None
                    built.build_error = built.build_error or _exception_line(exc)
                    continue
            chans = _in_chans(model)
            try:
                flops = _count_forward(model, size, chans)
            except Exception as exc:
                built.forward_error = built.forward_error or _exception_line(exc)
                continue
            params = {id(p): p for p in model.parameters()}
            return Built(size, kwargs, chans, sum(p.numel() for p in params.values()), flops,
                         declared_modules(model))
    return built


def model_file(name: str, built: Built) -> str:
    """The text of a model file that builds ``name`` as the reference ran it."""
    return MODEL_FILE.format(name=name, size=built.size, kwargs=built.kwargs, chans=built.chans)


def compare(report: dict[str, Any], built: Built) -> tuple[list[str], dict[str, Any]]:
    """The failed checks of a report against the real module, and the figures compared."""
    from zoo_harness.timm_expect import compare_layouts

    blocks = report.get("blocks") or []
    failed = compare_layouts(blocks, built.declared)
    params = report.get("model", {}).get("params_total")
    if params != built.params:
        failed.append(f"params {params} (module {built.params})")
    families = report.get("totals", {}).get("flops_by_family") or {}
    flops = int(families.get("matmul", 0)) + int(families.get("conv", 0))
    ref = built.flops or 0
    if abs(flops - ref) > FLOP_TOLERANCE * max(ref, 1):
        failed.append(f"matmul+conv FLOPs {flops} (FlopCounterMode {ref})")
    figures = {"blocks": len(blocks), "attention_modules": len(built.declared),
               "params": params, "params_module": built.params, "flops": flops,
               "flops_counter": built.flops, "size": built.size}
    return failed, figures


def classify(name: str, code: int, report: dict[str, Any] | None, line: str,
             built: Built) -> Result:
    """Exact, wrong, missed, exit 3 or exit 4 for a model that built and ran."""
    if code == 4:
        return Result(name, "exit 4", line)
    if code == 3 or report is None:
        return Result(name, "exit 3" if code == 3 else "wrong", line or f"exit {code}")
    failed, figures = compare(report, built)
    if built.declared and not report.get("blocks"):
        return Result(name, "missed", "; ".join(failed), figures)
    if failed:
        return Result(name, "wrong", "; ".join(failed), figures)
    return Result(name, "exact", f"{built.size}px", figures)


def run_one(name: str) -> Result:
    """Everything for one timm model; never raises."""
    import torch

    start = time.monotonic()
    torch.set_num_threads(1)
    built = build_reference(name)
    if built.params is None:
        reason = (f"no forward at {SIZES} px: {built.forward_error}" if built.forward_error
                  else f"timm cannot build it: {built.build_error}")
        return Result(name, "skipped", reason, seconds=round(time.monotonic() - start, 1))
    with tempfile.TemporaryDirectory(prefix="timmzoo-") as folder:
        path = Path(folder) / "model.py"
        path.write_text(model_file(name, built))
        code, report, line = run_cli(path, Path(folder) / "report.json",
                                     Path(folder) / "stderr.log")
    result = classify(name, code, report, line, built)
    result.seconds = round(time.monotonic() - start, 1)
    return result


def preload() -> None:
    """Import what every model needs once, before the per-model forks."""
    import timm
    import torch.utils.flop_counter  # noqa: F401

    import mhaudit.api
    import mhaudit.cli.report_cmd  # noqa: F401

    _ = timm.create_model, json
