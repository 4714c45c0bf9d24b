"""Coded findings raised by rules, and their severities."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Severity(str, enum.Enum):
    """How serious a finding is, in increasing order."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        """0 for info, 1 for warning, 2 for error."""
        return ("info", "warning", "error").index(self.value)


@dataclass(frozen=True)
class Finding:
    """One coded flag raised by a rule."""

    code: str
    """Stable rule code, e.g. ``MHA005``."""
    name: str
    """Kebab-case rule name, e.g. ``materialized-attention-scores``."""
    severity: Severity
    """Severity after configuration overrides."""
    message: str
    """One sentence stating the problem and its cost in numbers."""
    fix: str
    """One sentence saying what to change."""
    block: str | None = None
    """Qualified name of the block the finding is about; ``None`` for the model."""
    numbers: dict[str, float] = field(default_factory=dict)
    """The figures behind the message, for machines."""
