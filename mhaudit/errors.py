"""Exception hierarchy: one base, one subclass per stage."""

from __future__ import annotations


class MhauditError(Exception):
    """Base of every error mhaudit raises on purpose.

    ``tip`` is one practical sentence telling the user what to change.
    ``exit_code`` is the documented process exit code for this kind of error.
    """

    exit_code = 2

    def __init__(self, message: str, tip: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.tip = tip

    def __str__(self) -> str:
        return self.one_line()

    def one_line(self) -> str:
        """The message and the tip on one line, as the CLI prints it."""
        text = self.message.rstrip(".")
        return f"{text}. {self.tip}" if self.tip else f"{text}."


def first_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message``, cut to ``limit`` characters."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class ConfigError(MhauditError):
    """Bad flag, option, budget file or rule configuration (exit 2)."""

    exit_code = 2


class LoadError(MhauditError):
    """The model file or factory could not be imported or called (exit 3)."""

    exit_code = 3


class TraceError(MhauditError):
    """No tracer could turn the model into an fx graph (exit 3)."""

    exit_code = 3
