"""JSON renderer."""

from __future__ import annotations

import json
from collections.abc import Sequence

from mhaudit.data import Report
from mhaudit.render.style import PLAIN, RenderOptions


def render_json(report: Report, options: RenderOptions = PLAIN) -> str:
    """The report as indented JSON (schema version 1)."""
    return json.dumps(report.to_dict(), indent=2, sort_keys=False) + "\n"


def render_json_many(reports: Sequence[Report], options: RenderOptions = PLAIN) -> str:
    """Several reports as one JSON list."""
    return json.dumps([r.to_dict() for r in reports], indent=2) + "\n"
