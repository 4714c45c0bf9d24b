"""Targets from ``[tool.mhaudit] targets`` when a command is given none (pre-commit hooks)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mhaudit.errors import ConfigError

TARGETS_KEY = "targets"
"""The ``[tool.mhaudit]`` key that lists the models to audit when no TARGET is given."""


def configured_targets(start: Path | None = None) -> tuple[str, ...]:
    """``targets = ["model.py", ...]`` of the nearest pyproject.toml with ``[tool.mhaudit]``.

    Relative paths are taken from the folder mhaudit runs in (the repository root, for a
    pre-commit hook), as on the command line.
    """
    from mhaudit.rules.config import find_pyproject, read_tool_table

    path = find_pyproject(start)
    table = read_tool_table(path) if path is not None else {}
    value = table.get(TARGETS_KEY)
    if value is None:
        return ()
    if (not isinstance(value, list) or not value
            or not all(isinstance(t, str) and t.strip() for t in value)):
        raise ConfigError(f"{path}: [tool.mhaudit] {TARGETS_KEY} must be a non-empty list of "
                          "target strings",
                          'Write it as targets = ["model.py", "config.json"].')
    return tuple(value)


def targets_or_configured(targets: Sequence[str]) -> tuple[str, ...]:
    """The command line's targets, else the configured ones; neither is a usage error."""
    if targets:
        return tuple(targets)
    found = configured_targets()
    if not found:
        raise ConfigError("no TARGET given, and no [tool.mhaudit] targets in a pyproject.toml",
                          'Name a model file (mhaudit check model.py) or add targets = '
                          '["model.py"] under [tool.mhaudit] in pyproject.toml.')
    return found
