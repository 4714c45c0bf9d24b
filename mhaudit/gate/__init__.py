"""Gate: a report and a budget (or a baseline) -> a pass/fail verdict for CI.

Takes a :class:`~mhaudit.data.Report` and a budget table; returns a
:class:`~mhaudit.data.GateOutcome` with one result per metric (:func:`check` audits and
gates in one call).
"""

from __future__ import annotations

from mhaudit.gate.check import check

__all__ = ["check"]
