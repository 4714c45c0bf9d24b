"""Renderers: report to text. They never compute and never import torch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from json import dumps

from mhaudit.data import Report
from mhaudit.render.github import render_github, render_github_many
from mhaudit.render.html import render_html, render_html_many
from mhaudit.render.json import render_json
from mhaudit.render.markdown import render_markdown
from mhaudit.render.sarif import render_sarif, render_sarif_many
from mhaudit.render.style import PLAIN, RenderOptions
from mhaudit.render.summary import summary_table
from mhaudit.render.table import render_table

Renderer = Callable[[Report, RenderOptions], str]
ManyRenderer = Callable[[Sequence[Report], RenderOptions], str]

RENDERERS: dict[str, Renderer] = {
    "table": render_table,
    "json": render_json,
    "markdown": render_markdown,
    "github": render_github,
    "sarif": render_sarif,
    "html": render_html,
}


def _json_many(reports: Sequence[Report], options: RenderOptions) -> str:
    return dumps([r.to_dict() for r in reports], indent=2) + "\n"


def _table_many(reports: Sequence[Report], options: RenderOptions) -> str:
    parts = [f"mhaudit: summary of {len(reports)} models", "",
             summary_table(reports), ""]
    parts += [render_table(r, options) for r in reports]
    return "\n".join(parts)


def _markdown_many(reports: Sequence[Report], options: RenderOptions) -> str:
    parts = [f"## mhaudit: {len(reports)} models", "", summary_table(reports, "github"), ""]
    parts += [render_markdown(r, options) for r in reports]
    return "\n".join(parts)


MANY: dict[str, ManyRenderer] = {
    "table": _table_many,
    "json": _json_many,
    "markdown": _markdown_many,
    "github": render_github_many,
    "sarif": render_sarif_many,
    "html": render_html_many,
}
"""Every format for several reports: a summary across models first (JSON: a list)."""


def render(report: Report, fmt: str, options: RenderOptions = PLAIN) -> str:
    """Render ``report`` in one of :data:`RENDERERS`."""
    return RENDERERS[fmt](report, options)


def render_reports(reports: Sequence[Report], fmt: str, options: RenderOptions = PLAIN) -> str:
    """One report as :func:`render` does; several with a summary across models."""
    if len(reports) == 1:
        return render(reports[0], fmt, options)
    return MANY[fmt](reports, options)
