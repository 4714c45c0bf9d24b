"""Options and helpers shared by the commands: model options, the error wrapper, output."""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from mhaudit.atomic import OutputPath, resolve_output, write_texts_atomic
from mhaudit.cli.guard import (
    error_stream,
    protected_stdout,
    terminate_as_exception,
    write_report,
)
from mhaudit.cli.inputs import pyprojects
from mhaudit.contain.files import check_toml_depth, read_input_text
from mhaudit.cost.devices import ALIASES, DEFAULT_GPU, PROFILES
from mhaudit.errors import (
    MAX_LINE_CHARS,
    DependencyError,
    InternalError,
    Interrupted,
    LoadError,
    MhauditError,
    OutputClosed,
    first_line,
    safe_text,
    shorten,
    type_name,
    without_reprs,
)
from mhaudit.load.device import parse_device
from mhaudit.options import MAX_SIZE, FlopsBackend
from mhaudit.render.escape import plain
from mhaudit.rules import RuleConfig, load_config

if TYPE_CHECKING:
    from mhaudit.data import Report
    from mhaudit.options import AuditOptions

F = TypeVar("F", bound=Callable[..., Any])

DTYPES = ("float32", "fp32", "bfloat16", "bf16", "float16", "fp16", "float8", "fp8")
DTYPE = click.Choice(DTYPES, case_sensitive=False)
"""``--dtype``: every spelling the cost model accepts."""
GPU = click.Choice(sorted({*PROFILES, *ALIASES}), case_sensitive=False)
"""``--gpu``: every profile name and alias that :func:`~mhaudit.cost.devices.get_profile` takes."""


def ascii_digits(text: str) -> bool:
    """True for a non-empty run of ASCII digits; ``str.isdigit`` also takes ``²`` and ``٣``."""
    return text.isascii() and text.isdigit()


_MAX_DIGITS = 30
"""Longest number read: ``int()`` refuses over 4,300 digits, and no size needs 30."""


