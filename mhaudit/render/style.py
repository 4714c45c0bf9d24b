"""How a renderer lays its text out: terminal width, extra columns, colour, what-if sweeps."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

from mhaudit.data import Severity, WhatIf


@dataclass(frozen=True)
class RenderOptions:
    """Layout choices the CLI makes for a renderer; renderers never read the terminal."""

    width: int | None = None
    """Columns to fit prose and the block table into; None for no limit."""
    wide: bool = False
    """Show every column of the block table and do not wrap."""
    color: bool = False
    """ANSI colours by severity (the CLI sets it on a TTY, honouring NO_COLOR/FORCE_COLOR)."""
    sweeps: tuple[WhatIf, ...] = ()
    """What-if sweeps of the blocks that flags name (the HTML charts)."""


PLAIN = RenderOptions()

_SGR = {Severity.ERROR: "1;31", Severity.WARNING: "33", Severity.INFO: "36"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def paint(text: str, severity: Severity | None, options: RenderOptions) -> str:
    """``text`` in its severity's colour (bold for None) when colour is on."""
    if not options.color:
        return text
    code = _SGR.get(severity, "1") if severity is not None else "1"
    return f"\x1b[{code}m{text}\x1b[0m"


def visible_len(text: str) -> int:
    """Length without ANSI colour codes."""
    return len(_ANSI.sub("", text))


def wrap(line: str, options: RenderOptions, hang: int = 2) -> list[str]:
    """``line`` wrapped to ``options.width``, continuation lines indented ``hang`` more;
    a word (a block name) longer than a line is kept whole."""
    width = None if options.wide else options.width
    if width is None or len(line) <= width:
        return [line]
    lead = len(line) - len(line.lstrip(" "))
    return textwrap.wrap(
        line.strip(), width=width, initial_indent=" " * lead,
        subsequent_indent=" " * (lead + hang), break_on_hyphens=False,
        break_long_words=False,
    ) or [line]
