"""The registry of rules: one code per rule, checked fields, retired codes never reused."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType

from mhaudit.rules import head_dim, kv_cache, parallel, projections, scores
from mhaudit.rules.base import NUMBER_UNITS, Rule

CODE_PATTERN = re.compile(r"^MHA\d{3}$")
NAME_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)+$")
KEY_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")
VERSION_PATTERN = re.compile(r"^\d+\.\d+\.\d+$")

RETIRED_CODES: Mapping[str, str] = MappingProxyType({})
"""Codes of removed rules, each with the version that removed it; codes are never reused."""

FAMILIES = (head_dim, scores, kv_cache, parallel, projections)
"""The modules that declare the shipped rules, one per concern, each with its ``RULES``."""


def _fields_problem(rule: Rule) -> str | None:
    """Why ``rule``'s declared fields are unusable, or None."""
    if not CODE_PATTERN.match(rule.code):
        return f"rule code {rule.code!r} is not MHA followed by three digits"
    if not NAME_PATTERN.match(rule.name):
        return f"rule name {rule.name!r} is not kebab-case"
    if not VERSION_PATTERN.match(rule.since):
        return f"{rule.code}: since {rule.since!r} is not a version such as 0.1.0"
    texts = (rule.summary, rule.why, rule.known_problems, rule.example, rule.fix)
    if not all(t.strip() for t in texts) or not rule.references:
        return f"{rule.code}: every documentation field and one reference at least are needed"
    keys = [n.key for n in rule.numbers]
    if not keys or len(set(keys)) != len(keys) or not all(KEY_PATTERN.match(k) for k in keys):
        return f"{rule.code}: numbers need unique snake_case keys"
    unknown = sorted({n.unit for n in rule.numbers} - set(NUMBER_UNITS))
    if unknown:
        return f"{rule.code}: unknown number unit(s) {', '.join(unknown)}"
    return None


class RuleRegistry:
    """Rules by code; rejects duplicate or retired codes, duplicate names, bad fields."""

    def __init__(self, rules: Iterable[Rule] = (),
                 retired: Mapping[str, str] = RETIRED_CODES) -> None:
        self._rules: dict[str, Rule] = {}
        self._retired = retired
        for rule in rules:
            self.add(rule)

    def add(self, rule: Rule) -> Rule:
        """Register ``rule`` and return it."""
        problem = _fields_problem(rule)
        if problem:
            raise ValueError(problem)
        if rule.code in self._retired:
            raise ValueError(f"rule code {rule.code} was retired in {self._retired[rule.code]} "
                             "and cannot be reused")
        if rule.code in self._rules:
            raise ValueError(f"duplicate rule code {rule.code}")
        if any(r.name == rule.name for r in self._rules.values()):
            raise ValueError(f"duplicate rule name {rule.name}")
        self._rules[rule.code] = rule
        return rule

    def get(self, key: str) -> Rule | None:
        """A rule by code (any case) or name; None when unknown."""
        wanted = key.strip()
        rule = self._rules.get(wanted.upper())
        if rule is not None:
            return rule
        return next((r for r in self._rules.values() if r.name == wanted.lower()), None)

    def retired(self, code: str) -> str | None:
        """The version that retired ``code``; None when it was never retired."""
        return self._retired.get(code.strip().upper())

    def retired_codes(self) -> Mapping[str, str]:
        """Every retired code with the version that retired it."""
        return self._retired

    def __iter__(self) -> Iterator[Rule]:
        return iter(sorted(self._rules.values(), key=lambda r: r.code))

    def __len__(self) -> int:
        return len(self._rules)

    def codes(self) -> tuple[str, ...]:
        """All registered codes in order."""
        return tuple(r.code for r in self)


REGISTRY = RuleRegistry(rule for family in FAMILIES for rule in family.RULES)
"""The rules mhaudit ships, from every module in :data:`FAMILIES`."""
