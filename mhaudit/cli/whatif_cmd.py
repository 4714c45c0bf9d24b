"""``mhaudit whatif``: the costs of alternative head layouts, from a spec or a model's block."""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from mhaudit.atomic import write_texts_atomic
from mhaudit.cli.common import (
    DTYPE,
    GPU,
    AsciiIntRange,
    ascii_digits,
    audit_quietly,
    errors_to_exit,
    output_path,
    parse_input_shapes,
    parse_seq_lens,
    require_torch,
    say,
    verbose_option,
    write_output,
)
from mhaudit.cli.complete import complete_target
from mhaudit.cli.inputs import command_inputs, refuse_inputs_as_outputs
from mhaudit.cli.progress import Status, status_label
from mhaudit.cli.terminal import terminal_width
from mhaudit.cost.devices import DEFAULT_GPU, canonical_dtype, get_profile
from mhaudit.data import AttentionBlock, WhatIf
from mhaudit.errors import ConfigError, first_line
from mhaudit.options import MAX_SIZE, Precision
from mhaudit.render.formats import FORMATS, formats_with
from mhaudit.render.style import RenderOptions
from mhaudit.whatif import LayoutSpec, check_spec, spec_from_block
from mhaudit.whatif import whatif as run_whatif

DEFAULT_SEQ_LEN = 2048


_SIZE = AsciiIntRange(min=1, max=MAX_SIZE)


