"""Renderers: report to text. They never compute and never import torch."""

from __future__ import annotations

from collections.abc import Callable

from mhaudit.data import Report
from mhaudit.render.json import render_json
from mhaudit.render.markdown import render_markdown
from mhaudit.render.table import render_table

RENDERERS: dict[str, Callable[[Report], str]] = {
    "table": render_table,
    "json": render_json,
    "markdown": render_markdown,
}


def render(report: Report, fmt: str) -> str:
    """Render ``report`` in one of :data:`RENDERERS`."""
    return RENDERERS[fmt](report)
