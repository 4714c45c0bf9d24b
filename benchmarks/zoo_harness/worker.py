"""Audit one architecture from its tiny config and check the report against the real module."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BATCH = 1
SEQ = 16
FLOP_TOLERANCE = 0.01
"""Relative difference allowed between the report's matmul + conv FLOPs and torch's count."""
AUDIT_TIMEOUT_S = 50

STATUSES = ("exact", "wrong", "missed", "exit 3", "exit 4", "skipped", "timeout")


@dataclass
class Result:
    """One architecture's outcome."""

    name: str
    status: str
    """One of STATUSES."""
    reason: str = ""
    """The failed checks, or the first error line."""
    checks: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line[:300]
    return ""


def _exception_line(exc: BaseException) -> str:
    return _first_line(f"{type(exc).__name__}: {exc}")


def run_cli(config: Path, out: Path, log: Path, extra: tuple[str, ...] = ()
            ) -> tuple[int, dict[str, Any] | None, str]:
    """``mhaudit report CONFIG --format json`` in this process: exit code, report, stderr line.

    fds 1 and 2 go to ``log`` for the run, so the model's and mhaudit's output are kept.
    ``extra`` adds options.
    """
    from mhaudit.cli import main

    args = ["report", str(config), "--format", "json", "--output", str(out),
            "--seq-len", str(SEQ), "--batch-size", str(BATCH), "--fail-on", "never",
            "--timeout", str(AUDIT_TIMEOUT_S), *extra]
    saved = os.dup(1), os.dup(2)
    with log.open("w") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            main(args, standalone_mode=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
    report = json.loads(out.read_text()) if code in (0, 1) and out.exists() else None
    return code, report, _first_line(log.read_text(errors="replace"))


@dataclass
class Reference:
    """What the real module and torch's flop counter say."""

    params: int | None = None
    flops: int | None = None
    attention: list[str] = field(default_factory=list)
    groups: dict[str, int] = field(default_factory=dict)
    """Query heads per KV head each attention module declares, by name."""
    head_dims: dict[str, int] = field(default_factory=dict)
    """The head dim each attention module declares, by name."""
    config: Any = None
    build_error: str = ""
    inputs_error: str = ""
    """mhaudit's own refusal to make example inputs for the built model."""
    forward_error: str = ""
    attention_named_params: int = 0
    """Parameters whose names say attention (``attn``, ``qkv``, ``query``, ...): a config
    may declare heads for a head the base model does not build (PP-OCR's recognition
    encoder lives in the task head, the base model is the backbone)."""


ATTENTION_PARAM_WORDS = ("attn", "attention", "qkv", "query", "q_proj", "to_q")
def _eager_experts(model: Any) -> None:
    """Route experts by loops, so FlopCounterMode sees every routed token's matmuls."""
    setter = getattr(model, "set_experts_implementation", None)
    if setter is None:
        return
    try:
        setter("eager")
    except Exception:  # a model without swappable experts
        return


def _cpu_sdpa_formulas() -> dict[Any, Any]:
    """FlopCounterMode counts SDPA's GPU kernels; count the CPU flash kernel the same way."""
    import torch
    from torch.utils.flop_counter import sdpa_flop_count

    def cpu_flash(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
        return int(sdpa_flop_count(query, key, value))

    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    return {} if op is None else {op: cpu_flash}


def reference(config: Path) -> Reference:
    """Build the same model on CPU (real weights), count its parameters and forward FLOPs.

    Built and run under mhaudit's seed, as its CPU build for a real forward is: where the
    weights or the forward's draws decide a shape (a routing, a predicted duration), the
    reference and the audit see the same one."""
    from mhaudit.trace.real import seeded

    with seeded():  # mhaudit's CPU build: where values decide a shape, the same values
        return _reference(config)


def _reference(config: Path) -> Reference:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from mhaudit.errors import LoadError
    from mhaudit.load.hfconfig import load_hf_config
    from zoo_harness.expect import attention_modules, declared_groups, declared_head_dims

    ref = Reference()
    try:
        model, args, kwargs = load_hf_config(config, BATCH, SEQ)
    except LoadError as exc:
        if exc.__cause__ is None:  # mhaudit refused (no inputs it can make), not the model
            ref.inputs_error = _exception_line(exc)
        else:
            ref.build_error = _exception_line(exc.__cause__)
        return ref
    except Exception as exc:
        ref.build_error = _exception_line(exc)
        return ref
    ref.config = getattr(model, "config", None)
    ref.params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    ref.attention = attention_modules(model)
    ref.groups = declared_groups(model, ref.attention)
    ref.head_dims = declared_head_dims(model, ref.attention)
    ref.attention_named_params = sum(
        any(word in name.lower() for word in ATTENTION_PARAM_WORDS)
        for name, _ in model.named_parameters())
    _eager_experts(model)
    counter = FlopCounterMode(display=False, custom_mapping=_cpu_sdpa_formulas())
    try:
        with torch.no_grad(), counter:
            model(*args, **kwargs)
        ref.flops = int(counter.get_total_flops())
    except Exception as exc:
        ref.forward_error = _exception_line(exc)
    return ref


def compare(report: dict[str, Any], ref: Reference) -> tuple[list[str], dict[str, Any]]:
    """The failed checks of a report against the reference, and the figures compared."""
    from zoo_harness.expect import block_problems, expected_layouts, module_name

    blocks = report.get("blocks") or []
    layouts = expected_layouts(ref.config) if ref.config is not None else []
    failed: list[str] = []
    for block in blocks:
        name = module_name(str(block.get("name")))
        problems = block_problems(block, layouts, ref.groups.get(name), ref.head_dims.get(name))
        if problems:
            failed.append(f"layout {block.get('name')!r}: {'; '.join(problems)}")
    params = report.get("model", {}).get("params_total")
    if params != ref.params:
        failed.append(f"params {params} (module {ref.params})")
    families = report.get("totals", {}).get("flops_by_family") or {}
    flops = int(families.get("matmul", 0)) + int(families.get("conv", 0))
    if ref.flops is not None and abs(flops - ref.flops) > FLOP_TOLERANCE * max(ref.flops, 1):
        failed.append(f"matmul+conv FLOPs {flops} (FlopCounterMode {ref.flops})")
    if len(blocks) < len(ref.attention):
        failed.append(f"{len(blocks)} blocks for {len(ref.attention)} attention modules")
    figures = {"blocks": len(blocks), "attention_modules": len(ref.attention),
               "params": params, "params_module": ref.params, "flops": flops,
               "flops_counter": ref.flops}
    return failed, figures


def classify(name: str, code: int, report: dict[str, Any] | None, line: str,
             ref: Reference) -> Result:
    """Exact, wrong, missed, exit 3, exit 4 or skipped, from the run and the reference."""
    if code == 4:
        return Result(name, "exit 4", line)
    if ref.build_error:
        return Result(name, "skipped", f"transformers cannot build it: {ref.build_error}")
    if code == 3 or report is None:
        if ref.forward_error:
            return Result(name, "skipped", f"no forward: {ref.forward_error}")
        return Result(name, "exit 3" if code == 3 else "wrong", line or f"exit {code}")
    failed, figures = compare(report, ref)
    expects = ref.attention or (expected_layout_count(ref) and ref.attention_named_params)
    if not report.get("blocks") and expects:
        return Result(name, "missed", "; ".join(failed) or "no attention blocks", figures)
    if failed:
        return Result(name, "wrong", "; ".join(failed), figures)
    note = f"no forward for the flop check: {ref.forward_error}" if ref.forward_error else ""
    return Result(name, "exact", note, figures)


def expected_layout_count(ref: Reference) -> int:
    from zoo_harness.expect import expected_layouts

    found = expected_layouts(ref.config) if ref.config is not None else []
    return sum(e.declared for e in found)


def preload() -> None:
    """Import what every architecture needs once, before the per-architecture forks."""
    import torch.utils.flop_counter  # noqa: F401
    import transformers
    import transformers.modeling_utils

    import mhaudit.api
    import mhaudit.cli.report_cmd
    import mhaudit.load.hfconfig  # noqa: F401
    import zoo_harness.expect  # noqa: F401

    _ = transformers.AutoConfig, transformers.AutoModel, transformers.PreTrainedModel


def run_one(name: str) -> Result:
    """Everything for one model type; never raises."""
    import torch

    from zoo_harness.tiny import tiny_config

    start = time.monotonic()
    torch.set_num_threads(1)
    try:
        data = tiny_config(name)
    except Exception as exc:
        return Result(name, "skipped", f"config class: {_exception_line(exc)}")
    with tempfile.TemporaryDirectory(prefix="zoo-") as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps(data, indent=1, default=str))
        code, report, line = run_cli(path, Path(folder) / "report.json",
                                     Path(folder) / "stderr.log")
        ref = reference(path)
    result = classify(name, code, report, line, ref)
    result.seconds = round(time.monotonic() - start, 1)
    return result
