"""Containment of user code: every way a model can fail or escape becomes one mhaudit error.

Importing, building, tracing and running a model execute code mhaudit does not control.
``contained(stage, source)`` turns ``SystemExit``, a ``KeyboardInterrupt`` the model
raised itself, and every exception into a :class:`LoadError` (or :class:`TraceError`)
naming the model and the stage; a real Ctrl-C still ends the run. ``time_limit`` bounds
the stages with a timer, and ``preserved_state`` restores the working directory and
``sys.path`` after the model ran. While model code runs, ``os._exit`` raises instead of
ending the process and ``os.fork`` is refused, so neither can end or double the run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, ClassVar

from mhaudit.errors import LoadError, MhauditError, TraceError, first_line, safe_text, type_name

_stages: list[str] = []
"""The stages now running, innermost last (the timer names the innermost one)."""

_sources: list[str] = []
"""The model source of each running stage, beside ``_stages``."""

HardStop = Callable[[str], None]
"""Called with "SOURCE: timed out after S s in STAGE" when the timer failed to stop a stage."""

_hard_stops: list[HardStop] = []

GRACE_S = 1.0
"""How long past the time limit the watchdog waits for the timer before its hard stop."""

_sigint = threading.Event()
"""Set by the SIGINT handler, so a real Ctrl-C is told apart from a raised KeyboardInterrupt."""


class Terminated(BaseException):
    """SIGTERM arrived (the CLI raises it), so ``finally`` blocks such as temp-file removal run.

    It ends the run: containment lets it through like a real Ctrl-C.
    """

    exit_code = 128 + signal.SIGTERM


class StageTimeout(BaseException):
    """Raised by the timer inside user code; a BaseException so ``except Exception`` misses it."""

    exit_code = LoadError.exit_code

    def __init__(self, seconds: float, stage: str) -> None:
        super().__init__(f"timed out after {seconds:g} s in {stage}")
        self.seconds = seconds
        self.stage = stage


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def interrupted() -> bool:
    """True once a real SIGINT arrived while a contained stage was running."""
    return _sigint.is_set()


KEPT_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""Signals whose handlers model code cannot replace, ignore or block: they end the run
(130, 143) with the outputs untouched."""

_REAL_SIGNAL = signal.signal
"""``signal.signal`` as it was at import: mhaudit's own handlers never go through the
guard that keeps a model's SIGINT handler out."""


@contextlib.contextmanager
def _watch_sigint() -> Iterator[None]:
    """Record real SIGINTs, then let the previous handler act on them as before."""
    if not _main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: FrameType | None) -> Any:
        _sigint.set()
        if callable(previous):
            return previous(signum, frame)
        raise KeyboardInterrupt

    try:
        _REAL_SIGNAL(signal.SIGINT, handler)
    except ValueError:  # pragma: no cover - not the main interpreter
        yield
        return
    try:
        yield
    finally:
        _REAL_SIGNAL(signal.SIGINT, previous)


class ModelExit(BaseException):
    """``os._exit(code)`` called by model code: raised instead of ending the process."""

    def __init__(self, code: object) -> None:
        super().__init__(code)
        self.code = code


def _model_exit(code: object = 0) -> None:
    raise ModelExit(code)


def _model_fork() -> int:
    raise OSError("the model forked a process; mhaudit audits one process and refuses it")


_guards: list[None] = []


