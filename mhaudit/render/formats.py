"""Output formats: one object per format with every renderer it has, and their registry."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mhaudit.data import Report, WhatIf
from mhaudit.render.json import json_listing, render_json, render_json_many
from mhaudit.render.style import RenderOptions
from mhaudit.rules.base import Rule


def _lazy(module: str, name: str) -> Any:
    """``module.name``, imported on its first call: a command loads only the format it uses."""
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


class _LazyModule:
    """A module whose functions are :func:`_lazy`."""

    def __init__(self, module: str) -> None:
        self.module = module

    def __getattr__(self, name: str) -> Any:
        return _lazy(self.module, name)


if TYPE_CHECKING:
    from mhaudit.render.gate import checks
    from mhaudit.render.gate.checks import CheckRenderer
    from mhaudit.render.github import render_github, render_github_many
    from mhaudit.render.html import render_html, render_html_many
    from mhaudit.render.markdown import render_markdown, render_markdown_many
    from mhaudit.render.rules import listing as rules_list
    from mhaudit.render.sarif import render_sarif, render_sarif_many
    from mhaudit.render.table import render_table, render_table_many
    from mhaudit.render.whatif import render_whatif_json, render_whatif_table
else:
    checks = _LazyModule("mhaudit.render.gate.checks")
    rules_list = _LazyModule("mhaudit.render.rules.listing")
    render_github, render_github_many = (_lazy("mhaudit.render.github", n) for n in (
        "render_github", "render_github_many"))
    render_html, render_html_many = (_lazy("mhaudit.render.html", n) for n in (
        "render_html", "render_html_many"))
    render_markdown, render_markdown_many = (_lazy("mhaudit.render.markdown", n) for n in (
        "render_markdown", "render_markdown_many"))
    render_sarif, render_sarif_many = (_lazy("mhaudit.render.sarif", n) for n in (
        "render_sarif", "render_sarif_many"))
    render_table, render_table_many = (_lazy("mhaudit.render.table", n) for n in (
        "render_table", "render_table_many"))
    render_whatif_json, render_whatif_table = (_lazy("mhaudit.render.whatif", n) for n in (
        "render_whatif_json", "render_whatif_table"))

ReportRenderer = Callable[[Report, RenderOptions], str]
ManyRenderer = Callable[[Sequence[Report], RenderOptions], str]
WhatIfRenderer = Callable[[WhatIf, RenderOptions], str]
RulesRenderer = Callable[[Sequence[Rule], RenderOptions], str]
RuleRenderer = Callable[[Rule, RenderOptions], str]
ListingRenderer = Callable[[str | None, int, Mapping[int, Mapping[str, Any]]], str]
"""Several targets' output with the failed ones' entries in their places."""


@dataclass(frozen=True)
class OutputFormat:
    """One ``--format`` value: what it is, and its renderer for each kind of result.

    A renderer returns the whole text; the CLI writes it. ``None``: the format does not
    render that result, and the command that makes it does not offer the format.
    """

    name: str
    """The ``--format`` value."""
    suffix: str
    """File name suffix for output in this format (no dot)."""
    machine_readable: bool
    """Read by a program (JSON, SARIF, JUnit) rather than by a person."""
    report: ReportRenderer | None = None
    """``mhaudit report`` on one model."""
    reports: ManyRenderer | None = None
    """``mhaudit report`` on several models: a summary across them first (JSON: a list)."""
    checks: CheckRenderer | None = None
    """``mhaudit check``: each target's gate outcome (and report, where the format shows it)."""
    whatif: WhatIfRenderer | None = None
    """``mhaudit whatif``: one sweep."""
    rules: RulesRenderer | None = None
    """``mhaudit rules``: the rule list."""
    rule: RuleRenderer | None = None
    """``mhaudit rules CODE``: one rule explained."""
    terminal: bool = False
    """Laid out for a terminal: fitted to its width, coloured on a TTY."""
    states_verdict: bool = True
    """The check output shows the verdict to a reader of the CI log; otherwise the CLI
    says it on stderr too."""
    charts: bool = False
    """Draws the what-if sweeps of flagged blocks (the CLI computes them for it)."""
    step_summary: CheckRenderer | None = None
    """A markdown job summary to append to ``GITHUB_STEP_SUMMARY`` after ``check``."""
    listing: ListingRenderer | None = None
    """With several targets, one list in target order in which a target that failed keeps
    its place as ``{source, error, exit_code}``; None: failures are only on stderr."""

    def render_reports(self, reports: Sequence[Report], options: RenderOptions) -> str:
        """One report as :attr:`report` renders it; several as :attr:`reports` does."""
        if self.report is None or self.reports is None:
            raise ValueError(f"format {self.name!r} does not render reports")
        if len(reports) == 1:
            return self.report(reports[0], options)
        return self.reports(reports, options)


FORMATS: dict[str, OutputFormat] = {f.name: f for f in (
    OutputFormat("table", "txt", False, render_table, render_table_many, checks.checks_table,
                 render_whatif_table, rules_list.rules_table, rules_list.rule_text,
                 terminal=True),
    OutputFormat("json", "json", True, render_json, render_json_many, checks.checks_json,
                 render_whatif_json, rules_list.rules_json, rules_list.rule_json,
                 states_verdict=False, listing=json_listing),
    OutputFormat("github", "txt", False, render_github, render_github_many,
                 checks.checks_github, step_summary=checks.checks_markdown),
    OutputFormat("junit", "xml", True, checks=checks.checks_junit, states_verdict=False),
    OutputFormat("markdown", "md", False, render_markdown, render_markdown_many,
                 checks.checks_markdown, rules=rules_list.rules_markdown,
                 rule=rules_list.rule_markdown),
    OutputFormat("sarif", "sarif", True, render_sarif, render_sarif_many, checks.checks_sarif,
                 states_verdict=False),
    OutputFormat("html", "html", False, render_html, render_html_many, checks.checks_html,
                 states_verdict=False, charts=True),
)}
"""Every output format, by name, in the order ``mhaudit check --help`` lists them."""


def formats_with(kind: str) -> tuple[str, ...]:
    """Names of the formats that render ``kind`` (a renderer field: ``report``, ``checks`` ...)."""
    return tuple(name for name, f in FORMATS.items() if getattr(f, kind) is not None)
