"""Options and helpers shared by the commands: model options, errors, atomic output."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from mhaudit.atomic import write_text_atomic
from mhaudit.cost.devices import PROFILES
from mhaudit.errors import MhauditError
from mhaudit.load.device import parse_device
from mhaudit.rules import RuleConfig, load_config

if TYPE_CHECKING:
    from mhaudit.api import AuditOptions
    from mhaudit.data import Report

F = TypeVar("F", bound=Callable[..., Any])

DTYPES = ("float32", "fp32", "bfloat16", "bf16", "float16", "fp16", "float8", "fp8")


def _parse_shape(value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        dims = tuple(int(x) for x in value.lower().replace("x", ",").split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a shape like 1,128 or 2x3x224x224") from None
    if not dims or any(d < 1 for d in dims):
        raise click.BadParameter(f"{value!r} is not a shape of positive sizes")
    return dims


def _parse_seq_lens(value: str) -> tuple[int, ...]:
    try:
        lens = tuple(int(x) for x in value.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a length or a list like 512,2048") from None
    if not lens or any(n < 1 for n in lens):
        raise click.BadParameter(f"{value!r} must list positive lengths")
    return lens


def model_options(func: F) -> F:
    """The options every command that builds a model takes."""
    options = [
        click.option("--batch-size", "-b", type=click.IntRange(min=1), default=1,
                     show_default=True, help="Batch size for inferred inputs."),
        click.option("--seq-len", "-n", default="128", show_default=True,
                     help="Sequence length for inferred inputs; a list (512,2048,8192) "
                     "also projects block costs to each length."),
        click.option("--input-shape", default=None,
                     help="Shape of the model's single input, e.g. 1,128 or 2x3x224x224."),
        click.option("--device", default="meta", show_default=True,
                     help="Build on meta (nothing allocated), cpu or cuda[:i]."),
        click.option("--dtype", type=click.Choice(DTYPES, case_sensitive=False),
                     default="bfloat16", show_default=True,
                     help="Element type for bytes and kernel choice."),
        click.option("--gpu", type=click.Choice(sorted(PROFILES), case_sensitive=False),
                     default="h100", show_default=True, help="Target GPU profile."),
        click.option("--tensor-parallel", type=click.IntRange(min=1), default=None,
                     help="Tensor-parallel degree to check head counts against."),
        click.option("--flops-backend", type=click.Choice(["graph", "fvcore"]),
                     default="graph", show_default=True,
                     help="fvcore adds fvcore's count (MACs × 2) for comparison; "
                     "needs --device cpu."),
        click.option("--fold/--no-fold", default=True, show_default=True,
                     help="Trace one of each run of identical layers and multiply its costs."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def rule_options(func: F) -> F:
    """Rule selection options, merged over ``[tool.mhaudit]`` in pyproject.toml."""
    options = [
        click.option("--select", multiple=True, help="Run only rules whose code starts with this."),
        click.option("--ignore", multiple=True, help="Skip rules whose code starts with this."),
        click.option("--severity", multiple=True, metavar="CODE=LEVEL",
                     help="Override a rule's severity, e.g. MHA007=error."),
        click.option("--threshold", multiple=True, metavar="CODE.KEY=VALUE",
                     help="Override a rule threshold, e.g. MHA007.min_bytes_per_token=16384."),
        click.option("--per-module-ignores", multiple=True, metavar="PATTERN=CODES",
                     help="Suppress codes in matching blocks, e.g. 'encoder.*=MHA004'."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def rule_config_from(params: dict[str, Any]) -> RuleConfig:
    """The rule configuration: the nearest pyproject.toml, then the CLI values over it."""
    return load_config(
        other_keys=("budget",),
        select=list(params.pop("select")) or None,
        ignore=list(params.pop("ignore")) or None,
        severity=list(params.pop("severity")) or None,
        thresholds=list(params.pop("threshold")) or None,
        per_module_ignores=list(params.pop("per_module_ignores")) or None,
    )


def options_from(params: dict[str, Any]) -> dict[str, Any]:
    """AuditOptions keyword arguments from the parsed model options."""
    lens = _parse_seq_lens(params["seq_len"])
    device = parse_device(params["device"])
    return {
        "batch_size": params["batch_size"],
        "seq_len": lens[0],
        "scaling_seq_lens": lens if len(lens) > 1 else (),
        "input_shape": _parse_shape(params["input_shape"]),
        "device": device,
        "dtype": params["dtype"],
        "gpu": params["gpu"],
        "tensor_parallel": params["tensor_parallel"],
        "fold": params["fold"],
        "flops_backend": params["flops_backend"],
    }


def audit_quietly(target: str, options: AuditOptions) -> Report:
    """Audit ``target`` with prints from the user's model kept off stdout."""
    from mhaudit.api import audit_target
    from mhaudit.load.target import quiet_stdout

    with quiet_stdout():
        return audit_target(target, options)


def fail(error: MhauditError) -> NoReturn:
    """Print one line to stderr and exit with the error's documented code."""
    click.echo(f"mhaudit: error: {error.one_line()}", err=True)
    sys.exit(error.exit_code)


@contextlib.contextmanager
def errors_to_exit() -> Iterator[None]:
    """Turn mhaudit errors into one line and an exit code."""
    try:
        yield
    except MhauditError as error:
        fail(error)


def write_output(text: str, output: Path | None) -> None:
    """Write to stdout, or atomically to ``output`` once the whole text exists."""
    if output is None:
        click.echo(text, nl=False)
        return
    write_text_atomic(output, text)
