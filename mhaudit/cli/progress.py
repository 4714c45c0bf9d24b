"""A status line on stderr while a model is loaded, traced and measured (TTY only)."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TextIO

FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
BAR = 24


def status_label(target: str, index: int, count: int) -> str:
    """``mhaudit: model.py``, or ``mhaudit [2/3] model.py`` among several targets."""
    return f"mhaudit [{index + 1}/{count}] {target}" if count > 1 else f"mhaudit: {target}"


class Status:
    """``mhaudit [1/2] model.py: tracing ⠹ 3.2 s``, then a bar while measuring:
    ``[######......] 3/10``.

    The audit names its stages through :meth:`stage`. Draws only when the stream is a
    terminal; otherwise it prints one line when a measurement ends, so that logs still
    say what happened.
    """

    def __init__(self, label: str, stream: TextIO | None = None, interval: float = 0.1):
        self.label = label
        self.stream = stream or sys.stderr
        self.interactive = self.stream.isatty()
        self.interval = interval
        self._progress: tuple[int, int] | None = None
        self._stage = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.perf_counter()
        self._lock = threading.Lock()

    def line(self) -> str:
        """The text the status line shows now."""
        elapsed = time.perf_counter() - self._started
        if self._progress is not None:
            done, total = self._progress
            filled = BAR * done // max(1, total)
            bar = "#" * filled + "." * (BAR - filled)
            return f"{self.label}: measuring [{bar}] {done}/{total} {elapsed:.1f} s"
        frame = FRAMES[int(elapsed / self.interval) % len(FRAMES)]
        now = f": {self._stage}" if self._stage else ""
        return f"{self.label}{now} {frame} {elapsed:.1f} s"

    def stage(self, name: str) -> None:
        """The stage callback: the audit entered stage ``name``."""
        self._stage = name
        if self.interactive:
            self._draw()

    def measured(self, done: int, total: int) -> None:
        """The measurement callback ``(done, total)``."""
        self._progress = (done, total)
        if not self.interactive and done == total:
            self.stream.write(f"{self.label}: measured {total} forwards\n")
        elif self.interactive:
            self._draw()

    def _draw(self) -> None:
        with self._lock:
            self.stream.write("\r\x1b[K" + self.line())
            self.stream.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._draw()

    def __enter__(self) -> Status:
        if self.interactive:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            with self._lock:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
