"""Rule configuration: select/ignore, severities, thresholds, suppressions; pyproject and CLI."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from mhaudit.data import Severity
from mhaudit.errors import ConfigError
from mhaudit.rules.base import Rule
from mhaudit.rules.registry import REGISTRY

RULE_KEYS: tuple[str, ...] = ("select", "ignore", "severity", "thresholds", "per-module-ignores")
"""Keys of ``[tool.mhaudit]`` that configure rules."""

_KEY_ALIASES = {"per_module_ignores": "per-module-ignores"}


def _prefix(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected a rule code or prefix, got {value!r}",
                          "Use codes such as MHA005 or prefixes such as MHA00.")
    text = value.strip().upper()
    if text == "ALL":
        return "MHA"
    _refuse_retired(value, key)
    rule = REGISTRY.get(value)
    if rule is not None:
        return rule.code
    if not text.startswith("MHA") or not any(c.startswith(text) for c in REGISTRY.codes()):
        raise ConfigError(f"{key}: {value!r} matches no rule code",
                          "Run `mhaudit rules` to list the codes.")
    return text


def _prefixes(values: Any, key: str) -> tuple[str, ...]:
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, Iterable):
        raise ConfigError(f"{key}: expected a list of rule codes, got {values!r}")
    out: list[str] = []
    for item in values:
        parts = item.split(",") if isinstance(item, str) else [item]
        out.extend(_prefix(p, key) for p in parts if not isinstance(p, str) or p.strip())
    return tuple(out)


def _refuse_retired(code: str, key: str) -> None:
    retired = REGISTRY.retired(code)
    if retired is not None:
        raise ConfigError(f"{key}: rule {code.strip().upper()} was retired in mhaudit {retired}",
                          "Remove it from the configuration; retired codes are never reused.")


def _rule(code: Any, key: str) -> Rule:
    if isinstance(code, str):
        _refuse_retired(code, key)
    rule = REGISTRY.get(code) if isinstance(code, str) else None
    if rule is None:
        raise ConfigError(f"{key}: unknown rule {code!r}", "Run `mhaudit rules` to list them.")
    return rule


def _severity(value: Any, key: str) -> Severity:
    if isinstance(value, Severity):
        return value
    try:
        return Severity(str(value).strip().lower())
    except ValueError:
        raise ConfigError(f"{key}: bad severity {value!r}",
                          "Use info, warning or error.") from None


def _number(value: Any, key: str) -> float:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < 0:
        raise ConfigError(f"{key}: expected a non-negative number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class RuleConfig:
    """Which rules run, at what severity and thresholds, and where they are suppressed."""

    select: tuple[str, ...] = ("MHA",)
    """Code prefixes to run (``MHA`` is every rule)."""
    ignore: tuple[str, ...] = ()
    """Code prefixes to skip; the longer of a matching select and ignore prefix wins."""
    severity: Mapping[str, Severity] = field(default_factory=dict)
    """Code to severity overrides."""
    thresholds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """Code to threshold overrides, e.g. ``{"MHA007": {"min_bytes_per_token": 16384}}``."""
    per_module_ignores: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Module-path glob (``encoder.*``) to code prefixes suppressed there."""
    source: str | None = None
    """The pyproject.toml the configuration came from, when any."""

    def __post_init__(self) -> None:
        for name, value in (
            ("select", _prefixes(self.select, "select")),
            ("ignore", _prefixes(self.ignore, "ignore")),
            ("severity", _severities(self.severity, "severity")),
            ("thresholds", _thresholds(self.thresholds, "thresholds")),
            ("per_module_ignores", _suppressions(self.per_module_ignores, "per-module-ignores")),
        ):
            object.__setattr__(self, name, value)

    def enabled(self, code: str) -> bool:
        """True when ``code`` is selected and not ignored."""
        sel = max((len(p) for p in self.select if code.startswith(p)), default=-1)
        ign = max((len(p) for p in self.ignore if code.startswith(p)), default=-1)
        return sel >= 0 and sel > ign

    def suppressed(self, block_name: str, code: str) -> bool:
        """True when a per-module pattern matching ``block_name`` ignores ``code``."""
        return any(
            fnmatchcase(block_name, pattern) and any(code.startswith(p) for p in prefixes)
            for pattern, prefixes in self.per_module_ignores.items()
        )

    def severity_for(self, rule: Rule) -> Severity:
        """The configured severity of ``rule``."""
        return self.severity.get(rule.code, rule.severity)

    def thresholds_for(self, rule: Rule) -> dict[str, float]:
        """The rule's default thresholds with the configured overrides applied."""
        return {**rule.default_thresholds, **self.thresholds.get(rule.code, {})}

    def merged(
        self, *, select: Any = None, ignore: Any = None, severity: Any = None,
        thresholds: Any = None, per_module_ignores: Any = None,
    ) -> RuleConfig:
        """This configuration with CLI values over it.

        ``select``/``ignore`` (codes, comma lists allowed) replace the file's lists;
        ``severity`` (``CODE=level``), ``thresholds`` (``CODE.key=value``) and
        ``per_module_ignores`` (``PATTERN=CODE,CODE``) add to or override its tables.
        Each may also be given as a mapping. None leaves a setting as it is.
        """
        out = self
        if select:
            out = replace(out, select=_prefixes(select, "--select"))
        if ignore:
            out = replace(out, ignore=_prefixes(ignore, "--ignore"))
        if severity:
            out = replace(out, severity={**out.severity, **_severities(
                _pairs(severity, "--severity"), "--severity")})
        if thresholds:
            table = _threshold_pairs(thresholds)
            merged = {code: {**out.thresholds.get(code, {}), **values}
                      for code, values in {**out.thresholds, **table}.items()}
            out = replace(out, thresholds=merged)
        if per_module_ignores:
            out = replace(out, per_module_ignores={**out.per_module_ignores, **_suppressions(
                _pairs(per_module_ignores, "--per-module-ignores"), "--per-module-ignores")})
        return out


