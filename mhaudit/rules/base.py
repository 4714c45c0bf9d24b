"""The rule object, its declared numbers, and the context a check sees."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from mhaudit.cost.devices import DEFAULT_GPU, GpuProfile, canonical_dtype, dtype_bytes, get_profile
from mhaudit.data import AttentionBlock, Finding, Severity

NUMBER_UNITS: tuple[str, ...] = (
    "count", "elements", "bytes", "bytes/token", "flops", "flops/byte", "bytes/flop",
    "fraction", "ratio",
)
"""Units a rule may declare for a key of its findings' ``numbers``: ``count`` (heads,
parameters, projections), ``elements`` (a dimension or width), ``bytes``, ``bytes/token``,
``flops`` (2 per multiply-add), ``flops/byte``, ``bytes/flop``, ``fraction`` (0 to 1) and
``ratio`` (a multiple, 1 = equal)."""


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
    peers: tuple[tuple[Rule, Mapping[str, float]], ...] = ()
    """The enabled rules with their thresholds: a fix proposes only layouts none of them
    flags. Empty when the check runs for a proposed layout itself (no nested proposals)."""

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


@dataclass(frozen=True)
class Hit:
    """What a check returns when its rule fires on a block."""

    message: str
    """One sentence stating the problem and its cost, numbers worded by :mod:`mhaudit.units`."""
    numbers: Mapping[str, float]
    """The figures behind the message; keys as the rule declares them."""
    fix: str | None = None
    """A fix for this block; None keeps the rule's general fix."""


CheckFn = Callable[[AttentionBlock, RuleContext], "Hit | None"]


@dataclass(frozen=True)
class Threshold:
    """One configurable number of a rule."""

    key: str
    """Key under ``[tool.mhaudit.thresholds.CODE]``."""
    default: float
    """Value when not configured."""
    description: str
    """What the number means."""


@dataclass(frozen=True)
class NumberSpec:
    """One key of a rule's findings' ``numbers``: its unit and meaning."""

    key: str
    """Key in :attr:`mhaudit.data.Finding.numbers`."""
    unit: str
    """One of :data:`NUMBER_UNITS`."""
    meaning: str
    """What the figure is."""
    when: str | None = None
    """When the key is present; None for always."""


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One declared rule, in ruff's template: what it does, why it costs, known problems,
    example, fix, references and since, with its severity, numbers and check."""

    code: str
    """Stable code, e.g. ``MHA005``; never reused."""
    name: str
    """Kebab-case name of the problem, e.g. ``materialized-attention-scores``."""
    summary: str
    """What it does: one sentence saying what the rule flags."""
    why: str
    """Why it costs: compute, memory or kernels the flagged layout loses."""
    known_problems: str
    """Where the rule is blind, approximate, or fires on intended designs."""
    example: str
    """A layout that fires the rule."""
    fix: str
    """What to do instead, in general."""
    references: tuple[str, ...]
    """Sources of the cost facts the rule relies on."""
    since: str
    """The mhaudit version that introduced the rule."""
    severity: Severity
    """Default severity."""
    numbers: tuple[NumberSpec, ...]
    """The keys every finding's ``numbers`` carries, with their units."""
    check: CheckFn = field(compare=False, repr=False)
    """``(block, ctx) -> Hit | None``; ``ctx.thresholds`` holds this rule's values."""
    thresholds: tuple[Threshold, ...] = ()
    """Configurable numbers with their defaults."""

    @property
    def default_thresholds(self) -> Mapping[str, float]:
        """Threshold key to default value."""
        return MappingProxyType({t.key: t.default for t in self.thresholds})

    @property
    def required_numbers(self) -> frozenset[str]:
        """Keys every finding carries."""
        return frozenset(n.key for n in self.numbers if n.when is None)

    @property
    def declared_numbers(self) -> frozenset[str]:
        """Keys a finding may carry."""
        return frozenset(n.key for n in self.numbers)

    def sections(self) -> tuple[tuple[str, str], ...]:
        """The rule's prose in reading order: (heading, text) pairs."""
        return (
            ("What it does", self.summary),
            ("Why it costs", self.why),
            ("Known problems", self.known_problems),
            ("Example", self.example),
            ("Fix", self.fix),
        )

    def finding(self, block: AttentionBlock, hit: Hit) -> Finding:
        """The finding of ``hit`` about ``block`` at the default severity."""
        return Finding(
            code=self.code, name=self.name, severity=self.severity, message=hit.message,
            fix=hit.fix or self.fix, block=block.name, numbers=dict(hit.numbers),
        )
