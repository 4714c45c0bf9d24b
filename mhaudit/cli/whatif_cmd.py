"""``mhaudit whatif``: the costs of alternative head layouts, from a spec or a model's block."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import click
from tabulate import tabulate

from mhaudit.cli.common import audit_quietly, fail, write_output
from mhaudit.cost.devices import DEFAULT_GPU, canonical_dtype, get_profile
from mhaudit.data import AttentionBlock
from mhaudit.errors import ConfigError, MhauditError
from mhaudit.render.units import seconds
from mhaudit.rules.heads import fmt_bytes, fmt_si
from mhaudit.whatif import LayoutSpec, WhatIf, WhatIfRow, plot_whatif, spec_from_block
from mhaudit.whatif import whatif as run_whatif

DEFAULT_SEQ_LEN = 2048


def _int_list(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(f"--try-heads: expected comma-separated integers, got {text!r}") from None


def _cells(row: WhatIfRow, measured: bool) -> list[Any]:
    kernel = row.backend + (" (scores in HBM)" if row.materializes_scores else "")
    cells: list[Any] = [
        "*" if row.current else "", row.heads, row.kv_heads, row.head_dim, f"{row.params:,}",
        fmt_si(row.flops), fmt_bytes(row.scores_bytes), fmt_bytes(row.kv_cache_bytes_per_token),
        kernel, row.flash_kernel_dim or "-", f"{row.padding_waste:.1%}",
        f"{seconds(row.est_time_s)} ({row.bound})", seconds(row.decode_step_s),
        fmt_bytes(row.decode_kv_read_bytes), fmt_bytes(row.train_scores_saved_bytes),
    ]
    if measured:
        cells.append("-" if row.measured_ms is None else f"{row.measured_ms:.3g} ms")
    cells.append(",".join(row.flags) or "-")
    return cells


def render_table(result: WhatIf) -> str:
    """The what-if table with a header line and a reading note."""
    spec = result.spec
    measured = any(r.measured_ms is not None for r in result.rows)
    headers = ["", "h", "h_kv", "d_k", "params", "FLOPs", "scores", "KV/token", "kernel",
               "flash d", "pad", "est. time", "decode step", "KV read", "train scores"] + (
                   ["measured"] if measured else []) + ["flags"]
    head = (f"what-if for {spec.name}: d_model {spec.d_model}, width h·d_k {spec.inner_width}, "
            f"b {spec.batch_size}, n {spec.seq_len}, {spec.dtype}, {spec.implementation}, "
            f"on {result.gpu}")
    mha = {r.params for r in result.rows if r.kv_heads == r.heads}
    params = (f"params stay {mha.pop():,} for every h with h_kv = h (textbook 4·d² + biases: "
              f"{result.rows[0].textbook_params:,})" if len(mha) == 1 else "params vary with h")
    note = (f"{params}; the score matrix b·h·n_q·n_kv grows linearly with h; the KV cache per "
            "token scales with h_kv·d_k. decode step: one new token per sequence at n_kv cached "
            "tokens; train scores: score-shaped bytes the forward keeps for the backward. "
            "* marks the current layout.")
    body = tabulate([_cells(r, measured) for r in result.rows], headers=headers,
                    disable_numparse=True)
    return f"{head}\n{body}\n{note}"


def _pick_block(
    blocks: tuple[AttentionBlock, ...], name: str | None, target: str
) -> AttentionBlock:
    if not blocks:
        raise ConfigError(f"no attention blocks found in {target}",
                          "Run `mhaudit report` on it to see what was detected.")
    if name is None:
        return blocks[0]
    for block in blocks:
        if block.name == name:
            return block
    names = ", ".join(repr(b.name) for b in blocks[:5]) + (" …" if len(blocks) > 5 else "")
    raise ConfigError(f"no attention block named {name!r} in {target}", f"Blocks: {names}.")


def _model_spec(target: str, block_name: str | None, opts: dict[str, Any]) -> LayoutSpec:
    from mhaudit.api import AuditOptions

    given = {k: opts[k] for k in ("batch_size", "seq_len", "dtype", "gpu") if opts[k] is not None}
    report = audit_quietly(target, AuditOptions(**given))
    block = _pick_block(tuple(report.blocks), block_name, target)
    spec = spec_from_block(block, opts["dtype"] or canonical_dtype(str(report.model.dtype)))
    changes = {k: opts[k] for k in ("implementation", "causal") if opts[k] is not None}
    return dataclasses.replace(spec, **changes) if changes else spec


def _spec(opts: dict[str, Any]) -> LayoutSpec:
    if opts["d_model"] is None or opts["heads"] is None:
        raise ConfigError("whatif needs a model file or --d-model and --heads",
                          "Try: mhaudit whatif --d-model 4096 --heads 32 --kv-heads 8.")
    return LayoutSpec(
        d_model=opts["d_model"], heads=opts["heads"], kv_heads=opts["kv_heads"] or opts["heads"],
        seq_len=opts["seq_len"] or DEFAULT_SEQ_LEN, batch_size=opts["batch_size"] or 1,
        dtype=opts["dtype"] or "bfloat16", head_dim=opts["head_dim"],
        causal=True if opts["causal"] is None else opts["causal"],
        implementation=opts["implementation"] or "sdpa", bias=opts["bias"],
    )


@click.command("whatif")
@click.argument("target", required=False)
@click.option("--block", "block_name", help="Module name of the block to vary (default: first).")
@click.option("--d-model", type=int, help="Model width d (spec mode).")
@click.option("--heads", type=int, help="Current query heads h (spec mode).")
@click.option("--kv-heads", type=int, help="Current KV heads h_kv (default: h).")
@click.option("--head-dim", type=int, help="d_k when h·d_k ≠ d (default: d/h).")
@click.option("--seq-len", type=int, help=f"Sequence length n (spec default {DEFAULT_SEQ_LEN}).")
@click.option("--batch-size", type=int, help="Batch size b (spec default 1).")
@click.option("--dtype", help="Element type: bfloat16, float16, float32 (spec default bf16).")
@click.option("--gpu", help=f"Target GPU profile (default {DEFAULT_GPU}).")
@click.option("--implementation", type=click.Choice(["sdpa", "eager"]),
              help="Attention implementation of every layout (spec default sdpa).")
@click.option("--causal/--no-causal", default=None, help="Causal attention (spec: causal).")
@click.option("--bias/--no-bias", default=False, help="Q, K, V and O biases (spec mode).")
@click.option("--try-heads", help="Comma-separated head counts instead of every divisor.")
@click.option("--device", help="Also measure each layout on this device (cuda, cuda:1, cpu).")
@click.option("--repeats", type=int, default=20, show_default=True, help="Timed runs per layout.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@click.option("--plot", type=click.Path(dir_okay=False), help="Also draw the sweep to FILE.png.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write to FILE, not stdout.")
def whatif(target: str | None, block_name: str | None, **opts: Any) -> None:
    """What changes with the head layout: mhaudit whatif --d-model 4096 --heads 32 --kv-heads 8,
    or mhaudit whatif model.py --block layers.0.self_attn."""
    try:
        spec_flags = [k for k in ("d_model", "heads", "kv_heads", "head_dim") if opts[k]]
        if target is not None and spec_flags:
            raise ConfigError("give a model or a --d-model/--heads spec, not both",
                              f"Drop --{spec_flags[0].replace('_', '-')} or the model.")
        spec = _model_spec(target, block_name, opts) if target else _spec(opts)
        profile = get_profile(opts["gpu"] or DEFAULT_GPU)
        result = run_whatif(spec, profile, try_heads=_int_list(opts["try_heads"]),
                        device=opts["device"], repeats=opts["repeats"])
        if opts["fmt"] == "json":
            data = dataclasses.asdict(result)
            data["rows"] = [dataclasses.asdict(r) for r in result.rows]
            text = json.dumps(data, indent=2)
        else:
            text = render_table(result)
        if opts["plot"]:
            plot_whatif(result, opts["plot"])
        write_output(text + "\n", Path(opts["output"]) if opts["output"] else None)
    except MhauditError as error:
        fail(error)