def _pairs(values: Any, key: str) -> dict[str, Any]:
    if isinstance(values, Mapping):
        return dict(values)
    if isinstance(values, str):
        values = [values]
    out: dict[str, Any] = {}
    for item in values:
        name, sep, value = str(item).partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"{key}: expected NAME=VALUE, got {item!r}")
        out[name.strip()] = value.strip()
    return out


def _table(value: Any, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: expected a table, got {value!r}")
    return value


def _severities(table: Any, key: str) -> dict[str, Severity]:
    return {_rule(code, f"{key}.{code}").code: _severity(value, f"{key}.{code}")
            for code, value in _table(table, key).items()}


def _thresholds(table: Any, key: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for code, values in _table(table, key).items():
        rule = _rule(code, f"{key}.{code}")
        for name, value in _table(values, f"{key}.{code}").items():
            where = f"{key}.{code}.{name}"
            if name not in rule.default_thresholds:
                known = ", ".join(rule.default_thresholds) or "none"
                raise ConfigError(f"{where}: unknown threshold", f"{rule.code} has: {known}.")
            out.setdefault(rule.code, {})[name] = _number(value, where)
    return out


def _threshold_pairs(values: Any) -> dict[str, dict[str, float]]:
    if isinstance(values, Mapping):
        return _thresholds(values, "--threshold")
    nested: dict[str, dict[str, Any]] = {}
    for name, value in _pairs(values, "--threshold").items():
        code, dot, key = name.partition(".")
        if not dot:
            raise ConfigError(f"--threshold: expected CODE.NAME=VALUE, got {name!r}")
        nested.setdefault(code, {})[key] = value
    return _thresholds(nested, "--threshold")


def _suppressions(table: Any, key: str) -> dict[str, tuple[str, ...]]:
    return {str(pattern): _prefixes(codes, f"{key}.{pattern}")
            for pattern, codes in _table(table, key).items()}


def config_from_table(
    table: Mapping[str, Any], source: str | None = None, other_keys: Collection[str] = (),
) -> RuleConfig:
    """A :class:`RuleConfig` from a ``[tool.mhaudit]`` table; ``other_keys`` are let through."""
    where = f"[tool.mhaudit] in {source}" if source else "[tool.mhaudit]"
    values: dict[str, Any] = {}
    for raw_key, value in table.items():
        key = _KEY_ALIASES.get(raw_key, raw_key)
        if key in other_keys or raw_key in other_keys:
            continue
        if key not in RULE_KEYS:
            raise ConfigError(f"unknown key {raw_key!r} in {where}",
                              f"Rule settings are: {', '.join(RULE_KEYS)}.")
        values[key.replace("-", "_")] = value
    return RuleConfig(source=source, **values)


def find_pyproject(start: Path | None = None) -> Path | None:
    """The closest pyproject.toml with a ``[tool.mhaudit]`` table, from ``start`` upward."""
    from mhaudit.rules.pyproject import tool_table

    folder = (start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        if path.is_file() and tool_table(path) is not None:
            return path
    return None


def read_tool_table(path: Path) -> Mapping[str, Any]:
    """The ``[tool.mhaudit]`` table of ``path``, every key's type checked (a ConfigError
    naming the key otherwise); empty without one."""
    from mhaudit.rules.pyproject import tool_table

    return tool_table(path) or {}


def load_config(
    start: Path | None = None, *, use_pyproject: bool = True, other_keys: Collection[str] = (),
    select: Any = None, ignore: Any = None, severity: Any = None, thresholds: Any = None,
    per_module_ignores: Any = None,
) -> RuleConfig:
    """``[tool.mhaudit]`` of the closest pyproject.toml with CLI values merged over it."""
    config = RuleConfig()
    path = find_pyproject(start) if use_pyproject else None
    if path is not None:
        config = config_from_table(read_tool_table(path), str(path), other_keys)
    return config.merged(select=select, ignore=ignore, severity=severity,
                         thresholds=thresholds, per_module_ignores=per_module_ignores)


def _toml_number(value: float) -> str:
    return f"{value:g}"


def config_example(rule: Rule) -> str:
    """A ``pyproject.toml`` excerpt that configures ``rule``: ignore, severity, thresholds."""
    lines = ["[tool.mhaudit]", f'ignore = ["{rule.code}"]', "",
             "[tool.mhaudit.severity]", f'{rule.code} = "{rule.severity.value}"']
    if rule.thresholds:
        lines += ["", f"[tool.mhaudit.thresholds.{rule.code}]"]
        lines += [f"{t.key} = {_toml_number(t.default)}" for t in rule.thresholds]
    lines += ["", "[tool.mhaudit.per-module-ignores]", f'"encoder.*" = ["{rule.code}"]']
    return "\n".join(lines)
