"""mhaudit: audit the multi-head attention of PyTorch models.

``mhaudit.audit(model, inputs)`` returns a :class:`~mhaudit.data.Report`;
``mhaudit.check(model, inputs, budget=...)`` gates it against a budget. Both load
torch on first use, so importing the package stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mhaudit.data.schema import TOOL_VERSION as __version__
from mhaudit.lazy import lazy_attributes

if TYPE_CHECKING:
    from mhaudit.api import audit, audit_target
    from mhaudit.gate.check import check
    from mhaudit.options import AuditOptions

_LAZY = {
    "audit": "mhaudit.api",
    "audit_target": "mhaudit.api",
    "AuditOptions": "mhaudit.options",
    "check": "mhaudit.gate.check",
}

__all__ = ["AuditOptions", "__version__", "audit", "audit_target", "check"]


__getattr__ = lazy_attributes(__name__, _LAZY)
