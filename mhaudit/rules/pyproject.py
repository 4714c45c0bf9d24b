"""pyproject.toml's ``[tool.mhaudit]``: read once, through the input reader, every key typed.

Every command reads the table through :func:`tool_table`: the file is read as every input
is (a regular file, bounded, never blocking), and a value of the wrong type anywhere on
the way (``tool = "mhaudit"``, ``[tool] mhaudit = 1``, ``select = 5``) is a ConfigError
naming the key, never an AttributeError deep inside a reader.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

from mhaudit.contain.files import read_input_text
from mhaudit.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _table(value: Any) -> bool:
    return isinstance(value, Mapping)


def _codes(value: Any) -> bool:
    return isinstance(value, str) or (
        isinstance(value, list) and all(isinstance(v, str) for v in value))


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


SCHEMA: dict[str, tuple[Callable[[Any], bool], str, str]] = {
    "targets": (lambda v: _strings(v) and bool(v), "a non-empty list of target strings",
                'targets = ["model.py", "config.json"]'),
    "budget": (_table, "a table", '[tool.mhaudit.budget] with max_params = "20M"'),
    "select": (_codes, "a string or a list of strings", 'select = ["MHA00"]'),
    "ignore": (_codes, "a string or a list of strings", 'ignore = ["MHA007"]'),
    "severity": (_table, "a table", '[tool.mhaudit.severity] with MHA007 = "error"'),
    "thresholds": (_table, "a table", "[tool.mhaudit.thresholds.MHA007]"),
    "per-module-ignores": (_table, "a table", '[tool.mhaudit.per-module-ignores]'),
    "per_module_ignores": (_table, "a table", '[tool.mhaudit.per-module-ignores]'),
}
"""Each key of ``[tool.mhaudit]``: its type check, the type in words, and an example."""


def toml_type(value: Any) -> str:
    """The TOML name of a parsed value's type."""
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "float"), (str, "string"),
                       (list, "array"), (Mapping, "table"), (datetime, "date-time"),
                       (date, "date"), (time, "time")):
        if isinstance(value, kind):
            return name
    return "value"


def read_pyproject(path: Path, what: str = "settings file") -> dict[str, Any]:
    """The parsed TOML of ``path``, read through the one input reader."""
    text = read_input_text(path, what)
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise ConfigError(f"{path} nests too deeply to read", "Check the file.") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"cannot read {path}: {exc}", "Fix the TOML syntax.") from None


def _wrong(path: Path, key: str, value: Any, what: str, example: str) -> ConfigError:
    kind = toml_type(value)
    article = "an" if kind[0] in "aeiou" else "a"
    return ConfigError(f"{path}: {key} must be {what}, not {article} {kind}",
                       f"Write it as {example}.")


def tool_table(path: Path) -> Mapping[str, Any] | None:
    """``[tool.mhaudit]`` of ``path`` with every key's type checked; None without one."""
    data = read_pyproject(path)
    tool = data.get("tool")
    if tool is None:
        return None
    if not isinstance(tool, Mapping):
        raise _wrong(path, "tool", tool, "a table", "a [tool.mhaudit] header")
    table = tool.get("mhaudit")
    if table is None:
        return None
    if not isinstance(table, Mapping):
        raise _wrong(path, "tool.mhaudit", table, "a table", "a [tool.mhaudit] header")
    for key, value in table.items():
        check, what, example = SCHEMA.get(key, (lambda _: True, "", ""))
        if not check(value):
            raise _wrong(path, f"tool.mhaudit.{key}", value, what, example)
    return table