@contextlib.contextmanager
def _guarded_process() -> Iterator[None]:
    """``os._exit`` and ``os.fork`` of the model's code raise instead, and a SIGINT or
    SIGTERM handler it installs (or a mask that blocks them) is not installed (the
    outermost guard patches them; nested ones leave them be)."""
    if _guards:
        _guards.append(None)
        try:
            yield
        finally:
            _guards.pop()
        return
    _guards.append(None)
    real_exit, real_fork = os._exit, getattr(os, "fork", None)

    def model_signal(signum: Any, handler: Any) -> Any:
        if signum in KEPT_SIGNALS:  # Ctrl-C and kill stay the user's: the model's handler
            return signal.getsignal(signum)  # is kept out
        return _REAL_SIGNAL(signum, handler)

    real_mask = getattr(signal, "pthread_sigmask", None)

    def model_mask(how: Any, mask: Any) -> Any:
        if how != signal.SIG_UNBLOCK:  # the model may not block them either
            mask = set(mask) - set(KEPT_SIGNALS)
        assert real_mask is not None
        return real_mask(how, mask)

    os._exit = _model_exit  # type: ignore[assignment]
    signal.signal = model_signal  # type: ignore[assignment]
    if real_mask is not None:
        signal.pthread_sigmask = model_mask
    if real_fork is not None:
        os.fork = _model_fork
    try:
        yield
    finally:
        _guards.pop()
        signal.signal = _REAL_SIGNAL
        if real_mask is not None:
            signal.pthread_sigmask = real_mask
        os._exit = real_exit
        if real_fork is not None:
            os.fork = real_fork


@contextlib.contextmanager
def process_guard(source: str) -> Iterator[None]:
    """Around a whole audit: model code that calls ``os._exit`` anywhere (a forward run on
    fake tensors outside a named stage included) is a TraceError, not the end of the run."""
    with _guarded_process():
        try:
            yield
        except ModelExit as exc:
            raise TraceError(f"{source}: the model called os._exit({safe_text(exc.code)})",
                             _TIPS["SystemExit"]) from exc


def _exit_text(code: object) -> str:
    if code is None:
        return "sys.exit()"
    if type(code) is int:
        return f"sys.exit({code})"
    return f"sys.exit({safe_text(code, repr)[:80]})"


_TIPS = {
    "SystemExit": "Model files must not exit: put script code under "
                  "`if __name__ == \"__main__\":`.",
    "KeyboardInterrupt": "Model code raised KeyboardInterrupt; remove the raise.",
    "ModuleNotFoundError": "Install the missing package, or check the import's name.",
    "ImportError": "Check the import and that the package is installed.",
    "SyntaxError": "Fix the syntax at the line named.",
    "TypeError": "Check the arguments the call needs; a factory is called with none.",
    "RecursionError": "The model nests too deeply to build or trace; flatten it.",
    "MemoryError": "The model does not fit in memory here; build it on --device meta.",
    "OutOfMemoryError": "Lower --batch-size or --seq-len, or measure on a larger device.",
}


def _tip(exc: BaseException, stage: str, default: str | None) -> str:
    """The fix that matches the cause: by exception type, else the stage's own tip."""
    names = [type_name(cls) for cls in type(exc).__mro__]
    for name in names:
        if name in _TIPS and (default is None or name in _RESOURCE):
            return _TIPS[name]
    if default is not None:
        return default
    if "forward" in stage:
        return "Check that the inputs match forward() and that forward runs on its own."
    return f"Fix {stage} in the model file."


_RESOURCE = ("RecursionError", "MemoryError", "OutOfMemoryError")


