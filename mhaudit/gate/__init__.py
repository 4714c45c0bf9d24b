"""Gate: a report and a budget (or a baseline) -> a pass/fail verdict for CI.

Takes a :class:`~mhaudit.data.Report` and a budget table; returns a
:class:`~mhaudit.data.GateOutcome` with one result per metric (:func:`check` audits and
gates in one call).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mhaudit.lazy import lazy_attributes

if TYPE_CHECKING:
    from mhaudit.gate.check import check

# Entry points load on first use, so that importing a stage (for its data or its
# profiles) does not import torch.
_LAZY = {
    "check": "mhaudit.gate.check",
}

__all__ = ["check"]


__getattr__ = lazy_attributes(__name__, _LAZY)
