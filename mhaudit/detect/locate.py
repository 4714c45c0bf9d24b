"""Source locations: the ``class`` line of each attention module, or where the model is built.

Code scanning (SARIF, GitHub annotations) needs a file and a line. A block points at the
class of its module when that class is defined inside the working tree; otherwise (a
library class such as a transformers attention) it points at the model target file and
the line that builds the model, which is the code the user can change.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sysconfig
from pathlib import Path
from typing import Any

from mhaudit.contain.files import read_input_text
from mhaudit.data import SourceLocation
from mhaudit.errors import MhauditError
from mhaudit.trace.graphs import submodule


def relative_path(path: str | Path, root: Path | None = None) -> tuple[str, bool]:
    """``path`` as POSIX text relative to ``root`` (the working directory), and whether it
    lies inside it."""
    base = (root or Path.cwd()).resolve()
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(base).as_posix(), True
    except ValueError:
        return resolved.as_posix(), False


def is_library(path: str | Path) -> bool:
    """True for installed code (site-packages, the standard library), even inside a
    virtual environment that lives in the working tree."""
    parts = Path(path).resolve().parts
    if "site-packages" in parts or "dist-packages" in parts:
        return True
    paths = sysconfig.get_paths()
    roots = {Path(paths[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    resolved = Path(path).resolve()
    return any(resolved.is_relative_to(r) for r in roots)


def class_location(cls: type, root: Path | None = None) -> SourceLocation | None:
    """The file and ``class`` line of ``cls`` when it is user code inside ``root``.

    The file is checked first: finding a class's line parses its whole module, which is
    wasted on a library class (a transformers attention) that is never pointed at.
    """
    try:
        path = inspect.getsourcefile(cls)
    except (OSError, TypeError):
        return None
    if path is None or is_library(path):
        return None
    shown, inside = relative_path(path, root)
    if not inside:
        return None
    try:
        _, line = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return None
    return SourceLocation(shown, max(1, line), cls.__qualname__)


def _split(target: str) -> tuple[str, str]:
    head, sep, tail = target.rpartition(":")
    if not sep or (len(head) == 1 and head.isalpha()) or "/" in tail or "\\" in tail:
        return target, ""
    return head, tail


def _definition_line(source: str, names: tuple[str, ...]) -> tuple[int, str] | None:
    """The first top-level ``def``/``class``/assignment of one of ``names`` (in that order)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    found: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.setdefault(node.name, node.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, node.lineno)
    for name in names:
        if name in found:
            return found[name], name
    return None


def model_location(target: str, root: Path | None = None) -> SourceLocation | None:
    """The target file and the line where the model is built.

    ``model.py:NAME`` points at NAME's definition, ``model.py`` at ``build_model`` or the
    module-level ``model``, ``pkg.mod:NAME`` at the module's file, and ``config.json`` at
    its first line.
    """
    spec, attr = _split(target)
    path = Path(spec)
    if not path.is_file():
        try:
            found = importlib.util.find_spec(spec)
        except (ImportError, ValueError):
            return None
        if found is None or not found.origin or not Path(found.origin).is_file():
            return None
        path = Path(found.origin)
    shown, _ = relative_path(path, root)
    if path.suffix != ".py":
        return SourceLocation(shown, 1, path.name)
    names = (attr,) if attr else ("build_model", "model")
    try:
        hit = _definition_line(read_input_text(path, "model file"), names)
    except MhauditError:  # read as every input is: regular, bounded, never blocking
        hit = None
    if hit is None:
        return SourceLocation(shown, 1, attr)
    return SourceLocation(shown, hit[0], hit[1])


def block_locations(
    model: Any, names: list[str], fallback: SourceLocation | None, root: Path | None = None
) -> list[SourceLocation | None]:
    """For each block name, its module's class location inside ``root``, else ``fallback``."""
    out: list[SourceLocation | None] = []
    by_class: dict[type, SourceLocation | None] = {}  # twelve layers share one class
    for name in names:
        module = submodule(model, name)
        if module is None:
            out.append(fallback)
            continue
        cls = type(module)
        if cls not in by_class:
            by_class[cls] = class_location(cls, root)
        out.append(by_class[cls] or fallback)
    return out
