"""Exception hierarchy: one base, one subclass per stage."""

from __future__ import annotations


class MhauditError(Exception):
    """Base of every error mhaudit raises on purpose.

    ``tip`` is one practical sentence telling the user what to change.
    ``exit_code`` is the documented process exit code for this kind of error.
    ``log`` holds what torch, transformers and warnings said while the failing stage ran
    (the CLI shows it with ``--verbose``).
    """

    exit_code = 2

    def __init__(self, message: str, tip: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.tip = tip
        self.log = ""

    def __str__(self) -> str:
        return self.one_line()

    def one_line(self) -> str:
        """The message and the tip on one line, as the CLI prints it."""
        text = " ".join(self.message.split()).rstrip(".")
        tip = " ".join(self.tip.split())
        return f"{text}. {tip}" if tip else f"{text}."


def _summary(exc: BaseException, limit: int) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = " ".join(lines[:3]) if lines else ""
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def first_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` on one line, then each explicit cause (``raise ... from``) after it.

    The message keeps its first three lines joined (validation errors often put the
    reason on the second line); the whole is cut to ``limit`` characters per exception.
    """
    parts = [_summary(exc, limit)]
    seen = {id(exc)}
    cause = exc.__cause__
    while cause is not None and id(cause) not in seen and len(parts) < 4:
        seen.add(id(cause))
        text = _summary(cause, limit)
        if not any(text in part or str(cause).strip() in part for part in parts):
            parts.append(text)
        cause = cause.__cause__
    return " (caused by ".join(parts) + ")" * (len(parts) - 1)


class ConfigError(MhauditError):
    """Bad flag, option, budget file or rule configuration (exit 2)."""

    exit_code = 2


class LoadError(MhauditError):
    """The model file or factory could not be imported, called or run (exit 3)."""

    exit_code = 3


class TraceError(MhauditError):
    """No tracer could turn the model into an fx graph (exit 3)."""

    exit_code = 3


INTERNAL_ERROR_EXIT = 4
"""Exit code of a bug in mhaudit itself: never 1, which CI reads as over budget."""

INTERRUPTED_EXIT = 130
"""Exit code after Ctrl-C (128 + SIGINT), the shell convention."""