def _int_list(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    items = [part.strip() for part in text.split(",")]
    if not all(ascii_digits(item) and len(item) <= 20 and 0 < int(item) <= MAX_SIZE
               for item in items):
        raise ConfigError(f"--try-heads {text!r} is not a list of positive head counts",
                          "Write comma-separated counts, e.g. --try-heads 8,16,32.")
    return tuple(int(item) for item in items)


def _seq_lens(value: str | None) -> tuple[int, ...]:
    return () if value is None else parse_seq_lens(value)


def _at_lengths(spec: LayoutSpec, lens: tuple[int, ...]) -> list[LayoutSpec]:
    """The spec at each further length of ``--seq-len`` (its own first)."""
    return [spec] + [dataclasses.replace(
        spec, seq_len=n, seq_len_kv=None if spec.kind == "self" else spec.seq_len_kv,
        model_inputs=() if n != spec.seq_len else spec.model_inputs)
        for n in lens[1:]]


def _joined(texts: list[str], fmt: str) -> str:
    """One sweep's text as it is; several as a list (a machine-readable format, JSON) or one
    after another."""
    if len(texts) == 1:
        return texts[0]
    if FORMATS[fmt].machine_readable:
        return "[\n" + ",\n".join(t.rstrip("\n") for t in texts) + "\n]\n"
    return "\n".join(texts)


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
    from mhaudit.options import AuditOptions

    given = {k: opts[k] for k in ("batch_size", "seq_len", "dtype", "gpu", "timeout")
             if opts[k] is not None}
    shape, shapes = parse_input_shapes(opts["input_shape"])
    if shape is not None:
        given["input_shape"] = shape
    if shapes:
        given["input_shapes"] = shapes
    with Status(status_label(target, 0, 1)) as status:
        report = audit_quietly(target, AuditOptions(**given, on_stage=status.stage))
    block = _pick_block(tuple(report.blocks), block_name, target)
    spec = spec_from_block(block, opts["dtype"] or canonical_dtype(str(report.model.dtype)))
    changes: dict[str, Any] = {k: opts[k] for k in ("implementation", "causal")
                               if opts[k] is not None}
    changes["model_inputs"] = tuple(
        (name, tuple(value["shape"]), str(value.get("dtype", "")))
        for name, value in report.model.inputs.items()
        if isinstance(value, dict) and "shape" in value)
    return dataclasses.replace(spec, **changes)


def _spec(opts: dict[str, Any]) -> LayoutSpec:
    if opts["d_model"] is None or opts["heads"] is None:
        raise ConfigError("whatif needs a model file or --d-model and --heads",
                          "Try: mhaudit whatif --d-model 4096 --heads 32 --kv-heads 8.")
    return check_spec(LayoutSpec(
        d_model=opts["d_model"], heads=opts["heads"], kv_heads=opts["kv_heads"] or opts["heads"],
        seq_len=opts["seq_len"] or DEFAULT_SEQ_LEN, batch_size=opts["batch_size"] or 1,
        dtype=opts["dtype"] or "bfloat16", head_dim=opts["head_dim"],
        causal=True if opts["causal"] is None else opts["causal"],
        implementation=opts["implementation"] or "sdpa", bias=opts["bias"],
    ))


_FORMATS = tuple(dict.fromkeys((*formats_with("whatif"), "markdown")))
"""Formats of either sweep: the head layouts take ``whatif`` renderers, ``--gpus`` more."""

_SWEEP_FLAGS = ("sp", "train", "decode", "context", "reserve")


def _refuse_sweep_flags(opts: dict[str, Any]) -> None:
    given = [k for k in _SWEEP_FLAGS if opts[k] not in (None, False, ())]
    if given:
        raise ConfigError(f"--{given[0]} shapes the parallel sweep, and --gpus was not given",
                          "Add --gpus N, e.g. --gpus 64, or drop it.")


def _parallel_sweep(target: str | None, opts: dict[str, Any]) -> str:
    """``--gpus N``: the model per device under every plan of N GPUs, the best marked."""
    from mhaudit.cost.overhead import parse_reserve_items
    from mhaudit.options import AuditOptions
    from mhaudit.render.whatif_parallel import RENDERERS
    from mhaudit.whatif.parallel_sweep import parallel_whatif

    if target is None:
        raise ConfigError("--gpus costs a model under each plan, and no model was given",
                          "Add the model file, e.g. mhaudit whatif model.py --gpus 64.")
    render = RENDERERS.get(opts["fmt"])
    if render is None:
        raise ConfigError(f"--gpus writes {', '.join(RENDERERS)}, not {opts['fmt']}",
                          "Pass --format table, markdown or json.")
    if opts["plot"]:
        raise ConfigError("--plot draws the head-layout sweep, not --gpus",
                          "Drop --plot.")
    given = {k: opts[k] for k in ("batch_size", "seq_len", "dtype", "gpu", "timeout",
                                  "context") if opts[k] is not None}
    shape, shapes = parse_input_shapes(opts["input_shape"])
    if shape is not None:
        given["input_shape"] = shape
    if shapes:
        given["input_shapes"] = shapes
    options = AuditOptions(train=opts["train"] or not opts["decode"], decode=opts["decode"],
                           precision=opts["precision"],
                           reserve=tuple(parse_reserve_items(opts["reserve"]).items()), **given)
    return render(parallel_whatif(target, options, opts["gpus"], sp=opts["sp"]),
                  terminal_width())


EXAMPLES = """\b
Examples:
  mhaudit whatif --d-model 4096 --heads 32 --kv-heads 8 --seq-len 8192
  mhaudit whatif --d-model 768 --heads 12 --try-heads 6,8,12,16 --plot sweep.png
  mhaudit whatif model.py --block layers.0.self_attn --format json
  mhaudit whatif vit.py --input-shape 1x3x224x224 --device cuda   # also measure each layout
  mhaudit whatif model.py --gpus 64 --sp --train --decode   # the best plan of 64 GPUs
"""


@click.command("whatif", epilog=EXAMPLES, short_help="Costs of other head layouts of a block.")
@click.argument("target", required=False, shell_complete=complete_target)
@click.option("--block", "block_name", help="Module name of the block to vary (default: first).")
@click.option("--d-model", type=_SIZE, help="Model width d (spec mode).")
@click.option("--heads", type=_SIZE, help="Current query heads h (spec mode).")
@click.option("--kv-heads", type=_SIZE, help="Current KV heads h_kv (default: h).")
@click.option("--head-dim", type=_SIZE, help="d_k when h·d_k ≠ d (default: d/h).")
@click.option("--seq-len", "-n", "seq_lens", callback=lambda _c, _p, v: _seq_lens(v),
              help="Sequence length n; a list (512,2048,8192), as report takes, sweeps at "
              f"each length (spec default {DEFAULT_SEQ_LEN}).")
@click.option("--batch-size", type=_SIZE, help="Batch size b (spec default 1).")
@click.option("--input-shape", multiple=True, metavar="[NAME=]SHAPE",
              help="Shape of the model's single input (2x3x224x224), or of an input by name "
              "(input_features=1x80x3000); repeat for each input (model mode).")
@click.option("--dtype", type=DTYPE,
              help="Element type: bfloat16, float16, float32 (spec default bf16).")
@click.option("--gpu", type=GPU, help=f"Target GPU profile (default {DEFAULT_GPU}).")
@click.option("--implementation", type=click.Choice(["sdpa", "eager"]),
              help="Attention implementation of every layout (spec default sdpa).")
@click.option("--causal/--no-causal", default=None, help="Causal attention (spec: causal).")
@click.option("--bias/--no-bias", default=False, help="Q, K, V and O biases (spec mode).")
@click.option("--try-heads", help="Comma-separated head counts instead of every divisor.")
@click.option("--device", help="Also measure each layout on this device (cuda, cuda:1, cpu).")
@click.option("--repeats", type=AsciiIntRange(min=1, max=10**6), default=20, show_default=True,
              help="Timed runs per layout.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True, max=86400), default=None,
              metavar="SECONDS", help="Give up (exit 3) when building and tracing take longer.")
@click.option("--gpus", type=AsciiIntRange(min=1, max=65536), default=None,
              help="Instead of head layouts, search every plan of this many GPUs (tensor, "
              "context, pipeline, data and expert parallelism, checkpointing) and mark the "
              "best (model mode).")
@click.option("--sp", is_flag=True, help="With --gpus: sequence parallelism beside every t > 1 "
              "(without it, each t > 1 is tried with and without).")
@click.option("--train", is_flag=True, help="With --gpus: the training step (the default).")
@click.option("--decode", is_flag=True, help="With --gpus: the decode step.")
@click.option("--precision", type=click.Choice(Precision.values()), default="fp32",
              show_default=True, help="With --gpus --train: fp32, bf16 or bf16-mixed.")
@click.option("--context", type=AsciiIntRange(min=0), default=None,
              help="With --gpus --decode: cached tokens (default: the sequence length).")
@click.option("--reserve", metavar="TERM=SIZE", multiple=True,
              help="With --gpus: a memory term beyond tensors, e.g. cuda_context=600MiB or "
              "fragmentation=8%; repeatable.")
@click.option("--format", "-f", "fmt", type=click.Choice(_FORMATS), default="table",
              show_default=True, help="Output format (markdown with --gpus only).")
@click.option("--plot", type=click.Path(dir_okay=False),
              help="Also draw both sweeps (at the first --seq-len) to FILE.png (needs "
              "matplotlib).")
@click.option("--output", "-o", type=click.Path(), help="Write to FILE ('-': stdout), not stdout.")
@verbose_option
def whatif(target: str | None, block_name: str | None, seq_lens: tuple[int, ...],
           verbose: bool, **opts: Any) -> None:
    """What changes with the head layout of one block: h over the divisors of the width,
    and h_kv over the divisors of h.

    Give a spec (--d-model, --heads, --kv-heads) or a model TARGET and --block.
    """
    with errors_to_exit(verbose):
        require_torch()  # before anything that imports it: a broken torch is exit 3
        destination = output_path(opts["output"])
        plot = output_path(opts["plot"]) if opts["plot"] else None
        refuse_inputs_as_outputs([("--output", destination), ("--plot", plot)],
                                 command_inputs([target] if target else []))
        spec_flags = [k for k in ("d_model", "heads", "kv_heads", "head_dim") if opts[k]]
        if target is not None and spec_flags:
            raise ConfigError("give a model or a --d-model/--heads spec, not both",
                              f"Drop --{spec_flags[0].replace('_', '-')} or the model.")
        if target is None and opts["input_shape"]:
            raise ConfigError("--input-shape shapes a model's input, and no model was given",
                              "Add the model file, or drop --input-shape.")
        opts["seq_len"] = seq_lens[0] if seq_lens else None
        if opts["gpus"] is not None:
            write_output(_parallel_sweep(target, opts), destination)
            return
        _refuse_sweep_flags(opts)
        spec = _model_spec(target, block_name, opts) if target else _spec(opts)
        profile = get_profile(opts["gpu"] or DEFAULT_GPU)
        results = [run_whatif(s, profile, try_heads=_int_list(opts["try_heads"]),
                              device=opts["device"], repeats=opts["repeats"])
                   for s in _at_lengths(spec, seq_lens)]
        result = results[0]
        render = FORMATS[opts["fmt"]].whatif
        if render is None:
            raise ConfigError(f"the head-layout sweep writes {', '.join(formats_with('whatif'))},"
                              f" not {opts['fmt']}", "Pass --format table or json.")
        options = RenderOptions(width=terminal_width())
        text = _joined([render(r, options) for r in results], opts["fmt"])
        if plot is not None:  # the plot and the output: both written, or neither
            write_texts_atomic([(plot, _png(result, opts["plot"])), (destination, text)])
            say(f"wrote {opts['plot']}")
            if destination.path is not None:
                return
        write_output(text, destination)


def _png(result: WhatIf, name: str) -> bytes:
    from mhaudit.render.whatif_plot import whatif_png

    try:
        return whatif_png(result)
    except ValueError as exc:  # matplotlib: an image it cannot draw
        raise ConfigError(f"cannot draw --plot {name}: {first_line(exc)}",
                          "Name a .png file.") from None

