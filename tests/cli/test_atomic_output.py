"""Output paths: resolved before the model runs, written atomically or refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mhaudit.atomic import resolve_output, write_text_atomic, write_texts_atomic
from mhaudit.errors import ConfigError


def test_streams_and_paths_resolve(tmp_path: Path) -> None:
    assert resolve_output("-").is_stdout
    assert resolve_output("/dev/stdout").is_stdout
    assert resolve_output("/dev/stderr").to_stderr
    out = resolve_output(tmp_path / "new.json")
    assert out.path == (tmp_path / "new.json").resolve() and not out.in_place


def test_relative_paths_are_fixed_at_resolution(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = resolve_output("report.txt")
    os.chdir("/")
    write_text_atomic(out, "ok\n")
    assert (tmp_path / "report.txt").read_text(encoding="utf-8") == "ok\n"


def test_existing_mode_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "r.txt"
    path.write_text("old", encoding="utf-8")
    path.chmod(0o640)
    write_text_atomic(path, "new")
    assert path.read_text(encoding="utf-8") == "new"
    assert path.stat().st_mode & 0o777 == 0o640


def test_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "target.txt")
    write_text_atomic(link, "x")
    assert link.is_symlink() and (tmp_path / "target.txt").read_text(encoding="utf-8") == "x"


@pytest.mark.parametrize("make", ["folder", "fifo", "missing_parent"])
def test_refused_targets(tmp_path: Path, make: str) -> None:
    path = tmp_path / "x"
    if make == "folder":
        path.mkdir()
    elif make == "fifo":
        os.mkfifo(path)
    else:
        path = tmp_path / "nope" / "x"
    with pytest.raises(ConfigError):
        write_text_atomic(path, "x")


def test_all_or_nothing_when_a_second_file_cannot_be_staged(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("old a", encoding="utf-8")
    calls = []
    real_fdopen = os.fdopen

    def failing_fdopen(fd: int, *args: object, **kwargs: object) -> object:
        calls.append(fd)
        if len(calls) == 2:
            os.close(fd)
            raise OSError(28, "No space left on device")
        return real_fdopen(fd, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(os, "fdopen", failing_fdopen)
    with pytest.raises(ConfigError, match="No space left"):
        write_texts_atomic([(resolve_output(first), "new a"), (resolve_output(second), "b")])
    assert first.read_text(encoding="utf-8") == "old a"
    assert not second.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
