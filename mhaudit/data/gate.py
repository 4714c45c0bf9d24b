"""The CI gate's budget lines, results and verdict."""

from __future__ import annotations

from dataclasses import dataclass

from mhaudit.data.findings import Finding, Severity


@dataclass(frozen=True)
class BudgetLimit:
    """One budget line: a metric, its limit and how a breach counts."""

    metric: str
    """Report metric, e.g. ``params_total`` or ``kv_cache_bytes_per_token``."""
    limit: float
    """Largest allowed value (absolute)."""
    severity: Severity = Severity.ERROR
    """ERROR fails the gate; WARNING is reported only."""


@dataclass(frozen=True)
class BudgetResult:
    """The outcome of checking one metric against its budget or baseline."""

    metric: str
    actual: float | None
    """The measured value; None when the report has no such figure."""
    limit: float | None
    """The absolute limit, or the baseline value times the allowed growth."""
    baseline: float | None
    """The baseline value, when a baseline was given."""
    severity: Severity
    passed: bool
    bound: str = "budget"
    """Which bound ``limit`` is: ``"budget"`` (absolute) or ``"baseline"`` (allowed growth)."""
    increase_percent: float | None = None
    """The growth over the baseline allowed, in percent, when ``bound`` is ``"baseline"``."""

    @property
    def delta_percent(self) -> float | None:
        """Growth over the baseline in percent, when both exist."""
        if self.actual is None or not self.baseline:
            return None
        return 100.0 * (self.actual - self.baseline) / self.baseline


@dataclass(frozen=True)
class Suggestion:
    """The smallest change found that makes the failing per-GPU limits pass."""

    change: str
    """What to change, as the user writes it: ``--checkpointing selective``,
    ``--batch-size 2`` or ``parallel = "tp=4,sp,fsdp=2"`` in the budget."""
    passes: bool
    """True when the gate, rerun with the change applied, passed every per-GPU limit."""
    peak_bytes: int | None = None
    """The per-GPU peak with the change applied (the largest over the failing phases)."""


@dataclass(frozen=True)
class GateOutcome:
    """The CI gate's verdict: budget results plus the flags that failed it."""

    results: tuple[BudgetResult, ...]
    failing_findings: tuple[Finding, ...]
    fail_on: str
    """``"error"``, ``"warning"`` or ``"never"``."""
    unread_cores: int = 0
    """Ops that can be an attention core and are in no block (``coverage.unread_cores``)."""
    declared_mismatch: int = 0
    """Module attributes whose declared layout the detected blocks contradict
    (``coverage.declared_mismatch``)."""
    suggestion: Suggestion | None = None
    """With a failing per-GPU limit: the smallest change that passes, and whether it did."""

    @property
    def passed(self) -> bool:
        """True when no error-severity budget failed and no flag failed the gate."""
        budget_ok = all(r.passed or r.severity is not Severity.ERROR for r in self.results)
        return budget_ok and not self.failing_findings
