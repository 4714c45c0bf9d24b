"""Escaping of text that comes from the model (module names, class names, paths) per format.

A module name is whatever the model file says: it may hold newlines, escape sequences,
``::error::`` (a GitHub workflow command at the start of a line), markdown or HTML.
Each renderer passes such text through the function for its format; every one of them
starts from :func:`clean`, the one sanitiser: lone surrogates (not Unicode text, so no
encoder takes them), bidirectional controls (``U+202E`` reverses what a reader sees) and
other control characters are shown as escapes, and each line is cut to ``MAX_ECHO_CHARS``
with a marker. ``encodable`` makes any output fit the stream's encoding with ASCII
spellings of the symbols mhaudit uses.
"""

from __future__ import annotations

import re
from typing import Any

MAX_ECHO_CHARS = 1000
"""Longest line of user text a renderer echoes; a longer one is cut with a marker."""

_UNSAFE = "\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069\ud800-\udfff"
"""Bidirectional controls and surrogates: escaped in every format (JSON's data included)."""
_CONTROL = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029{_UNSAFE}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\x1b"}
_MARKDOWN = re.compile(r"([\\`*\[\]<>|~&]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
"""Markdown and HTML specials; an underscore inside a word cannot start emphasis (GFM)."""
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _show(match: re.Match[str]) -> str:
    char = match.group(0)
    return _NAMED.get(char, f"\\x{ord(char):02x}" if ord(char) < 256 else f"\\u{ord(char):04x}")


_HIGH = f"\\x7f-\\x9f\\u2028\\u2029{_UNSAFE}"
_CONTROL_BUT_NEWLINE = re.compile(f"[\\x00-\\x09\\x0b-\\x1f{_HIGH}]")
_CONTROL_BUT_LINES = re.compile(f"[\\x00-\\x09\\x0b\\x0c\\x0e-\\x1f{_HIGH}]")


def cut(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """Each line of ``text`` at most ``limit`` characters, a longer one ending in a marker
    that says how much was left out."""
    text = str.__add__("", text) if isinstance(text, str) else str(text)
    if len(text) <= limit:
        return text
    return "\n".join(line if len(line) <= limit else
                     f"{line[:limit - 30]}…[{len(line) - limit + 30:,} more characters]"
                     for line in text.split("\n"))


def clean(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """The one sanitiser: :func:`cut`, then every control, bidirectional control and lone
    surrogate shown as an escape (``\\x1b``, ``\\u202e``, ``\\ud800``); one line."""
    return _CONTROL.sub(_show, cut(text, limit))


_SURROGATE = re.compile("[\ud800-\udfff]")
_BIDI = re.compile("[\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069]")


def text_data(value: Any) -> Any:
    """``value`` (nested dicts, lists, strings) with every string valid Unicode text and free
    of bidirectional controls, for machine-read formats (JSON, SARIF): each such code point
    is written as its escape (``\\ud800``); keys too."""
    if isinstance(value, str):
        return _BIDI.sub(_show, _SURROGATE.sub(_show, value))
    if isinstance(value, dict):
        return {text_data(k): text_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [text_data(v) for v in value]
    return value


def plain(text: str) -> str:
    """Control characters shown as ``\\n``, ``\\x1b``…, and a leading ``::`` defused.

    For terminal tables: the text stays on one line, cannot move the cursor or colour
    the terminal, and cannot begin a GitHub workflow command.
    """
    shown = clean(text)
    return "\\:" + shown[1:] if shown.startswith("::") else shown


def defuse_lines(text: str) -> str:
    """Whole rendered text with no line that begins (after spaces) with ``::``."""
    return "\n".join(
        line.replace("::", ":\u200b:", 1) if line.lstrip().startswith("::") else line
        for line in text.split("\n")
    )


def markdown(text: str) -> str:
    """:func:`plain`, with markdown and HTML specials backslash-escaped."""
    return _MARKDOWN.sub(r"\\\1", plain(text))


def markdown_code(text: str) -> str:
    """Text for inside backticks: control characters shown, backticks replaced."""
    return plain(text).replace("`", "'")


def html(text: str) -> str:
    """HTML-escaped (``&``, ``<``, ``>``, quotes) with control characters shown; newlines
    stay (they only break lines, in ``<pre>`` and nowhere else)."""
    shown = _CONTROL_BUT_NEWLINE.sub(_show, cut(text))
    return (shown.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&#x27;"))


_MARKDOWN_NO_HTML = re.compile(r"([\\`*\[\]|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def summary(text: str) -> str:
    """For a GitHub job summary: HTML-escaped, then markdown specials backslash-escaped."""
    return _MARKDOWN_NO_HTML.sub(r"\\\1", html(text))


def xml_text(text: str) -> str:
    """Characters XML 1.0 cannot hold removed (ElementTree escapes ``<``, ``&`` itself)."""
    return _XML_INVALID.sub("", _BIDI.sub(_show, _SURROGATE.sub(_show, cut(text))))


def github_data(text: str) -> str:
    """The message of a GitHub workflow command: ``%``, CR and LF encoded, every other
    control character shown as ``\\x1b``… (a log must not colour or move the cursor)."""
    encoded = cut(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return _CONTROL_BUT_LINES.sub(_show, encoded)


def github_property(text: str) -> str:
    """A property value of a workflow command: also ``:`` and ``,`` encoded."""
    return github_data(text).replace(":", "%3A").replace(",", "%2C")


ASCII_SPELLINGS = {
    "Δ": "delta", "×": "x", "·": "*", "²": "^2", "ᵀ": "^T", "—": "-", "–": "-", "…": "...",
    "µ": "u", "≤": "<=", "≥": ">=", "≠": "!=", "≈": "~", "→": "->", "✅": "[ok]",
    "❌": "[fail]", "⚠️": "[warn]", "⚠": "[warn]", "\u200b": "", "’": "'", "“": '"', "”": '"',
}
"""ASCII stand-ins for the symbols mhaudit prints, for streams that cannot encode them."""


def encodable(text: str, encoding: str) -> str:
    """``text`` as-is when ``encoding`` holds it, else with ASCII spellings, else ``?``."""
    try:
        text.encode(encoding)
        return text
    except (UnicodeEncodeError, LookupError):
        pass
    for symbol, spelling in ASCII_SPELLINGS.items():
        try:
            symbol.encode(encoding)
        except (UnicodeEncodeError, LookupError):
            text = text.replace(symbol, spelling)
    try:
        return text.encode(encoding, errors="replace").decode(encoding)
    except LookupError:
        return text.encode("ascii", errors="replace").decode("ascii")
