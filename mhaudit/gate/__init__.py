"""Gate: a report and a budget (or a baseline) -> a pass/fail verdict for CI.

Takes a :class:`~mhaudit.data.Report` and a budget table; returns a
:class:`~mhaudit.data.GateOutcome` with one result per metric (:func:`check` audits and
gates in one call).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mhaudit.gate.check import check

# Entry points load on first use, so that importing a stage (for its data or its
# profiles) does not import torch.
_LAZY = {
    "check": "mhaudit.gate.check",
}

__all__ = ["check"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
