"""Audit one architecture from its tiny config and check the report against the real module."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
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
    """What the real module, its conventional inputs and torch's flop counter say."""

    params: int | None = None
    flops: int | None = None
    attention: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    """The attention modules the conventional forward called: each must be a block of
    mhaudit's own audit (a tower no forward runs, a speech encoder beside a text path, is
    no block of either)."""
    declared: dict[str, Any] = field(default_factory=dict)
    """What each attention module declares (heads, KV heads, head dim, width), by name."""
    roles: dict[str, Any] = field(default_factory=dict)
    """Each attention module's parameters by role, where its layers name their roles."""
    inputs: dict[str, Any] = field(default_factory=dict)
    """The conventional inputs' specs (zoo_harness.inputs.Spec) by name."""
    config: Any = None
    build_error: str = ""
    forward_error: str = ""
    """Why the conventional inputs do not run the model (then it is skipped)."""
    model: Any = None
    """The built model, for what a block's own module declares when it is inside no
    attention module (a pointer head's single bilinear score)."""
    attention_named_params: int = 0
    """Parameters whose names say attention (``attn``, ``qkv``, ``query``, ...), for models
    whose attention classes are not called attention."""


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
    """Build the same model on CPU (real weights) by transformers' own means, count its
    parameters and, on its conventional inputs, its forward FLOPs.

    Built under mhaudit's seed, as its CPU build for a real forward is: where the weights
    decide a shape (a routing), the reference and the audit see the same one."""
    from mhaudit.trace.real import seeded

    with seeded():
        return _reference(config)


def _build(config_path: Path) -> Any:
    """The model of a config.json as transformers builds it (:func:`_build_data`)."""
    return _build_data(json.loads(config_path.read_text()))


def _build_data(data: dict[str, Any]) -> Any:
    """The model of config ``data`` as transformers builds it: the config class's fields,
    then ``AutoModel.from_config``."""
    import transformers

    fields = {k: v for k, v in data.items() if k not in ("model_type", "transformers_version")}
    config = transformers.AutoConfig.for_model(data["model_type"], **fields)
    return transformers.AutoModel.from_config(config)


def _reference(config: Path) -> Reference:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from zoo_harness.expect import attention_modules, declared_layouts
    from zoo_harness.inputs import NoConvention, conventional_inputs, make
    from zoo_harness.roles import kv_from_layers, query_width, roles

    ref = Reference()
    try:
        model = _build(config).eval()
    except Exception as exc:
        ref.build_error = _exception_line(exc)
        return ref
    ref.config, ref.model = getattr(model, "config", None), model
    ref.params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    ref.attention = attention_modules(model)
    ref.declared = declared_layouts(model, ref.attention)
    ref.attention_named_params = sum(
        any(word in name.lower() for word in ATTENTION_PARAM_WORDS)
        for name, _ in model.named_parameters())
    for name, own in ref.declared.items():  # what the module's own layers say
        module = model.get_submodule(name)
        width = query_width(module)
        ref.declared[name] = replace(own, width=width or own.width,
                                     kv_heads=own.kv_heads or kv_from_layers(module, own))
    ref.roles = {n: r for n in ref.attention
                 if (r := roles(model.get_submodule(n), ref.declared.get(n)))}
    try:
        candidates = conventional_inputs(model)
    except NoConvention as exc:
        ref.forward_error = str(exc)
        return ref
    _eager_experts(model)
    ran: set[str] = set()
    for name in ref.attention:
        model.get_submodule(name).register_forward_hook(
            lambda *_, name=name: ran.add(name))  # type: ignore[misc]
    for specs in candidates:
        counter = FlopCounterMode(display=False, custom_mapping=_cpu_sdpa_formulas())
        ran.clear()
        try:
            with torch.no_grad(), counter:
                model(**make(specs))
        except Exception as exc:
            ref.forward_error = ref.forward_error or _exception_line(exc)
            continue
        ref.inputs, ref.flops, ref.forward_error = specs, int(counter.get_total_flops()), ""
        ref.ran = sorted(ran)
        break
    return ref


