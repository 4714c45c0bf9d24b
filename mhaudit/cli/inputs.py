"""Inputs are never outputs: every file mhaudit writes is checked against every file it reads.

``--output model.py`` would replace the model's source with its report, ``--output
budget.toml`` the budget with the gate table, and ``--output baseline.json`` (without
``--update-baseline``) the baseline with this run, so that each run compares with the one
before it. Before anything runs, each output is compared by real path and by
``os.path.samefile`` (hard links) with each input; a match is exit 2.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from mhaudit.atomic import OutputPath
from mhaudit.errors import ConfigError


def target_files(target: str) -> list[Path]:
    """The files a target names: ``model.py`` of ``model.py:NAME``, a config, a folder's config."""
    head, sep, tail = target.rpartition(":")
    candidates = [target, head] if sep and tail.isidentifier() else [target]
    files: list[Path] = []
    for text in candidates:
        path = Path(text)
        with contextlib.suppress(OSError, ValueError):
            if path.is_dir():
                path = path / "config.json"
            if path.exists():
                files.append(path)
    return files


def pyprojects(start: Path | None = None) -> list[Path]:
    """Every pyproject.toml from ``start`` (the working folder) upward: the budget and the rule
    settings come from the nearest one that has a ``[tool.mhaudit]`` table."""
    try:
        folder = (start or Path.cwd()).resolve()
    except OSError:
        return []
    found = []
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        with contextlib.suppress(OSError):
            if path.exists():
                found.append(path)
    return found


def _same(a: Path, b: Path) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def refuse_inputs_as_outputs(
    outputs: Sequence[tuple[str, OutputPath | None]],
    inputs: Iterable[tuple[str, str | Path | None]],
) -> None:
    """Raise ConfigError when an output (flag, where) is one of the inputs (what, path), or
    when two outputs name one file."""
    written = [(flag, out.path) for flag, out in outputs
               if out is not None and out.path is not None and not out.in_place]
    for index, (flag, out) in enumerate(written):
        for other_flag, other in written[index + 1:]:
            if _same(out, other):
                raise ConfigError(f"{flag} and {other_flag} both name {out}",
                                  "Write each output to its own file.")
    for what, path in inputs:
        if path is None:
            continue
        for flag, out in written:
            if _same(out, Path(path)):
                raise ConfigError(f"{flag} {out} is the {what} {path}; mhaudit never writes "
                                  "over a file it reads",
                                  f"Write {flag} to another file.")


def command_inputs(
    targets: Iterable[str], *, budget: Path | None = None, baseline: str | Path | None = None
) -> list[tuple[str, Path]]:
    """Every file a command reads: each target's file, the budget, the baseline being
    compared with, and the pyproject.toml files the settings may come from."""
    found: list[tuple[str, Path]] = []
    for target in targets:
        found.extend(("model file" if p.suffix == ".py" else "input", p)
                     for p in target_files(target))
    if budget is not None:
        found.append(("budget file", budget))
    if baseline is not None:
        found.append(("baseline", Path(baseline)))
    found.extend(("settings file", p) for p in pyprojects())
    return found


def refuse_imported_as_output(destination: OutputPath) -> None:
    """Before the output is written: it must not replace a module a model file imported
    from its folder (known only once the model ran)."""
    from mhaudit.contain.state import imported_files

    refuse_inputs_as_outputs([("--output", destination)],
                             [("module the model file imports", Path(p))
                              for p in sorted(imported_files())])
