"""Renderers: results to text, one output-format object each; they never compute or import torch."""

from __future__ import annotations

from collections.abc import Sequence

from mhaudit.data import Report
from mhaudit.render.formats import FORMATS, OutputFormat, formats_with
from mhaudit.render.style import PLAIN, RenderOptions

RENDERERS: tuple[str, ...] = formats_with("report")
"""The formats of a report (``mhaudit report --format``)."""


def render(report: Report, fmt: str, options: RenderOptions = PLAIN) -> str:
    """Render ``report`` in the format named ``fmt`` (one of :data:`RENDERERS`)."""
    return FORMATS[fmt].render_reports([report], options)


def render_reports(reports: Sequence[Report], fmt: str, options: RenderOptions = PLAIN) -> str:
    """One report as :func:`render` does; several with a summary across models."""
    return FORMATS[fmt].render_reports(reports, options)


__all__ = ["FORMATS", "PLAIN", "RENDERERS", "OutputFormat", "RenderOptions", "formats_with",
           "render", "render_reports"]
