"""The process around a command-line run: standard streams opened, a hard watchdog, a sure exit.

Only the real ``mhaudit`` process (the console script, ``python -m mhaudit``) goes through
here; click's test runner and library callers never do. Before the command: a closed
fd 0, 1 or 2 is filled with ``/dev/null`` (so no file mhaudit opens lands on fd 1, and a
report for a closed stdout is refused with exit 2), and the hard stop for ``--timeout`` is
installed. After the verdict: every stream is flushed and the process ends with
``os._exit``, so a thread the model left running, or an ``atexit`` hook it registered,
cannot hold the exit or change its code. For the whole run, an exception Python cannot
raise (one in a finaliser or a generator closed by the collector: "Exception ignored in")
and one that ends a thread are dropped, not printed as a traceback: the run's own error
line says what went wrong.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from mhaudit.errors import INTERNAL_ERROR_EXIT, INTERRUPTED_EXIT, LoadError

_exit_now = os._exit
"""Bound at import, before any model code could replace ``os._exit``."""

_closed: set[int] = set()
"""Standard descriptors that were closed when the process started."""


def stdout_closed() -> bool:
    """True when the process started with fd 1 closed (``>&-``)."""
    return 1 in _closed


def _fill_closed_fds() -> None:
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            _closed.add(fd)
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - lives for the process
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115


def _hard_stop(err_fd: int) -> Callable[[str], None]:
    """The watchdog's stop: one line on the saved stderr, then exit 3 at once."""

    def stop(message: str) -> None:
        line = (f"mhaudit: error: {' '.join(message.split())}, and the model kept running "
                "past its timer. Raise --timeout, or find the loop that does not end.\n")
        with contextlib.suppress(BaseException):
            os.write(err_fd, line.encode("utf-8", "backslashreplace"))
        _exit_now(LoadError.exit_code)

    return stop


def _unraisable(unraisable: Any) -> None:
    """An exception raised where nothing can catch it: dropped (its traceback would be
    stray text on stderr, after or beside the run's one line)."""


def _thread_died(args: Any) -> None:
    """An exception that ended a thread (the model's or a watchdog): dropped likewise."""


def _status(code: object) -> int:
    if code is None:
        return 0
    if type(code) is int:
        return code if 0 <= code <= 255 else INTERNAL_ERROR_EXIT
    return INTERNAL_ERROR_EXIT  # mhaudit itself exits with ints only


def _flush_all(streams: list[Any]) -> None:
    for stream in streams:
        with contextlib.suppress(BaseException):
            stream.flush()


def run_process(run: Callable[[], object], streams: Callable[[], list[Any]]) -> None:
    """Run the command (``run`` raises SystemExit with its code), flush, and ``os._exit``."""
    from mhaudit.contain.contain import set_hard_stop

    _fill_closed_fds()
    sys.unraisablehook = _unraisable
    threading.excepthook = _thread_died
    with contextlib.suppress(OSError):  # no descriptor left: the SIGALRM timer alone
        set_hard_stop(_hard_stop(os.dup(2)))
    code: int = INTERNAL_ERROR_EXIT
    try:
        run()
        code = 0
    except SystemExit as exc:
        code = _status(exc.code)
    except KeyboardInterrupt:
        code = INTERRUPTED_EXIT
    finally:
        set_hard_stop(None)
        _flush_all([*streams(), sys.stdout, sys.stderr])
        _exit_now(code)
