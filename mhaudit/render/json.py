"""JSON renderer."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from mhaudit.data import Report
from mhaudit.render.escape import text_data
from mhaudit.render.style import PLAIN, RenderOptions


def render_json(report: Report, options: RenderOptions = PLAIN) -> str:
    """The report as indented JSON (schema version 1)."""
    return json.dumps(text_data(report.to_dict()), indent=2, sort_keys=False) + "\n"


def render_json_many(reports: Sequence[Report], options: RenderOptions = PLAIN) -> str:
    """Several reports as one JSON list."""
    return json.dumps(text_data([r.to_dict() for r in reports]), indent=2) + "\n"


def json_listing(text: str | None, count: int, failed: Mapping[int, Mapping[str, Any]]) -> str:
    """The JSON list for ``count`` targets in their order, each failed one as its entry
    (``{source, error, exit_code}``) in its place.

    ``text`` is what the renderer gave for the others: one object for one report, a list
    for more, None for none.
    """
    data = json.loads(text) if text is not None else []
    made = iter(data if isinstance(data, list) else [data])
    items = [dict(failed[i]) if i in failed else next(made) for i in range(count)]
    return json.dumps(text_data(items), indent=2) + "\n"
