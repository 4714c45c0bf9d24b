"""What-if stage: sweep the head layout of one block and cost every alternative."""

from __future__ import annotations

from mhaudit.data.whatif import LayoutSpec, WhatIf, WhatIfRow
from mhaudit.whatif.spec import check_spec
from mhaudit.whatif.sweep import layout_for, measure_block_ms, plot_whatif, spec_from_block, whatif

__all__ = [
    "LayoutSpec",
    "WhatIf",
    "WhatIfRow",
    "check_spec",
    "layout_for",
    "measure_block_ms",
    "plot_whatif",
    "spec_from_block",
    "whatif",
]
