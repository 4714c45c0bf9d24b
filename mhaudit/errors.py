"""Exception hierarchy: one base, one subclass per stage; install hints for their tips."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from urllib.parse import unquote, urlparse


class MhauditError(Exception):
    """Base of every error mhaudit raises on purpose.

    ``tip`` is one practical sentence telling the user what to change.
    ``exit_code`` is the documented process exit code for this kind of error.
    ``log`` holds what torch, transformers and warnings said while the failing stage ran
    (the CLI shows it with ``--verbose``).
    ``detail`` holds further lines (each tracer's own error) that only ``--verbose`` shows.
    """

    exit_code = 2

    def __init__(self, message: str, tip: str = "", detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.tip = tip
        self.log = ""
        self.detail = detail

    def __str__(self) -> str:
        return self.one_line()

    def one_line(self, limit: int | None = None) -> str:
        """The message and the tip on one line, as the CLI prints it; with ``limit``, the
        message is shortened (never the start of the tip) so the line fits in it."""
        message = " ".join(without_reprs(self.message).split())
        tip = " ".join(without_reprs(self.tip).split())
        if limit is not None:
            tip = shorten(tip, limit // 3)
            message = shorten(message, max(limit - len(tip) - 2, 20))
        return sentences(message, tip)


MAX_LINE_CHARS = 300
"""Longest error line the CLI prints: echoed user text beyond it is cut with a marker."""


_WORD = 40
"""A word longer than this is shortened first when a line is over its limit."""


def shorten(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """``text`` cut to ``limit`` characters by leaving out its middle, marked ``…``: the
    start says what failed, the end (a library's own reason) why."""
    if len(text) <= limit:
        return text
    words = text.split(" ")  # long words first (paths, echoed values): the sentence stays
    text = " ".join(w if len(w) <= _WORD else w[:_WORD // 2] + "…" + w[-(_WORD // 2 - 1):]
                    for w in words)
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


_ADDRESS_REPR = re.compile(r"<([\w.]+)([^<>]*?) at 0x[0-9a-fA-F]+>")
"""A default ``repr``: ``<pkg.mod.Thing object at 0x7f...>``, ``<function f at 0x...>``."""

_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{5,}\b")
"""A memory address left anywhere else."""

_DUMP = re.compile(r"\b([A-Z]\w*)\(")
"""The start of a constructor-style dump: ``Linear(in_features=8, ...)``, a dataclass."""

DUMP_CHARS = 24
"""A dump whose arguments are longer than this is shown as ``Name(…)``."""


def without_reprs(text: str) -> str:
    """``text`` with object reprs replaced by their class names: ``<Thing>`` for a default
    repr, ``Name(…)`` for a constructor-style dump longer than :data:`DUMP_CHARS` (an
    unclosed one ends there), and no memory address left anywhere."""
    def named(match: re.Match[str]) -> str:
        rest = match.group(2).replace(" object", "")
        return f"<{match.group(1).rsplit('.', 1)[-1]}{rest}>"

    for _ in range(4):  # nested reprs (a bound method of an object) from the inside out
        text, found = _ADDRESS_REPR.subn(named, text)
        if not found:
            break
    return _ADDRESS.sub("an address", _without_dumps(text))


def _without_dumps(text: str) -> str:
    out, at = [], 0
    for match in _DUMP.finditer(text):
        if match.start() < at:
            continue  # inside a dump already left out
        depth, end = 1, match.end()
        while end < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        if end - match.end() - 1 <= DUMP_CHARS and not depth:
            continue
        out.append(text[at:match.start()] + match.group(1) + "(…)")
        at = end
    return "".join(out) + text[at:]


def end_sentence(text: str) -> str:
    """``text`` ending in exactly one stop; a ``?`` or ``!`` is kept, also inside closing
    quotes or brackets (click's ``(Did you mean '--gpu'?)``)."""
    line = text.strip().rstrip(". \t\n")
    if not line:
        return ""
    return line if line.rstrip("'\"`)]").endswith(("?", "!")) else f"{line}."


def sentences(*parts: str) -> str:
    """Each non-empty part as a sentence, joined by one space: never ``?.`` or ``..``."""
    return " ".join(s for s in (end_sentence(p) for p in parts) if s)


def safe_text(value: object, convert: Callable[[object], str] = str) -> str:
    """``convert(value)`` (``str`` or ``repr``) as a plain ``str``; never raises.

    Model code can hand over any object: one whose ``__str__`` or ``__repr__`` raises, or
    returns a ``str`` subclass with methods of its own. Those give ``<unprintable T>``.
    """
    try:
        text = convert(value)
        return str.__add__("", text) if isinstance(text, str) else "<unprintable>"
    except BaseException:  # any failure of user code while formatting
        return f"<unprintable {type_name(value)}>"


def type_name(value: object) -> str:
    """The class name of ``value`` (of ``value`` itself for a class); never raises."""
    try:
        cls = value if isinstance(value, type) else type(value)
        name = type.__dict__["__name__"].__get__(cls)
        return str.__add__("", name)
    except BaseException:  # a class whose name cannot be read
        return "object"


def _summary(exc: BaseException, limit: int) -> str:
    lines = [ln.strip() for ln in without_reprs(safe_text(exc)).splitlines() if ln.strip()]
    text = " ".join(lines[:3]) if lines else ""
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    name = type_name(exc)
    return f"{name}: {text}" if text else name


def first_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` on one line, then each explicit cause (``raise ... from``) after it.

    The message keeps its first three lines joined (validation errors often put the
    reason on the second line); the whole is cut to ``limit`` characters per exception.
    """
    try:
        return _chain(exc, limit)
    except BaseException:  # an exception class that breaks attribute access
        return type_name(exc)


def _chain(exc: BaseException, limit: int) -> str:
    parts = [_summary(exc, limit)]
    seen = {id(exc)}
    cause = exc.__cause__
    while isinstance(cause, BaseException) and id(cause) not in seen and len(parts) < 4:
        seen.add(id(cause))
        text = _summary(cause, limit)
        if not any(text in part or safe_text(cause).strip() in part for part in parts):
            parts.append(text)
        cause = cause.__cause__
    return " (caused by ".join(parts) + ")" * (len(parts) - 1)


class ConfigError(MhauditError):
    """Bad flag, option, budget file or rule configuration (exit 2)."""

    exit_code = 2


class LoadError(MhauditError):
    """The model file or factory could not be imported, called or run (exit 3)."""

    exit_code = 3


class TraceError(MhauditError):
    """No tracer could turn the model into an fx graph, or the forward did not run (exit 3)."""

    exit_code = 3


class DependencyError(MhauditError):
    """A package the audit needs (torch, transformers) is missing or broken here (exit 3).

    It is the environment's fault, not the model's and not mhaudit's.
    """

    exit_code = 3


class OutputClosed(MhauditError):
    """The reader of stdout went away (``| head -1``): exit quietly with 141 = 128 + SIGPIPE,
    what a shell reports for a writer that a closed pipe stopped."""

    exit_code = 141


class InternalError(MhauditError):
    """A bug in mhaudit itself (exit 4): never 1, which CI reads as over budget."""

    exit_code = 4


class Interrupted(MhauditError):
    """Ctrl-C (exit 130 = 128 + SIGINT, the shell convention)."""

    exit_code = 130


INTERNAL_ERROR_EXIT = InternalError.exit_code
"""Exit code of a bug in mhaudit itself: never 1, which CI reads as over budget."""

INTERRUPTED_EXIT = Interrupted.exit_code
"""Exit code after Ctrl-C (128 + SIGINT), the shell convention."""


# Install hints: the tip for a missing optional dependency names the source the user has.

DIST = "mhaudit"


@dataclass(frozen=True)
class InstallSource:
    """How the running mhaudit was installed."""

    local_dir: str | None
    """The directory pip installed it from (a clone, editable or not); None for a package
    from an index (or a copy pip did not record)."""
    editable: bool
    """Whether that install is editable (``pip install -e``)."""


def read_source(direct_url: str | None) -> InstallSource:
    """The source that a distribution's ``direct_url.json`` text records (PEP 610): a local
    directory (``dir_info``, editable or not) or, for anything else, an index."""
    try:
        data = json.loads(direct_url) if direct_url else {}
    except ValueError:
        data = {}
    info = data.get("dir_info") if isinstance(data, dict) else None
    url = data.get("url", "") if isinstance(data, dict) else ""
    if not isinstance(info, dict) or not isinstance(url, str) or not url.startswith("file:"):
        return InstallSource(None, False)
    return InstallSource(unquote(urlparse(url).path), bool(info.get("editable")))


def direct_url_text() -> str | None:
    """The installed ``mhaudit`` distribution's ``direct_url.json``; None when pip wrote
    none (an index install) or mhaudit is not installed (a source tree on ``PYTHONPATH``).
    A clone's ``mhaudit.egg-info`` (on the path when run from its root) records no source,
    so the first distribution that records one wins."""
    for dist in metadata.distributions(name=DIST):
        text = dist.read_text("direct_url.json")
        if text:
            return text
    return None


def installed_source() -> InstallSource:
    """The source of the installed ``mhaudit`` distribution."""
    return read_source(direct_url_text())


def install_hint(extra: str, source: InstallSource | None = None) -> str:
    """The pip command that adds ``extra`` from where mhaudit came from: the clone's root
    for a local install, the package index otherwise."""
    found = installed_source() if source is None else source
    if found.local_dir is None:
        return f"pip install 'mhaudit[{extra}]' (from PyPI)"
    flag = "-e " if found.editable else ""
    return f"pip install {flag}'.[{extra}]' (from the clone's root, {found.local_dir})"
