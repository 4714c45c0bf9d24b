"""Safe text output: atomic replace of regular files, never of links, devices or folders.

A path is resolved once, before the model runs (so a model that calls ``os.chdir`` cannot
move it): ``-`` and ``/dev/stdout`` mean the report stream, a symlink is followed to its
target (which is then written atomically), a character device such as ``/dev/null`` is
written in place, and a FIFO, socket, block device or folder is refused. Regular files and
new paths get a temporary file in the same folder, renamed over the target once complete;
the temporary file is removed on any exception, KeyboardInterrupt and SIGTERM (which the
CLI turns into an exception) included.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mhaudit.errors import ConfigError

_STDOUT_NAMES = ("-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")
_STDERR_NAMES = ("/dev/stderr", "/dev/fd/2", "/proc/self/fd/2")


@dataclass(frozen=True)
class OutputPath:
    """Where one output goes, decided before anything runs."""

    path: Path | None
    """The resolved file to write; None for the report stream (stdout)."""
    in_place: bool = False
    """True for a character device: opened and written, never replaced."""
    to_stderr: bool = False
    """True for ``/dev/stderr``."""

    @property
    def is_stdout(self) -> bool:
        """True when the text goes to the report stream."""
        return self.path is None and not self.to_stderr


def _refuse(path: Path, what: str) -> ConfigError:
    return ConfigError(f"refusing to write to {path}: it is {what}",
                       "Name a regular file (or '-' for stdout).")


def resolve_output(path: str | Path | None) -> OutputPath:
    """Decide how to write ``path``; raise ConfigError for targets that must not be replaced."""
    if path is None:
        return OutputPath(None)
    text = os.fspath(path)
    if text in _STDOUT_NAMES:
        return OutputPath(None)
    if text in _STDERR_NAMES:
        return OutputPath(None, to_stderr=True)
    if not text:
        raise ConfigError("the output path is empty", "Name a file, or '-' for stdout.")
    if text.endswith(("/", os.sep)) or os.path.basename(text) in (".", ".."):
        if os.path.isdir(text):
            raise _refuse(Path(text), "a directory")
        raise ConfigError(f"cannot write {text}: the name ends in a folder separator, so it "
                          "names a folder, not a file", "Name a file inside the folder, "
                          "e.g. reports/report.json.")
    resolved = Path(os.path.realpath(os.path.abspath(text)))
    try:
        info = os.stat(resolved)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise ConfigError(f"cannot write {text}: {exc.strerror or exc}",
                          "Check the path and its permissions.") from exc
    if info is not None:
        mode = info.st_mode
        if stat.S_ISDIR(mode):
            raise _refuse(Path(text), "a directory")
        if stat.S_ISCHR(mode):
            return OutputPath(resolved, in_place=True)
        if stat.S_ISFIFO(mode):
            raise _refuse(Path(text), "a FIFO")
        if stat.S_ISBLK(mode):
            raise _refuse(Path(text), "a block device")
        if stat.S_ISSOCK(mode):
            raise _refuse(Path(text), "a socket")
        if not stat.S_ISREG(mode):
            raise _refuse(Path(text), "not a regular file")
    if not resolved.parent.is_dir():
        raise ConfigError(f"cannot write {text}: folder {resolved.parent} does not exist",
                          "Create the folder first, or name a file in an existing one.")
    return OutputPath(resolved)


def _mode_for(path: Path) -> int:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _failed(path: Path, exc: OSError) -> ConfigError:
    return ConfigError(f"cannot write {path}: {exc.strerror or exc}",
                       "Check free space and that the folder is writable.")


def _encoded(text: str | bytes) -> bytes:
    """UTF-8 bytes; a character no UTF-8 holds (a lone surrogate) as its escape."""
    return text.encode("utf-8", "backslashreplace") if isinstance(text, str) else text


def _stage(path: Path, text: str | bytes) -> str:
    """Write ``text`` (or bytes) to a new temporary file beside ``path``; return its name."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _failed(path, exc) from exc
    try:
        data = _encoded(text)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, _mode_for(path))
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _failed(path, exc) from exc
        raise
    return tmp


def _write_in_place(path: Path, text: str | bytes) -> None:
    try:
        with open(path, "wb") as handle:
            handle.write(_encoded(text))
    except OSError as exc:
        raise _failed(path, exc) from exc


def write_texts_atomic(items: Sequence[tuple[OutputPath, str | bytes]]) -> None:
    """Write every file, or none: all texts (or bytes) are staged, and every character
    device written, before any target is replaced.

    Items for the report stream are skipped (the caller prints them). If a rename fails
    part way, the targets already replaced are put back from hard-link backups.
    """
    files = [(out.path, text) for out, text in items if out.path is not None and not out.in_place]
    staged: list[tuple[Path, str]] = []
    try:
        for path, text in files:
            staged.append((path, _stage(path, text)))
        for out, text in items:  # a device that fails (/dev/full) fails before any rename
            if out.path is not None and out.in_place:
                _write_in_place(out.path, text)
    except BaseException:
        for _, tmp in staged:
            Path(tmp).unlink(missing_ok=True)
        raise
    backups: list[tuple[Path, str | None]] = []
    try:
        for path, tmp in staged:
            backup: str | None = None
            if path.exists():
                backup = f"{tmp}.bak"
                try:
                    os.link(path, backup)
                except OSError:
                    backup = None
            os.replace(tmp, path)
            backups.append((path, backup))
    except BaseException as exc:
        for path, backup in backups:
            if backup is not None:
                with contextlib.suppress(OSError):
                    os.replace(backup, path)
        for _, tmp in staged:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _failed(staged[len(backups)][0], exc) from exc
        raise
    finally:
        for _, backup in backups:
            if backup is not None:
                Path(backup).unlink(missing_ok=True)


def write_text_atomic(path: str | Path | OutputPath, text: str | bytes) -> None:
    """Write ``text`` (or bytes) to a file path safely (see the module docstring)."""
    out = path if isinstance(path, OutputPath) else resolve_output(path)
    if out.path is None:
        raise ConfigError(f"{os.fspath(path) if not isinstance(path, OutputPath) else '-'} is "
                          "a stream, not a file", "Name a file to write.")
    write_texts_atomic([(out, text)])
