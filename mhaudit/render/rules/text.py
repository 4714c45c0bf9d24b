"""The rules as text: the list (table, markdown, JSON) and one rule's page for the terminal."""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

from mhaudit.render.style import PLAIN, RenderOptions, paint
from mhaudit.rules.base import Rule
from mhaudit.rules.config import config_example

_INLINE = re.compile(r"`([^`]+)`")
LIST_HEADERS = ("code", "name", "severity", "since", "summary")


def _plain(text: str) -> str:
    """``text`` without the inline-code marks rule fields use."""
    return _INLINE.sub(lambda m: m.group(1), text)


def rule_dict(rule: Rule) -> dict[str, Any]:
    """Every declared field of ``rule`` but its check, for ``--format json``."""
    return {
        "code": rule.code, "name": rule.name, "severity": rule.severity.value,
        "since": rule.since, "summary": rule.summary, "why": rule.why,
        "known_problems": rule.known_problems, "example": rule.example, "fix": rule.fix,
        "references": list(rule.references),
        "numbers": {n.key: {"unit": n.unit, "meaning": n.meaning, "when": n.when}
                    for n in rule.numbers},
        "thresholds": {t.key: {"default": t.default, "description": t.description}
                       for t in rule.thresholds},
    }


def render_rule_list(rules: Sequence[Rule], fmt: str = "table", width: int = 88) -> str:
    """``rules`` as a table for people (``table``; a record per rule when the summaries do
    not fit ``width`` on one line), GitHub markdown or JSON."""
    if fmt == "json":
        return json.dumps([rule_dict(r) for r in rules], indent=2) + "\n"
    rows = [(r.code, r.name, r.severity.value, r.since, r.summary) for r in rules]
    if fmt == "markdown":
        return tabulate(rows, headers=LIST_HEADERS, tablefmt="github", disable_numparse=True) + "\n"
    # tabulate pads headers by 2 and puts 2 spaces between columns
    fixed = sum(max(len(LIST_HEADERS[i]) + 2, *(len(row[i]) for row in rows)) + 2
                for i in range(4))
    if fixed + max(len(row[4]) for row in rows) <= width:
        return tabulate(rows, headers=LIST_HEADERS, disable_numparse=True) + "\n"
    return "\n".join(_rule_record(row, width) for row in rows) + "\n"


def _rule_record(row: Sequence[str], width: int) -> str:
    """One rule on a narrow terminal: code, name, severity and version on a line (severity
    and version start the summary when the line would be too long), the summary wrapped
    under it."""
    code, name, severity, since, summary = row
    title = f"{code}  {name}  {severity}  since {since}"
    if len(title) > width:
        title, summary = f"{code}  {name}", f"{severity}, since {since}: {summary}"
    body = textwrap.wrap(summary, width=width, initial_indent="    ",
                         subsequent_indent="    ", break_on_hyphens=False)
    return "\n".join([title, *body])


TALLEST_ROW = 3
"""Lines a table row may wrap to; a taller one turns the table into one record per row."""


def _table(rows: Sequence[Sequence[str]], width: int) -> list[str]:
    """An indented table, the first row its header, the last column wrapped to ``width``;
    one record per row when a row would wrap to more than :data:`TALLEST_ROW` lines or the
    table would overflow ``width``."""
    # tabulate pads each header by 2 and puts 2 spaces between columns; 2 more indent it
    fixed = sum(max(len(rows[0][i]) + 2, *(len(row[i]) for row in rows[1:])) + 2
                for i in range(len(rows[0]) - 1)) + 2
    room = width - fixed
    wrapped = [textwrap.wrap(row[-1], width=max(1, room), break_on_hyphens=False)
               for row in rows[1:]]
    if room < 16 or any(len(lines) > TALLEST_ROW for lines in wrapped):
        return _records(rows, width)
    text = tabulate(rows[1:], headers=rows[0], maxcolwidths=[None] * (len(rows[0]) - 1) + [room],
                    disable_numparse=True)
    return ["  " + line.rstrip() for line in text.splitlines()]


def _records(rows: Sequence[Sequence[str]], width: int) -> list[str]:
    """Each row as a record: its first field and the labelled short ones on one line, the
    last field wrapped under them."""
    header, out = rows[0], []
    for row in rows[1:]:
        labelled = "  ".join(f"{name}: {value}" for name, value in
                             zip(header[1:-1], row[1:-1], strict=True))
        head = f"  {row[0]}  {labelled}" if len(row[0]) + len(labelled) + 4 <= width else (
            f"  {row[0]}")
        out.append(head)
        if head == f"  {row[0]}" and labelled:
            out += textwrap.wrap(labelled, width=width, initial_indent="      ",
                                 subsequent_indent="      ", break_on_hyphens=False)
        out += textwrap.wrap(row[-1], width=width, initial_indent="      ",
                             subsequent_indent="      ", break_on_hyphens=False)
    return out


def _numbers(rule: Rule, width: int) -> list[str]:
    rows = [("key", "unit", "meaning")]
    rows += [(n.key, n.unit, n.meaning + (f" (only when {n.when})" if n.when else ""))
             for n in rule.numbers]
    return _table(rows, width)


def _configuration(rule: Rule, width: int) -> list[str]:
    lines: list[str] = []
    if rule.thresholds:
        rows = [("threshold", "default", "meaning")]
        rows += [(t.key, f"{t.default:g}", t.description) for t in rule.thresholds]
        lines += [*_table(rows, width), ""]
    else:
        lines += ["This rule has no thresholds.", ""]
    return lines + ["    " + line if line else "" for line in config_example(rule).splitlines()]


def render_rule_text(rule: Rule, options: RenderOptions = PLAIN) -> str:
    """One rule's page for the terminal: headings set off, paragraphs wrapped, no markup."""
    width = min(options.width or 88, 100)
    title = f"{rule.code}: {rule.name}"
    out = [paint(title, None, options), "=" * len(title), "",
           f"Default severity: {rule.severity.value} · Since: {rule.since}", ""]

    def section(heading: str, body: list[str]) -> None:
        out.extend([paint(heading, None, options), "", *body, ""])

    for heading, text in rule.sections():
        section(heading, textwrap.wrap(_plain(text), width=width, break_on_hyphens=False))
    section("Numbers", ["Each finding's numbers carries these keys.", "", *_numbers(rule, width)])
    section("Configuration", _configuration(rule, width))
    refs = [line for ref in rule.references
            for line in textwrap.wrap(ref, width=width, initial_indent="- ",
                                      subsequent_indent="  ", break_on_hyphens=False)]
    section("References", refs)
    return "\n".join(out).rstrip() + "\n"
