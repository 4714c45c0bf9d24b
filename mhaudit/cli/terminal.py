"""What the terminal asks for: its width, and whether to colour (NO_COLOR, FORCE_COLOR)."""

from __future__ import annotations

import os
import shutil
from typing import TextIO

MIN_WIDTH = 60


def terminal_width() -> int:
    """Columns of the terminal (``COLUMNS`` wins; 80 when there is none), at least 60."""
    return max(MIN_WIDTH, shutil.get_terminal_size((80, 24)).columns)


def use_color(stream: TextIO) -> bool:
    """Colour when ``FORCE_COLOR`` is set, never when ``NO_COLOR`` is, else on a TTY."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR", "") not in ("", "0"):
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
