"""A rule page (markdown) for the terminal: headings set off, paragraphs wrapped, no markup."""

from __future__ import annotations

import re
import textwrap

from mhaudit.render.style import PLAIN, RenderOptions, paint

_INLINE = re.compile(r"\*\*(.+?)\*\*|`([^`]+)`")


def _plain(text: str) -> str:
    return _INLINE.sub(lambda m: m.group(1) or m.group(2), text)


def render_rule_text(markdown: str, options: RenderOptions = PLAIN) -> str:
    """``markdown`` (a page from :func:`mhaudit.rules.docs.rule_page`) as terminal text."""
    width = min(options.width or 88, 100)
    out: list[str] = []
    in_code = False
    table: list[list[str]] = []

    def flush_table() -> None:
        if not table:
            return
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        for n, row in enumerate(table):
            out.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
                       .rstrip())
            if n == 0:
                out.append("  " + "  ".join("-" * w for w in widths))
        table.clear()

    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            out.append("    " + line if line else "")
            continue
        if line.startswith("|"):
            cells = [_plain(c.strip()) for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= {"-", " ", ":"} for c in cells):
                table.append(cells)
            continue
        flush_table()
        if line.startswith("# "):
            title = _plain(line[2:])
            out += [paint(title, None, options), "=" * len(title)]
        elif line.startswith("## "):
            out.append(paint(_plain(line[3:]), None, options))
        elif not line.strip():
            out.append("")
        else:
            out += textwrap.wrap(_plain(line), width=width, break_on_hyphens=False) or [""]
    flush_table()
    return "\n".join(out).rstrip() + "\n"