@contextlib.contextmanager
def contained(
    stage: str, source: str, *, trace: bool = False, tip: str | None = None
) -> Iterator[None]:
    """Run user code of ``stage`` (e.g. ``build_model()``) from ``source``.

    Anything it raises, ``SystemExit`` included, becomes a LoadError (or a TraceError
    with ``trace=True``) naming both; MhauditError and a real Ctrl-C pass through.
    """
    error_type = TraceError if trace else LoadError
    if not _stages:
        _sigint.clear()  # a Ctrl-C from an earlier audit in this process is over
    _stages.append(stage)
    _sources.append(source)
    try:
        with _watch_sigint(), _guarded_process():
            yield
    except (MhauditError, Terminated):
        raise
    except StageTimeout as exc:
        raise error_type(f"{source}: {exc}", "Raise --timeout, or find the loop that does not "
                         "end (run it with --verbose for the traceback).") from exc
    except KeyboardInterrupt as exc:
        if interrupted():
            raise
        raise error_type(f"{source}: {stage} raised KeyboardInterrupt",
                         _TIPS["KeyboardInterrupt"]) from exc
    except SystemExit as exc:
        raise error_type(f"{source}: {stage} called {_exit_text(exc.code)}",
                         _TIPS["SystemExit"]) from exc
    except ModelExit as exc:
        raise error_type(f"{source}: {stage} called os._exit({safe_text(exc.code)})",
                         _TIPS["SystemExit"]) from exc
    except BaseException as exc:  # GeneratorExit and any other BaseException of user code
        raise error_type(f"{source}: {stage} failed: {first_line(exc)}",
                         _tip(exc, stage, tip)) from exc
    finally:
        _stages.pop()
        _sources.pop()


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise StageTimeout in the running stage once ``seconds`` have passed (None: no limit)."""
    if seconds is None:
        yield
        return
    if not hasattr(signal, "setitimer"):  # pragma: no cover - Windows
        from mhaudit.errors import ConfigError

        raise ConfigError("a timeout needs SIGALRM, which this platform lacks",
                          "Run without --timeout here.")
    if not _main_thread():
        from mhaudit.errors import ConfigError

        raise ConfigError("a timeout works only in the main thread",
                          "Call audit() from the main thread, or drop the timeout.")

    def expire(signum: int, frame: FrameType | None) -> None:
        raise StageTimeout(seconds, _stages[-1] if _stages else "the audit")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    dog = _Watchdog(seconds) if _hard_stops else None
    try:
        yield
    except StageTimeout as exc:  # fired between two stages, in mhaudit's own code
        raise LoadError(str(exc), "Raise the timeout.") from exc
    finally:
        if dog is not None:
            dog.stop()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def set_hard_stop(handler: HardStop | None) -> None:
    """Install what a timed stage does when its timer fails to stop it (the CLI: exit).

    Model code can disarm SIGALRM (``signal.setitimer(signal.ITIMER_REAL, 0)``, a handler
    of its own, a blocked signal). With a hard stop installed, every ``time_limit`` also
    starts a daemon watchdog thread that calls it ``GRACE_S`` after the limit unless the
    stages ended. The library installs none: it never ends the process.
    """
    _hard_stops[:] = [handler] if handler is not None else []


class _Watchdog:
    """A daemon thread that waits for the stages to end and calls the hard stop if not."""

    active: ClassVar[list[_Watchdog]] = []

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.done = threading.Event()
        self.handler = _hard_stops[-1]
        _Watchdog.active.append(self)
        threading.Thread(target=self._watch, name="mhaudit-watchdog", daemon=True).start()

    def _watch(self) -> None:
        if self.done.wait(self.seconds + GRACE_S):
            return
        stage = _stages[-1] if _stages else "the audit"
        source = f"{_sources[-1]}: " if _sources else ""
        self.handler(f"{source}timed out after {self.seconds:g} s in {stage}")

    def stop(self) -> None:
        self.done.set()
        with contextlib.suppress(ValueError):
            _Watchdog.active.remove(self)


@contextlib.contextmanager
def preserved_state(path_entry: str | None = None) -> Iterator[None]:
    """Restore the working directory and ``sys.path`` afterwards; ``path_entry`` goes first.

    A model folder stays importable for the whole audit (a ``build_model()`` that imports
    a sibling module at call time, or a forward that does), and a model that calls
    ``os.chdir`` does not move anything mhaudit writes afterwards.
    """
    try:
        cwd: str | None = os.getcwd()
    except OSError:  # pragma: no cover - the folder was removed under us
        cwd = None
    saved = list(sys.path)
    if path_entry is not None:
        sys.path.insert(0, path_entry)
    try:
        yield
    finally:
        sys.path[:] = saved
        if cwd is not None:
            with contextlib.suppress(OSError):
                os.chdir(cwd)


def stop_timer() -> None:
    """End the running time limit early: the stages it bounds are over."""
    if hasattr(signal, "setitimer") and _main_thread():
        signal.setitimer(signal.ITIMER_REAL, 0)
    for dog in list(_Watchdog.active):
        dog.stop()
