"""The data model: frozen dataclasses that every stage takes and returns.

One import point for users (``from mhaudit.data import Report``); the classes live in
one module per stage: ``findings``, ``layout``, ``costs``, ``report``, ``gate`` and
``whatif``; ``schema`` turns them into the JSON report.

Units live in names. ``flops`` always means floating-point operations counted
as 2 per multiply-add (dense work, bias adds excluded unless a field says so);
fields ending in ``_bytes`` are bytes; ``params`` are element counts.
"""

from __future__ import annotations

from mhaudit.data.blocks import (
    AttentionBlock,
    BlockGroup,
    Coverage,
    DeclaredMismatch,
    LeftOutInput,
    ModelInfo,
    Totals,
    UnreadCore,
)
from mhaudit.data.costs import (
    BlockMemory,
    ExpertLayer,
    FlopBreakdown,
    Measurement,
    Roofline,
    ScalingPoint,
    TargetEstimate,
    Timing,
)
from mhaudit.data.findings import Finding, Severity
from mhaudit.data.gate import BudgetLimit, BudgetResult, GateOutcome
from mhaudit.data.layout import SCORE_FORMS, Deviation, Layout, ParamBreakdown, Projection
from mhaudit.data.location import SourceLocation
from mhaudit.data.parallel import CollectiveBytes, DeviceBytes, ParallelCost, ParallelPlan
from mhaudit.data.phases import (
    BlockDecode,
    BlockTraining,
    DecodeCost,
    DecodePoint,
    MemoryBreakdown,
    TimelinePoint,
    TrainingCost,
)
from mhaudit.data.report import Report
from mhaudit.data.tracing import DataDependence, RealForward
from mhaudit.data.verify import Agreement, Unchecked, Verification
from mhaudit.data.whatif import LayoutSpec, WhatIf, WhatIfRow

__all__ = [
    "SCORE_FORMS",
    "Agreement",
    "AttentionBlock",
    "BlockDecode",
    "BlockGroup",
    "BlockMemory",
    "BlockTraining",
    "BudgetLimit",
    "BudgetResult",
    "CollectiveBytes",
    "Coverage",
    "DataDependence",
    "DeclaredMismatch",
    "DecodeCost",
    "DecodePoint",
    "Deviation",
    "DeviceBytes",
    "ExpertLayer",
    "Finding",
    "FlopBreakdown",
    "GateOutcome",
    "Layout",
    "LayoutSpec",
    "LeftOutInput",
    "Measurement",
    "MemoryBreakdown",
    "ModelInfo",
    "ParallelCost",
    "ParallelPlan",
    "ParamBreakdown",
    "Projection",
    "RealForward",
    "Report",
    "Roofline",
    "ScalingPoint",
    "Severity",
    "SourceLocation",
    "TargetEstimate",
    "TimelinePoint",
    "Timing",
    "Totals",
    "TrainingCost",
    "Unchecked",
    "UnreadCore",
    "Verification",
    "WhatIf",
    "WhatIfRow",
]
