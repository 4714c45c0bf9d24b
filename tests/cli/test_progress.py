"""Progress by stage on stderr: the stages of each target with [i/N], on a terminal only."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import click.testing
import pytest
from click.testing import CliRunner

from mhaudit import audit_target
from mhaudit.cli import main
from mhaudit.cli.progress import Status
from mhaudit.progress import STAGES, listening, stage

ROOT = Path(__file__).resolve().parents[2]
TEXTBOOK = str(ROOT / "examples" / "textbook_mha.py")
SEEN = ("loading", "building", "tracing", "detecting", "costing")


def _run(*args: str) -> Any:
    env = {"COLUMNS": "100", "NO_COLOR": "1", "FORCE_COLOR": ""}
    return CliRunner().invoke(main, list(args), env=env)


@pytest.fixture
def tty(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's streams claim to be a terminal."""
    monkeypatch.setattr(click.testing._NamedTextIOWrapper, "isatty", lambda self: True,
                        raising=False)


@pytest.mark.usefixtures("tty")
def test_a_terminal_sees_every_stage_of_each_target() -> None:
    done = _run("report", TEXTBOOK, TEXTBOOK + ":make_large", "--train")
    assert done.exit_code == 0, done.output
    err = done.stderr
    for index in ("[1/2]", "[2/2]"):
        target = TEXTBOOK if index == "[1/2]" else TEXTBOOK + ":make_large"
        for name in (*SEEN, "phases"):
            assert f"mhaudit {index} {target}: {name} " in err, (index, name)
    first, second = err.index("[1/2]"), err.index("[2/2]")
    assert first < second and "[1/2]" not in err[second:]
    assert err.endswith("\r\x1b[K")  # the status line is cleared before the report


@pytest.mark.usefixtures("tty")
def test_one_target_has_no_count_and_whatif_shows_its_stages() -> None:
    done = _run("report", TEXTBOOK)
    assert done.exit_code == 0
    assert f"mhaudit: {TEXTBOOK}: tracing " in done.stderr and "[1/1]" not in done.stderr
    spun = _run("whatif", TEXTBOOK)
    assert spun.exit_code == 0, spun.output
    assert f"mhaudit: {TEXTBOOK}: detecting " in spun.stderr


def test_a_pipe_sees_no_progress() -> None:
    done = _run("report", TEXTBOOK, TEXTBOOK + ":make_large", "--train")
    assert done.exit_code == 0
    assert done.stderr == ""
    assert not any(name in done.stderr for name in STAGES)


def test_the_library_names_its_stages_in_order_and_is_silent_by_default() -> None:
    seen: list[str] = []
    audit_target(TEXTBOOK, on_stage=seen.append, decode=True)
    assert seen == [*SEEN, "phases"]
    outer: list[str] = []
    with listening(outer.append):
        with listening(None):
            stage("tracing")  # silenced inside
        stage("costing")
    stage("phases")  # no listener at all: nothing to call
    assert outer == ["costing"]


def test_the_status_line_shows_the_stage_at_once() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    with Status("mhaudit [2/3] m.py", stream=stream, interval=10) as status:
        status.stage("tracing")
        assert stream.getvalue().startswith("\r\x1b[Kmhaudit [2/3] m.py: tracing ")
    log = io.StringIO()
    with Status("mhaudit: m.py", stream=log) as status:
        status.stage("tracing")
    assert log.getvalue() == ""