def _own(block: dict[str, Any], ref: Reference) -> Any:
    """What the module a block names declares, for a block inside no attention module."""
    from zoo_harness.expect import declared, module_name
    from zoo_harness.roles import kv_from_layers, query_width

    try:
        module = ref.model.get_submodule(module_name(str(block.get("name"))))
    except (AttributeError, TypeError):
        return None
    own = declared(module)
    return replace(own, width=query_width(module) or own.width,
                   kv_heads=own.kv_heads or kv_from_layers(module, own))


def _block_checks(blocks: list[dict[str, Any]], ref: Reference) -> list[str]:
    """Each block's layout against its module's declarations and the config, and its
    W_Q, W_K, W_V, W_O against its module's own layers where they name their roles."""
    from zoo_harness.expect import block_problems, expected_layouts, owner
    from zoo_harness.roles import role_problems

    layouts = expected_layouts(ref.config) if ref.config is not None else []
    owners = [owner(str(b.get("name")), ref.attention) for b in blocks]
    failed: list[str] = []
    for block, name in zip(blocks, owners, strict=True):
        own = ref.declared.get(name) if name is not None else _own(block, ref)
        problems = block_problems(block, layouts, own)
        module_roles = ref.roles.get(name) if name is not None else None
        if module_roles is not None and owners.count(name) == 1:
            params = block.get("params") or {}
            problems += role_problems({r: int(params.get(r) or 0) for r in "qkvo"},
                                      module_roles)
        if problems:
            failed.append(f"layout {block.get('name')!r}: {'; '.join(problems)}")
    return failed


def compare(report: dict[str, Any], ref: Reference, flops: int | None = None
            ) -> tuple[list[str], dict[str, Any]]:
    """The failed checks of a report against the reference, and the figures compared.
    ``flops``: the matmul + conv FLOPs mhaudit reports on the conventional inputs."""
    from zoo_harness.expect import owner

    blocks = report.get("blocks") or []
    failed = _block_checks(blocks, ref)
    params = report.get("model", {}).get("params_total")
    if params != ref.params:
        failed.append(f"params {params} (module {ref.params})")
    if flops is not None and ref.flops is not None \
            and abs(flops - ref.flops) > FLOP_TOLERANCE * max(ref.flops, 1):
        failed.append(f"matmul+conv FLOPs {flops} (FlopCounterMode {ref.flops})")
    unread = [n for n in ref.ran if not any(owner(str(b.get("name")), [n]) for b in blocks)]
    if unread:
        failed.append(f"{len(unread)} of the {len(ref.ran)} attention modules the forward "
                      f"runs are no block ({unread[0]}, ...)")
    checked = sum(1 for b in blocks if owner(str(b.get("name")), ref.attention) in ref.roles)
    figures = {"blocks": len(blocks), "attention_modules": len(ref.attention),
               "attention_modules_run": len(ref.ran),
               "params": params, "params_module": ref.params, "flops": flops,
               "flops_counter": ref.flops, "blocks_role_checked": checked}
    return failed, figures


def matmul_conv(report: dict[str, Any] | None) -> int | None:
    """A report's matmul + conv FLOPs (what FlopCounterMode counts), None without one."""
    if report is None:
        return None
    families = report.get("totals", {}).get("flops_by_family") or {}
    return int(families.get("matmul", 0)) + int(families.get("conv", 0))


@dataclass
class Runs:
    """mhaudit's two audits: the config.json with its own inputs, the model file with the
    conventional ones."""

    code: int
    report: dict[str, Any] | None
    line: str
    code_conventional: int = 0
    report_conventional: dict[str, Any] | None = None
    line_conventional: str = ""


def _declares_heads(ref: Reference) -> bool:
    from zoo_harness.expect import expected_layouts

    return ref.config is not None and any(e.declared for e in expected_layouts(ref.config))