class AsciiIntRange(click.IntRange):
    """An integer option written in ASCII digits (``int()`` reads other scripts' digits too)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        if isinstance(value, str) and not ascii_digits(value.strip().lstrip("+-")):
            self.fail(f"{value!r} is not a whole number in ASCII digits", param, ctx)
        if isinstance(value, str) and len(value.strip().lstrip("+-")) > _MAX_DIGITS:
            self.fail(f"{value.strip()[:20]}… is over {_MAX_DIGITS} digits long", param, ctx)
        return super().convert(value, param, ctx)


def _positive_ints(value: str, what: str, example: str) -> tuple[int, ...]:
    """``value`` split at commas (or ``x`` for shapes) into positive ints; no empty items."""
    parts = value.lower().replace("x", ",").split(",") if what == "shape" else value.split(",")
    items = [part.strip() for part in parts]
    if not value.strip() or any(not item for item in items):
        raise click.BadParameter(f"{value!r} has an empty item; write a {what} like {example}")
    dims: list[int] = []
    for item in items:
        if not ascii_digits(item.lstrip("+")):
            raise click.BadParameter(f"{value!r}: {item!r} is not a whole number; "
                                     f"write a {what} like {example}")
        if len(item.lstrip("+")) > _MAX_DIGITS:
            raise click.BadParameter(f"{item[:20]}… is over {_MAX_DIGITS} digits long; "
                                     f"sizes go up to {MAX_SIZE:,}")
        dims.append(int(item))
    if any(d < 1 for d in dims):
        raise click.BadParameter(f"{value!r} must hold positive sizes, like {example}")
    if any(d > MAX_SIZE for d in dims):
        raise click.BadParameter(f"{value!r} holds a size above {MAX_SIZE:,}")
    return tuple(dims)


def _parse_shape(value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    return _positive_ints(value, "shape", "1,128 or 2x3x224x224")


InputShapes = tuple[tuple[int, ...] | None, tuple[tuple[str, tuple[int, ...]], ...]]


def parse_input_shapes(values: tuple[str, ...] | list[str] | None) -> InputShapes:
    """``--input-shape`` values: at most one unnamed ``AxB``, and any ``NAME=AxB``."""
    try:
        return _input_shapes(values)
    except click.BadParameter as exc:
        if exc.param_hint is None and exc.param is None:
            exc.param_hint = "--input-shape"
        raise


def _input_shapes(values: tuple[str, ...] | list[str] | None) -> InputShapes:
    unnamed: tuple[int, ...] | None = None
    named: dict[str, tuple[int, ...]] = {}
    for value in values or ():
        name, sep, shape = value.partition("=")
        if not sep:
            if unnamed is not None:
                raise click.BadParameter(f"{value!r} is a second unnamed shape; name each "
                                         "input as NAME=1x80x3000", param_hint="--input-shape")
            unnamed = _parse_shape(value)
            continue
        name = name.strip()
        if not (name.isascii() and name.isidentifier()):
            raise click.BadParameter(f"{value!r}: {name!r} is not an input name; write "
                                     "NAME=1x80x3000", param_hint="--input-shape")
        if name in named:
            raise click.BadParameter(f"input {name!r} is given twice",
                                     param_hint="--input-shape")
        named[name] = _positive_ints(shape, "shape", "1x80x3000")
    return unnamed, tuple(named.items())


def parse_seq_lens(value: str) -> tuple[int, ...]:
    """``--seq-len``: one length (``512``) or a comma-separated list (``512,2048``)."""
    return _positive_ints(value, "length list", "512,2048")


def model_options(func: F) -> F:
    """The options every command that builds a model takes."""
    options = [
        click.option("--batch-size", "-b", type=AsciiIntRange(min=1), default=1,
                     show_default=True, help="Batch size for inferred inputs."),
        click.option("--seq-len", "-n", default="128", show_default=True,
                     help="Sequence length for inferred inputs; a list (512,2048,8192) "
                     "also projects block costs to each length."),
        click.option("--input-shape", multiple=True, metavar="[NAME=]SHAPE",
                     help="Shape of the model's single input (1,128 or 2x3x224x224), or of "
                     "an input by name (input_features=1x80x3000); repeat for each input."),
        click.option("--device", default="meta", show_default=True,
                     help="Build on meta (nothing allocated), cpu or cuda[:i]."),
        click.option("--dtype", type=DTYPE, default="bfloat16", show_default=True,
                     help="Element type for bytes and kernel choice."),
        click.option("--gpu", type=GPU, default=DEFAULT_GPU, show_default=True,
                     help="Target GPU profile (a name or an alias such as a100)."),
        click.option("--tensor-parallel", type=AsciiIntRange(min=1), default=None,
                     help="Tensor-parallel degree to check head counts against."),
        click.option("--flops-backend", type=click.Choice(FlopsBackend.values()),
                     default=FlopsBackend.GRAPH.value, show_default=True,
                     help="fvcore adds fvcore's count (MACs × 2) for comparison; "
                     "needs --device cpu."),
        click.option("--fold/--no-fold", default=True, show_default=True,
                     help="Trace one of each run of identical layers and multiply its costs."),
        click.option("--timeout", type=click.FloatRange(min=0, min_open=True, max=86400),
                     default=None, metavar="SECONDS",
                     help="Give up (exit 3) when building and tracing take longer."),
        verbose_option,
    ]
    for option in reversed(options):
        func = option(func)
    return func


verbose_option = click.option(
    "--verbose", "-v", is_flag=True,
    help="On an error, also show the captured torch/transformers log and the traceback.")


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
    """The rule configuration: the nearest pyproject.toml, then the CLI values over it.

    Every pyproject.toml the search may read is checked first (size, UTF-8), so a broken
    one is a configuration error (exit 2) for ``report`` as for ``check``.
    """
    for path in pyprojects():
        if path.is_file():
            check_toml_depth(read_input_text(path, "settings file"), path)
    return load_config(
        other_keys=("budget", "targets"),
        select=list(params.pop("select")) or None,
        ignore=list(params.pop("ignore")) or None,
        severity=list(params.pop("severity")) or None,
        thresholds=list(params.pop("threshold")) or None,
        per_module_ignores=list(params.pop("per_module_ignores")) or None,
    )


def options_from(params: dict[str, Any]) -> dict[str, Any]:
    """AuditOptions keyword arguments from the parsed model options."""
    lens = parse_seq_lens(params["seq_len"])
    shapes = parse_input_shapes(params["input_shape"])
    device = parse_device(params["device"])
    return {
        "batch_size": params["batch_size"],
        "seq_len": lens[0],
        "scaling_seq_lens": lens if len(lens) > 1 else (),
        "input_shape": shapes[0],
        "input_shapes": shapes[1],
        "device": device,
        "dtype": params["dtype"],
        "gpu": params["gpu"],
        "tensor_parallel": params["tensor_parallel"],
        "fold": params["fold"],
        "flops_backend": params["flops_backend"],
        "timeout": params["timeout"],
    }


def say(message: str) -> None:
    """One line for the user on the real stderr (never captured with the model's logs).

    A stderr that cannot be written (closed, full) loses the line, never the exit code.
    """
    echo_error(f"mhaudit: {message}")


def echo_error(text: str) -> None:
    """``text`` and a newline on the real stderr; a failing stderr is ignored."""
    with contextlib.suppress(Exception):
        click.echo(text, file=error_stream())


def require_torch() -> None:
    """Import torch now, so that a missing or broken torch is the environment's error (exit 3)
    with torch's first line, not a bug of mhaudit."""
    try:
        import torch  # noqa: F401
    except Exception as exc:
        raise DependencyError(f"torch could not be imported: {first_line(exc)}",
                              "Check the torch installation (pip install torch) and that "
                              "PYTHONPATH holds no broken copy of it.") from exc


def audit_quietly(target: str, options: AuditOptions) -> Report:
    """Audit ``target``; the command's guard keeps the model's prints off stdout."""
    from mhaudit.api import audit_target

    return audit_target(target, options)


def _explain(error: BaseException, log: str, verbose: bool) -> None:
    if not verbose:
        return
    if log:
        echo_error("captured log:\n" + log)
    detail = getattr(error, "detail", "")
    if detail:
        echo_error(detail)
    try:
        text = "".join(traceback.format_exception(error)).rstrip()
    except Exception:  # an exception whose message cannot be formatted
        text = f"(no traceback: {first_line(error)})"
    echo_error(text)


class CommandExit(SystemExit):
    """The exit a command's error wrapper chose; an enclosing wrapper lets it through.

    ``line`` is the one line it printed (empty for a quiet exit).
    """

    def __init__(self, code: int, line: str = "") -> None:
        super().__init__(code)
        self.line = line


def _exit(line: str, code: int, error: BaseException, log: str, verbose: bool) -> NoReturn:
    _explain(error, log, verbose)
    text = shorten(plain(" ".join(without_reprs(line).split())), MAX_LINE_CHARS - len("mhaudit: "))
    echo_error(f"mhaudit: {text}")
    raise CommandExit(code, text)


@contextlib.contextmanager
def errors_to_exit(verbose: bool = False) -> Iterator[None]:
    """Run a command's body: every failure ends in one stderr line and its documented code.

    stdout is protected for the whole body (see :mod:`mhaudit.cli.guard`), torch's and
    transformers' logs are captured, and ``verbose`` shows them with the traceback.
    Every exit code is read from the error's class: MhauditError's subclasses (2, 3, 141
    for a closed pipe, quietly), Ctrl-C 130, SIGTERM 143, the timer and model code that
    exits or raises a BaseException 3; any other exception is a bug of mhaudit: exit 4,
    never 1.
    """
    from mhaudit.contain.capture import captured_logs
    from mhaudit.contain.contain import StageTimeout, Terminated

    with protected_stdout(), terminate_as_exception(), captured_logs() as log:
        try:
            yield
        except OutputClosed as error:
            raise CommandExit(error.exit_code) from None
        except MhauditError as error:
            _exit(f"error: {error.one_line(MAX_LINE_CHARS - 20)}", error.exit_code, error,
                  error.log or log.text(), verbose)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort, CommandExit):
            raise
        except KeyboardInterrupt as error:
            _exit("interrupted", Interrupted.exit_code, error, log.text(), verbose)
        except Terminated as error:
            _exit("terminated", error.exit_code, error, log.text(), verbose)
        except StageTimeout as error:
            _exit(f"error: {error}. Raise --timeout.", error.exit_code, error, log.text(),
                  verbose)
        except SystemExit as error:  # only model code exits inside a command's body
            _exit(f"error: model code called sys.exit({safe_text(error.code, repr)[:80]}). "
                  "Model files must not exit.", LoadError.exit_code, error, log.text(), verbose)
        except Exception as error:
            _exit(f"internal error: {first_line(error)}. This is a bug in mhaudit: rerun with "
                  "--verbose for the traceback and report it.", InternalError.exit_code, error,
                  log.text(), verbose)
        except BaseException as error:  # GeneratorExit and the like: only model code
            _exit(f"error: model code raised {type_name(error)}. Model code must return or "
                  "raise an Exception.", LoadError.exit_code, error, log.text(), verbose)


def output_path(output: str | Path | None) -> OutputPath:
    """Resolve ``--output`` now, before any model code can change the working directory."""
    return resolve_output(output)


def write_output(text: str, output: OutputPath | Path | str | None) -> None:
    """Write to the report stream, or atomically to ``output`` once the whole text exists."""
    out = output if isinstance(output, OutputPath) else resolve_output(output)
    if out.is_stdout:
        write_report(text)
    elif out.to_stderr:
        click.echo(text, file=error_stream(), nl=False)
    else:
        write_texts_atomic([(out, text)])


def warn_unused_shape_options(report: Report) -> None:
    """Say on stderr when --seq-len or --batch-size were given but could not apply.

    They shape inferred inputs; a model file's ``example_inputs()`` fixes its own shapes.
    """
    if report.model.inputs_inferred:
        return
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    given = [
        f"--{name.replace('_', '-')}" for name in ("seq_len", "batch_size")
        if name in ctx.params and ctx.get_parameter_source(name) not in (
            None, click.core.ParameterSource.DEFAULT)
    ]
    if given:
        say(f"warning: {' and '.join(given)} did not apply: {report.model.source} gives its "
            "own example inputs; use --input-shape to override them")
