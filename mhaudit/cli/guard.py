"""Process guards for a CLI run: stdout protected at the fd level, SIGTERM, output encoding.

The report must be the only thing on stdout. For the whole command, file descriptor 1
points at stderr, so a model that prints, writes to fd 1 or starts a printing thread
writes to stderr; the report goes to a duplicate of the original fd 1, and mhaudit's own
messages to a duplicate of fd 2 (a model that closes fd 2 does not silence them). A
closed pipe on stdout ends the run quietly with 141; a full disk or a closed stdout is
exit 2 with one line. SIGTERM becomes an exception, so temporary files are removed on the
way out.
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

from mhaudit.cli.process import run_process, stdout_closed
from mhaudit.contain.contain import Terminated
from mhaudit.errors import (
    INTERNAL_ERROR_EXIT,
    INTERRUPTED_EXIT,
    MAX_LINE_CHARS,
    ConfigError,
    OutputClosed,
    first_line,
    sentences,
    shorten,
)
from mhaudit.render.escape import encodable, plain

_report: list[TextIO] = []
_errors: list[TextIO] = []
_opened: list[TextIO] = []
"""Streams this module opened on duplicated descriptors, flushed before the process exits."""


def error_stream() -> TextIO:
    """The real stderr, for mhaudit's own messages while logs are being captured."""
    return _errors[-1] if _errors else sys.stderr


def report_stream() -> TextIO:
    """Where the report goes: the duplicate of the original stdout while guarded."""
    return _report[-1] if _report else sys.stdout


def write_report(text: str) -> None:
    """Write ``text`` to the report stream, in characters its encoding can hold.

    A reader that went away is :class:`OutputClosed` (exit 141, no message); a full disk,
    a closed stdout or another write error is a ConfigError (exit 2).
    """
    stream = report_stream()
    if stdout_closed() or stream is None:
        raise ConfigError("stdout is closed, so the report has nowhere to go",
                          "Write it to a file with --output FILE, or keep stdout open.")
    try:
        stream.write(encodable(text, getattr(stream, "encoding", None) or "utf-8"))
        stream.flush()
    except BrokenPipeError:
        _discard(stream)
        raise OutputClosed("stdout was closed by its reader") from None
    except (OSError, ValueError) as exc:
        _discard(stream)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else first_line(exc)
        raise ConfigError(f"cannot write the report to stdout: {reason}",
                          "Free some space, or write to a file with --output FILE.") from None


def _discard(stream: TextIO) -> None:
    """Point a failed stream at /dev/null, so the text still buffered flushes nowhere."""
    fd = _fileno(stream)
    if fd is None:
        return
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)


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
    with contextlib.suppress(OSError, ValueError):
        original.flush()
    saved = os.dup(fd)
    os.dup2(err_fd, fd)
    encoding = getattr(original, "encoding", None) or "utf-8"
    stream = open(saved, "w", encoding=encoding, errors="replace", closefd=True)  # noqa: SIM115
    messages = open(os.dup(err_fd), "w", encoding=getattr(err, "encoding", None) or "utf-8",  # noqa: SIM115
                    errors="backslashreplace", buffering=1, closefd=True)
    _errors[-1] = messages
    _opened.extend((stream, messages))
    _report.append(stream)
    sys.stdout = err
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
        with contextlib.suppress(OSError, ValueError):
            messages.close()  # later lines (the group's own) go to sys.stderr
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
    hint = f"Run `{error.ctx.command_path} --help`." if error.ctx is not None else ""
    line = shorten(plain(sentences(" ".join(error.format_message().split()), hint)),
                   MAX_LINE_CHARS - len("mhaudit: error: "))
    with contextlib.suppress(Exception):  # a closed or full stderr loses the line, not the code
        click.echo(f"mhaudit: error: {line}", file=error_stream())
    sys.exit(error.exit_code)


class GuardedGroup(click.Group):
    """The command group: usage errors in one line (exit 2), Ctrl-C 130, bugs 4, never 1.

    Each command body runs inside :func:`mhaudit.cli.common.errors_to_exit`; this is the
    net around everything else (option parsing, imports of the command modules).
    """

    def main(self, args: Any = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        """The console script and ``python -m mhaudit`` (no ``args``) run as a process: see
        :mod:`mhaudit.cli.process`. Given ``args`` (click's test runner), a plain call."""
        if args is not None or not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)

        def run() -> object:
            return super(GuardedGroup, self).main(None, prog_name, complete_var, True, **extra)

        run_process(run, lambda: list(_opened))
        return None  # pragma: no cover - run_process never returns

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
            with contextlib.suppress(Exception):
                line = plain(" ".join(error.format_message().split()))
                click.echo(f"mhaudit: error: {shorten(line, MAX_LINE_CHARS - 16)}",
                           file=error_stream())
            sys.exit(error.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            with contextlib.suppress(Exception):
                click.echo("mhaudit: interrupted", file=error_stream())
            sys.exit(INTERRUPTED_EXIT)
        except Terminated as error:
            sys.exit(error.exit_code)
        except Exception as error:
            with contextlib.suppress(Exception):
                click.echo(f"mhaudit: internal error: {first_line(error)}. This is a bug in "
                           "mhaudit: rerun with --verbose and report it.", file=error_stream())
            sys.exit(INTERNAL_ERROR_EXIT)
