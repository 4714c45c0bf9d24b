"""``mhaudit rules``: the rule list and one rule's explanation, from each rule's entry."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tabulate import tabulate

from mhaudit.render.rule_text import render_rule_text
from mhaudit.render.style import PLAIN, RenderOptions

RuleEntry = Mapping[str, Any]
"""A rule as plain data: at least ``code``, ``name``, ``severity`` and ``summary``."""

_HEADERS = ("code", "name", "severity", "summary")


def _rows(entries: Sequence[RuleEntry]) -> list[tuple[Any, ...]]:
    return [tuple(entry[key] for key in _HEADERS) for entry in entries]


def rules_table(entries: Sequence[RuleEntry], options: RenderOptions = PLAIN) -> str:
    """One line per rule; the summary column wraps to fit ``options.width``."""
    width = options.width or 80
    fixed = (max((len(e["code"]) for e in entries), default=0)
             + max((len(e["name"]) for e in entries), default=0) + 14)
    return tabulate(_rows(entries), headers=_HEADERS,
                    maxcolwidths=[None, None, None, max(24, width - fixed)]) + "\n"


def rules_markdown(entries: Sequence[RuleEntry], options: RenderOptions = PLAIN) -> str:
    """The rule list as a GitHub markdown table."""
    return tabulate(_rows(entries), headers=_HEADERS, tablefmt="github") + "\n"


def rules_json(entries: Sequence[RuleEntry], options: RenderOptions = PLAIN) -> str:
    """Every rule entry as one JSON list."""
    return json.dumps(list(entries), indent=2) + "\n"


def rule_text(entry: RuleEntry, page: str, options: RenderOptions = PLAIN) -> str:
    """One rule's page (markdown) set for the terminal."""
    return render_rule_text(page, options)


def rule_markdown(entry: RuleEntry, page: str, options: RenderOptions = PLAIN) -> str:
    """One rule's page as it is: markdown."""
    return page


def rule_json(entry: RuleEntry, page: str, options: RenderOptions = PLAIN) -> str:
    """One rule's entry as JSON."""
    return json.dumps(dict(entry), indent=2) + "\n"
