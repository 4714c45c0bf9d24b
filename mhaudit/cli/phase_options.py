"""The ``--train`` and ``--decode`` options of ``report`` and ``check``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from mhaudit.cli.common import AsciiIntRange
from mhaudit.options import Checkpointing, Optimizer, Precision

F = TypeVar("F", bound=Callable[..., Any])


def phase_options(func: F) -> F:
    """Options for the training step and the decode step."""
    options = [
        click.option("--train", is_flag=True,
                     help="Add one training step: peak memory and what holds it, FLOPs, "
                     "what each attention block keeps for the backward."),
        click.option("--optimizer", type=click.Choice(Optimizer.values()), default="adamw",
                     show_default=True, help="Optimizer of the training step."),
        click.option("--precision", type=click.Choice(Precision.values()), default="fp32",
                     show_default=True, help="fp32, pure bf16, or bf16-mixed (fp32 weights, "
                     "grads and states; bf16 autocast) for the training step."),
        click.option("--checkpointing", type=click.Choice(Checkpointing.values()),
                     default="none", show_default=True,
                     help="layers: recompute each repeated layer in the backward."),
        click.option("--decode", is_flag=True,
                     help="Add one generation step: FLOPs, bytes, time and the KV cache."),
        click.option("--context", type=AsciiIntRange(min=0), default=None,
                     help="Cached tokens for --decode (default: the audited sequence length)."),
        click.option("--verify", is_flag=True,
                     help="Check the FLOPs, the inference peak and, with --train, the "
                     "step's peak (one real CPU step, within size limits) against torch's "
                     "FlopCounterMode and MemTracker on the same model (exit 1 when they "
                     "disagree beyond the stated tolerance)."),
        click.option("--parallel", metavar="PLAN", default=None,
                     help="Per-device cost of --train/--decode under a plan, e.g. "
                     "tp=8,sp,fsdp=8,pp=4,microbatches=8 (tensor, sequence, context cp, "
                     "fully-sharded fsdp and replicated dp data, expert ep, pipeline)."),
        click.option("--reserve", metavar="TERM=SIZE", multiple=True,
                     help="With --parallel: a memory term beyond tensors, e.g. "
                     "cuda_context=600MiB or fragmentation=8% (nccl_buffers, workspace, "
                     "cuda_context, fragmentation); repeatable."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def phase_options_from(params: dict[str, Any]) -> dict[str, Any]:
    """AuditOptions keyword arguments for the phases, taken out of ``params``."""
    from mhaudit.cost.overhead import parse_reserve_items

    keys = ("train", "optimizer", "precision", "checkpointing", "decode", "context", "parallel",
            "verify")
    chosen = {key: params.pop(key) for key in keys}
    chosen["reserve"] = tuple(parse_reserve_items(params.pop("reserve", ())).items())
    return chosen


def warn_unused_phase_options(phases: dict[str, Any]) -> None:
    """Say on stderr which phase options were given for a phase that does not run."""
    from mhaudit.cli.common import say

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return

    unused = [f"--{n}" for n in ("optimizer", "precision", "checkpointing")
              if not phases.get("train") and _explicit(ctx, n)]
    if not phases.get("decode") and _explicit(ctx, "context"):
        unused.append("--context")
    if unused:
        say(f"warning: {', '.join(unused)} change nothing here: --optimizer, --precision and "
            "--checkpointing shape --train, --context shapes --decode")


def _explicit(ctx: click.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source != click.core.ParameterSource.DEFAULT
