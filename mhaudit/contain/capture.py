"""Captured logs: torch's and transformers' loggers and Python warnings, kept off stderr.

While a model is built and traced, torch logs fake-tensor tracebacks and graph dumps and
transformers logs its own notices; tens of lines would bury mhaudit's one error line.
``captured_logs()`` collects them instead (and ``printed_to_log()`` what torch prints
straight to ``sys.stderr``, such as the partial graph of a failed export); the text goes
to an error's ``log``, which the CLI shows with ``--verbose``. Captures nest: the
outermost active one collects.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Iterator

from mhaudit.errors import MhauditError

LOGGERS = ("torch", "transformers", "huggingface_hub", "fvcore", "py.warnings")
"""Loggers whose records are captured (their children included)."""


class CapturedLog(logging.Handler):
    """Collects formatted records and warnings; ``text()`` gives them as one string."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.saved: list[tuple[logging.Logger, list[logging.Handler], bool]] = []
        """Each logger's state before it was routed here, to restore at the end."""
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception:  # a record whose message cannot be formatted
            self.lines.append(f"{record.levelname} {record.name}: {record.msg!r}")

    def warn(self, message: warnings.WarningMessage) -> None:
        """Add one Python warning."""
        where = f"{message.filename}:{message.lineno}"
        self.lines.append(f"WARNING {message.category.__name__} ({where}): {message.message}")

    def text(self) -> str:
        """Everything captured, one record per line."""
        return "\n".join(self.lines)


_active: list[CapturedLog] = []


def current() -> CapturedLog | None:
    """The capture now collecting, if any."""
    return _active[-1] if _active else None


Saved = list[tuple[logging.Logger, list[logging.Handler], bool]]


def _route(capture: CapturedLog, saved: Saved) -> None:
    """Point the listed loggers at ``capture`` and let their children propagate to them,
    recording each logger's previous state in ``saved`` (first change first)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if logger.handlers != [capture] or logger.propagate:
            saved.append((logger, list(logger.handlers), logger.propagate))
            logger.handlers = [capture]
            logger.propagate = False
    children = [
        logging.getLogger(name) for name in list(logging.root.manager.loggerDict)
        if name.startswith(("torch.", "transformers.")) and
        isinstance(logging.root.manager.loggerDict[name], logging.Logger)
    ]
    for logger in children:
        if logger.handlers or not logger.propagate:
            saved.append((logger, list(logger.handlers), logger.propagate))
            logger.handlers = []
            logger.propagate = True


@contextlib.contextmanager
def captured_logs() -> Iterator[CapturedLog]:
    """Route the listed loggers and every warning into a CapturedLog for the block.

    An MhauditError leaving the block gets the captured text as its ``log``. Inside an
    active capture this only yields the outer one, so nested stages share one log.
    """
    outer = current()
    if outer is not None:  # torch may have been imported since, with handlers of its own
        _route(outer, outer.saved)
        yield outer
        return
    capture = CapturedLog()
    saved = capture.saved
    _route(capture, saved)
    _active.append(capture)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")  # each warning once per place that warns
            try:
                yield capture
            finally:
                for message in caught:
                    capture.warn(message)
    except MhauditError as error:
        if not error.log:
            error.log = capture.text()
        raise
    finally:
        _active.pop()
        for logger, handlers, propagate in reversed(saved):
            logger.handlers = handlers
            logger.propagate = propagate


@contextlib.contextmanager
def printed_to_log() -> Iterator[None]:
    """Keep what is printed to ``sys.stderr`` in the block (torch's graph dumps) in the log."""
    capture = current()
    printed = io.StringIO()
    try:
        with contextlib.redirect_stderr(printed):
            yield
    finally:
        if capture is not None:
            capture.lines.extend(ln for ln in printed.getvalue().splitlines() if ln.strip())