def classify(name: str, runs: Runs, ref: Reference) -> Result:
    """Exact, wrong, missed, exit 3, exit 4 or skipped, from the runs and the reference.

    Skipped depends on the reference alone: transformers cannot build the model, or its
    conventional inputs do not run it. Every other failure is mhaudit's, its own inputs'
    included."""
    if 4 in (runs.code, runs.code_conventional):
        return Result(name, "exit 4", runs.line if runs.code == 4 else runs.line_conventional)
    if ref.build_error:
        return Result(name, "skipped", f"transformers cannot build it: {ref.build_error}")
    if ref.forward_error:
        return Result(name, "skipped", f"no forward on conventional inputs: {ref.forward_error}")
    if runs.code == 3 or runs.report is None:
        return Result(name, "exit 3" if runs.code == 3 else "wrong",
                      runs.line or f"exit {runs.code}")
    if runs.code_conventional == 3 or runs.report_conventional is None:
        line = runs.line_conventional or f"exit {runs.code_conventional}"
        return Result(name, "exit 3", f"on conventional inputs: {line}")
    failed, figures = compare(runs.report, ref, matmul_conv(runs.report_conventional))
    expects = ref.attention or (_declares_heads(ref) and ref.attention_named_params)
    if not runs.report.get("blocks") and expects:
        return Result(name, "missed", "; ".join(failed) or "no attention blocks", figures)
    if failed:
        return Result(name, "wrong", "; ".join(failed), figures)
    return Result(name, "exact", "", figures)


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


def _runs(data: dict[str, Any]) -> bool | None:
    """Whether transformers builds the model of config ``data`` and runs it on one of its
    conventional input sets; None when it cannot build it at all."""
    import torch

    from zoo_harness.inputs import conventional_inputs, make

    try:
        model = _build_data(data).eval()
        candidates = conventional_inputs(model)
    except Exception:  # NoConvention included
        return None
    for specs in candidates:
        try:
            with torch.no_grad():
                model(**make(specs))
            return True
        except Exception:
            continue
    return False


def _free_towers(name: str) -> tuple[dict[str, Any], list[str]]:
    """The tiny config with a free head dim in every sub-config whose own model transformers
    runs with it; a sub-config (a vision tower) whose model transformers does not run on
    its own with a free head dim (it fails, or needs inputs no convention makes) keeps
    head dim = width / heads, and is named: a free head dim no forward has run is no
    config transformers supports."""
    from zoo_harness.tiny import tiny_config

    free, plain = tiny_config(name, free_head_dim=True), tiny_config(name)
    kept = []
    for key, sub in free.items():
        if isinstance(sub, dict) and "model_type" in sub and sub != plain.get(key) \
                and _runs(sub) is not True:
            free[key] = plain[key]
            kept.append(key)
    return free, kept


def _prepare(name: str, folder: Path) -> tuple[Path, Reference, str]:
    """The tiny config with a free head dim (FREE_HEAD_DIM wherever the config declares a
    head dim; see :func:`_free_towers`), or, where transformers cannot build or run that,
    head dim = width / heads; its reference; and a note of where the second was needed."""
    from zoo_harness.tiny import tiny_config

    path = folder / "config.json"
    free, kept = _free_towers(name)
    plain = tiny_config(name)
    for data in (free, plain):
        path.write_text(json.dumps(data, indent=1, default=str))
        ref = reference(path)
        if data is free and free != plain and (ref.build_error or ref.forward_error):
            continue
        if data is plain and free != plain:
            return path, ref, "head dim = width / heads (the model needs it)"
        note = f"head dim = width / heads in {', '.join(kept)}" if kept else ""
        return path, ref, note
    return path, ref, ""


def run_one(name: str) -> Result:
    """Everything for one model type; never raises."""
    import torch

    from zoo_harness.inputs import model_file

    start = time.monotonic()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="zoo-") as tmp:
        folder = Path(tmp)
        try:
            path, ref, note = _prepare(name, folder)
        except Exception as exc:
            return Result(name, "skipped", f"config class: {_exception_line(exc)}")
        code, report, line = run_cli(path, folder / "report.json", folder / "stderr.log")
        runs = Runs(code, report, line)
        if ref.inputs and not ref.build_error and not ref.forward_error:
            source = folder / "model.py"
            source.write_text(model_file(ref.inputs))
            runs.code_conventional, runs.report_conventional, runs.line_conventional = \
                run_cli(source, folder / "report-conventional.json", folder / "stderr2.log")
    result = classify(name, runs, ref)
    if note and result.status != "skipped":
        result.checks["note"] = note
        result.reason = "; ".join(part for part in (result.reason, note) if part)
    result.seconds = round(time.monotonic() - start, 1)
    return result
