"""Where in the user's source a block or a model lives, for code-scanning annotations."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLocation:
    """A file and a line, as code-scanning tools want them."""

    path: str
    """POSIX path, relative to the working tree when the file lies inside it, else absolute."""
    line: int
    """1-based line number (the ``class`` line of a module, the line that builds a model)."""
    symbol: str = ""
    """What sits there: a class's qualified name, or the factory that builds the model."""
