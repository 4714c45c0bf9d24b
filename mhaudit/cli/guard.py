"""Process guards for a CLI run: stdout protected at the fd level, SIGTERM, output encoding.

The report must be the only thing on stdout. For the whole command, file descriptor 1
points at stderr, so a model that prints, writes to fd 1 or starts a printing thread
writes to stderr; the report goes to a duplicate of the original fd 1. SIGTERM becomes an
exception, so temporary files are removed on the way out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any, NoReturn, TextIO

import click

from mhaudit.contain.contain import Terminated
from mhaudit.errors import INTERNAL_ERROR_EXIT, INTERRUPTED_EXIT, first_line
from mhaudit.render.escape import encodable

_report: list[TextIO] = []
_errors: list[TextIO] = []


def error_stream() -> TextIO:
    """The real stderr, for mhaudit's own messages while logs are being captured."""
    return _errors[-1] if _errors else sys.stderr


def report_stream() -> TextIO:
    """Where the report goes: the duplicate of the original stdout while guarded."""
    return _report[-1] if _report else sys.stdout


def write_report(text: str) -> None:
    """Write ``text`` to the report stream, in characters its encoding can hold."""
    stream = report_stream()
    stream.write(encodable(text, getattr(stream, "encoding", None) or "utf-8"))
    stream.flush()


def _fileno(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


@contextlib.contextmanager
def protected_stdout() -> Iterator[None]:
    """Point fd 1 and ``sys.stdout`` at stderr; keep the real stdout for the report.

    In a real process the redirection is kept after the command ends, so a thread the
    model started cannot print after the report. Where stdout has no file descriptor
    (click's test runner), only ``sys.stdout`` is swapped, and restored. Inside a guarded
    block a nested guard changes nothing.
    """
    if _report:
        yield
        return
    original = sys.stdout
    err = sys.stderr
    fd, err_fd = _fileno(original), _fileno(err)
    with contextlib.suppress(AttributeError, ValueError):
        err.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    _errors.append(err)
    if fd is None or err_fd is None:
        _report.append(original)
        sys.stdout = err
        try:
            yield
        finally:
            sys.stdout = original
            _report.pop()
            _errors.pop()
        return
    original.flush()
    saved = os.dup(fd)
    os.dup2(err_fd, fd)
    encoding = getattr(original, "encoding", None) or "utf-8"
    stream = open(saved, "w", encoding=encoding, errors="replace", closefd=True)  # noqa: SIM115
    _report.append(stream)
    sys.stdout = err
    try:
        yield
    finally:
        stream.flush()
        _report.pop()
        _errors.pop()


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated


@contextlib.contextmanager
def terminate_as_exception() -> Iterator[None]:
    """Turn SIGTERM into :class:`Terminated` for the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _usage_error(error: click.UsageError) -> NoReturn:
    hint = f" Run `{error.ctx.command_path} --help`." if error.ctx is not None else ""
    message = " ".join(error.format_message().split()).rstrip(".")
    click.echo(f"mhaudit: error: {message}.{hint}", file=error_stream())
    sys.exit(error.exit_code)


class GuardedGroup(click.Group):
    """The command group: usage errors in one line (exit 2), Ctrl-C 130, bugs 4, never 1.

    Each command body runs inside :func:`mhaudit.cli.common.errors_to_exit`; this is the
    net around everything else (option parsing, imports of the command modules).
    """

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as error:
            _usage_error(error)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as error:
            _usage_error(error)
        except click.ClickException as error:
            click.echo(f"mhaudit: error: {' '.join(error.format_message().split())}",
                       file=error_stream())
            sys.exit(error.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            click.echo("mhaudit: interrupted", file=error_stream())
            sys.exit(INTERRUPTED_EXIT)
        except Terminated:
            sys.exit(128 + signal.SIGTERM)
        except Exception as error:
            click.echo(f"mhaudit: internal error: {first_line(error)}. This is a bug in "
                       "mhaudit: rerun with --verbose and report it.", file=error_stream())
            sys.exit(INTERNAL_ERROR_EXIT)
