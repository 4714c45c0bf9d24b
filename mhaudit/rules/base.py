"""The rule object, the context a check sees, and the registry of rules."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from mhaudit.cost.devices import DEFAULT_GPU, GpuProfile, canonical_dtype, dtype_bytes, get_profile
from mhaudit.data import AttentionBlock, Finding, Severity

CODE_PATTERN = re.compile(r"^MHA\d{3}$")
NAME_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)+$")

RETIRED_CODES: frozenset[str] = frozenset()
"""Codes of removed rules; codes are never reused."""


@dataclass(frozen=True)
class RuleContext:
    """What a check knows besides the block: the target, the dtype and its thresholds."""

    profile: GpuProfile
    """The target GPU profile."""
    dtype: str
    """Canonical dtype name, e.g. ``bfloat16``."""
    element_bytes: int
    """Bytes per element of ``dtype``."""
    tensor_parallel: int | None = None
    """Tensor-parallel degree to check head counts against; None when not asked."""
    thresholds: Mapping[str, float] = field(default_factory=dict)
    """Resolved thresholds of the rule being checked (defaults plus configuration)."""

    @classmethod
    def for_target(
        cls, gpu: str | GpuProfile | None = None, dtype: str | None = None,
        tensor_parallel: int | None = None,
    ) -> RuleContext:
        """A context from a GPU key or profile (default h100), a dtype name (default
        bfloat16) and a tensor-parallel degree."""
        profile = gpu if isinstance(gpu, GpuProfile) else get_profile(gpu or DEFAULT_GPU)
        name = canonical_dtype(dtype or "bfloat16")
        return cls(profile, name, dtype_bytes(name), tensor_parallel)

    def threshold(self, key: str) -> float:
        """One resolved threshold of the rule being checked."""
        return self.thresholds[key]


CheckFn = Callable[[AttentionBlock, RuleContext], "Finding | None"]


@dataclass(frozen=True)
class Threshold:
    """One configurable number of a rule."""

    key: str
    default: float
    description: str


@dataclass(frozen=True)
class Rule:
    """One declared rule: its code, name, documentation, severity and check."""

    code: str
    """Stable code, e.g. ``MHA005``; never reused."""
    name: str
    """Kebab-case name of the problem, e.g. ``materialized-attention-scores``."""
    summary: str
    """One sentence: what the rule flags."""
    why: str
    """Why the flagged layout costs (compute, memory, kernels)."""
    example: str
    """A layout that fires the rule."""
    fix: str
    """What to do instead, in general."""
    severity: Severity
    """Default severity."""
    thresholds: tuple[Threshold, ...]
    """Configurable numbers with their defaults."""
    check: CheckFn = field(compare=False, repr=False)
    """``(block, ctx) -> Finding | None``; ``ctx.thresholds`` holds this rule's values."""

    @property
    def default_thresholds(self) -> Mapping[str, float]:
        """Threshold key to default value."""
        return MappingProxyType({t.key: t.default for t in self.thresholds})

    def finding(
        self, block: AttentionBlock, message: str, numbers: Mapping[str, float],
        fix: str | None = None,
    ) -> Finding:
        """A finding of this rule about ``block`` at the default severity."""
        return Finding(
            code=self.code, name=self.name, severity=self.severity, message=message,
            fix=fix or self.fix, block=block.name, numbers=dict(numbers),
        )


class RuleRegistry:
    """Rules by code; rejects duplicate or retired codes and duplicate names."""

    def __init__(self) -> None:
        self._rules: dict[str, Rule] = {}

    def add(self, rule: Rule) -> Rule:
        """Register ``rule`` and return it."""
        if not CODE_PATTERN.match(rule.code):
            raise ValueError(f"rule code {rule.code!r} is not MHA followed by three digits")
        if not NAME_PATTERN.match(rule.name):
            raise ValueError(f"rule name {rule.name!r} is not kebab-case")
        if rule.code in RETIRED_CODES:
            raise ValueError(f"rule code {rule.code} is retired and cannot be reused")
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

    def __iter__(self) -> Iterator[Rule]:
        return iter(sorted(self._rules.values(), key=lambda r: r.code))

    def __len__(self) -> int:
        return len(self._rules)

    def codes(self) -> tuple[str, ...]:
        """All registered codes in order."""
        return tuple(r.code for r in self)

    def rule(
        self, *, code: str, name: str, summary: str, why: str, example: str, fix: str,
        severity: Severity, thresholds: tuple[Threshold, ...] = (),
    ) -> Callable[[CheckFn], Rule]:
        """Decorator: declare a rule around its check function and register it."""

        def wrap(check: CheckFn) -> Rule:
            return self.add(Rule(code, name, summary, why, example, fix, severity,
                                 thresholds, check))

        return wrap


REGISTRY = RuleRegistry()
"""The rules mhaudit ships; :mod:`mhaudit.rules.head_dim` fills it."""
