"""Input files read safely: regular files only, bounded in size, UTF-8, JSON of bounded depth.

A budget, baseline, pyproject.toml, config.json or model file named on the command line can
be a FIFO (a read blocks forever), a device such as ``/dev/zero`` (a read never ends), a
folder, a huge file, or bytes that are not UTF-8. Each is refused with one error naming
the file, before anything reads it; the file is opened without blocking and checked again
once open, so it cannot be swapped for a FIFO in between.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from mhaudit.errors import ConfigError, MhauditError, first_line

MAX_INPUT_BYTES = 64 * 2**20
"""Largest input file read (64 MiB): far above any config, budget, baseline or model file."""

_KINDS = (
    (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _checked(info: os.stat_result, path: Path, what: str, error: type[MhauditError],
             limit: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{what} {path} is {_kind(info.st_mode)}, not a regular file",
                    "Name a regular file.")
    if info.st_size > limit:
        raise error(f"{what} {path} is {info.st_size:,} bytes, over the {limit:,}-byte limit "
                    "for input files", "Name the right file; inputs are small text files.")


def check_input_file(path: str | Path, what: str, *, error: type[MhauditError] = ConfigError,
                     limit: int = MAX_INPUT_BYTES) -> None:
    """Raise ``error`` unless ``path`` is an existing regular file of at most ``limit`` bytes."""
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist", "Check the path.") from None
    except (OSError, ValueError) as exc:
        raise error(f"cannot read {what} {path}: {first_line(exc)}",
                    "Check the path and its permissions.") from None
    _checked(info, path, what, error, limit)


def read_input_bytes(path: str | Path, what: str, *, error: type[MhauditError] = ConfigError,
                     limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a regular input file (see :func:`check_input_file`), read without blocking."""
    path = Path(path)
    check_input_file(path, what, error=error, limit=limit)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}",
                    "Check the path and its permissions.") from None
    try:
        _checked(os.fstat(fd), path, what, error, limit)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}",
                    "Check the file.") from None
    finally:
        os.close(fd)
    if size > limit:
        raise error(f"{what} {path} grew over the {limit:,}-byte limit while it was read",
                    "Name a file that is not being written.")
    return b"".join(chunks)


def read_input_text(path: str | Path, what: str, *, error: type[MhauditError] = ConfigError,
                    limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of a regular input file; other bytes are ``error`` with the offset."""
    data = read_input_bytes(path, what, error=error, limit=limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text (byte {exc.start})",
                    "Save it as UTF-8.") from None


def parse_json(text: str, what: str, *, error: type[MhauditError] = ConfigError,
               **options: Any) -> Any:
    """``json.loads`` where nesting too deep for the parser is ``error``, not RecursionError."""
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise error(f"{what} nests too deeply to read", "Check the file; JSON written by a "
                    "tool nests a few levels.") from None


def check_toml_depth(text: str, path: str | Path) -> None:
    """Raise ConfigError when TOML ``text`` nests too deeply for the parser to read.

    Other TOML errors are left to the reader that reports them with their line.
    """
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        tomllib.loads(text)
    except RecursionError:
        raise ConfigError(f"{path} nests too deeply to read", "Check the file.") from None
    except tomllib.TOMLDecodeError:
        return
