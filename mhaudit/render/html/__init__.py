"""The HTML page: one self-contained report with inline SVG charts."""

from __future__ import annotations

from mhaudit.render.html.page import (
    html_table,
    page,
    render_html,
    render_html_many,
    report_section,
)

__all__ = ["html_table", "page", "render_html", "render_html_many", "report_section"]
