"""Hardening, third pass: each failure class of the sweep, by the mechanism that closes it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hostile_helpers import (
    assert_one_error,
    invoke,
    model_file,
    run_process,
    snapshot,
    subprocess_env,
)

from mhaudit.errors import MAX_LINE_CHARS

STRANGE = "a\ud800\u202eb\x07"
"""A module name with a lone surrogate, a right-to-left override and a BEL."""

NAMED = f'''
class Named(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module({STRANGE!r}, Attention())

    def forward(self, x):
        return getattr(self, {STRANGE!r})(x)


def build_model():
    return Named()
'''


@pytest.mark.parametrize("fmt", ["table", "json", "markdown", "github", "sarif", "html"])
def test_any_string_renders_in_every_format(tmp_path: Path, fmt: str) -> None:
    model = model_file(tmp_path, NAMED)
    out = tmp_path / f"out.{fmt}"
    run = invoke("report", model, "--format", fmt, "--output", out)
    assert run.code == 0, run.stderr
    text = out.read_text(encoding="utf-8")  # valid UTF-8: no lone surrogate got through
    assert "\u202e" not in text and "\x07" not in text
    if fmt in ("json", "sarif"):
        json.loads(text)


def test_echoed_user_text_is_cut_with_a_marker(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "x" * 200_000}), encoding="utf-8")
    run = invoke("report", config)
    assert_one_error(run, 2 if run.code == 2 else 3, "model_type")
    assert all(len(line) <= MAX_LINE_CHARS for line in run.stderr.splitlines())
    assert "…" in run.stderr


def test_a_usage_error_echoing_a_huge_value_stays_one_short_line(model: Path) -> None:
    run = invoke("report", model, "--seq-len", "9" * 5000)
    assert_one_error(run, 2)
    assert all(len(line) <= MAX_LINE_CHARS for line in run.stderr.splitlines())


@pytest.mark.parametrize("args", [
    ("--seq-len", str(2**40)), ("--batch-size", str(2**40)),
    ("--batch-size", "65536", "--seq-len", "65536"), ("--input-shape", f"1x{2**40}x32"),
])
def test_sizes_torch_would_overflow_on_are_refused_naming_the_limit(
        model: Path, args: tuple[str, ...]) -> None:
    assert_one_error(invoke("report", model, *args), 2, "a traced input takes")


def test_a_huge_length_after_the_first_is_still_costed(model: Path) -> None:
    run = invoke("report", model, "--seq-len", f"128,{2**40}", "--format", "json")
    assert run.code == 0, run.stderr


def test_timing_a_layout_beyond_the_traced_limit_is_refused() -> None:
    run = invoke("whatif", "--d-model", "32", "--heads", "4", "--seq-len", str(2**40),
                 "--device", "cpu")
    assert_one_error(run, 2, "16,777,216")


@pytest.mark.parametrize(("toml", "key"), [
    ('tool = "mhaudit"\n', "tool must be a table"),
    ("[tool]\nmhaudit = 1\n", "tool.mhaudit must be a table"),
    ("[tool.mhaudit]\nselect = 5\n", "tool.mhaudit.select"),
    ('[tool.mhaudit]\ntargets = "model.py"\n', "tool.mhaudit.targets"),
    ("[tool.mhaudit]\nbudget = 3\n", "tool.mhaudit.budget"),
    ("[tool.mhaudit]\nseverity = [1]\n", "tool.mhaudit.severity"),
])
@pytest.mark.parametrize("command", ["report", "check"])
def test_a_pyproject_value_of_the_wrong_type_names_its_key(
        tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch, toml: str, key: str,
        command: str) -> None:
    (tmp_path / "pyproject.toml").write_text(toml, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert_one_error(invoke(command, model), 2, key)


def test_a_fifo_in_github_step_summary_is_refused_not_waited_on(
        tmp_path: Path, model: Path, budget: Path) -> None:
    fifo = tmp_path / "summary"
    os.mkfifo(fifo)
    run = run_process("check", model, "--budget", budget, "--format", "github", timeout=60,
                      env=subprocess_env(GITHUB_STEP_SUMMARY=str(fifo)))
    assert_one_error(run, 2, "GITHUB_STEP_SUMMARY", "FIFO")


def test_the_step_summary_is_appended_to(tmp_path: Path, model: Path, budget: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    run = invoke("check", model, "--budget", budget, "--format", "github")
    assert run.code == 0, run.stderr
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("earlier step\n") and "mhaudit budget" in text


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_outputs_are_all_or_none_when_a_device_fails(
        tmp_path: Path, model: Path, budget: Path) -> None:
    out = tmp_path / "r.json"
    out.write_text("before\n", encoding="utf-8")
    run = invoke("check", model, "--budget", budget, "-f", "json", "-o", out,
                 "--baseline", "/dev/full", "--update-baseline")
    assert_one_error(run, 2, "No space left")
    assert out.read_text(encoding="utf-8") == "before\n"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_step_summary_on_a_full_device_leaves_the_output_untouched(
        tmp_path: Path, model: Path, budget: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "r.txt"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", "/dev/full")
    run = invoke("check", model, "--budget", budget, "--format", "github", "-o", out)
    assert_one_error(run, 2, "No space left")
    assert not out.exists()


@pytest.mark.parametrize("flag", ["--output", "--summary"])
def test_an_output_name_ending_in_a_slash_is_refused(
        tmp_path: Path, model: Path, budget: Path, flag: str) -> None:
    before = snapshot(tmp_path)
    run = invoke("check", model, "--budget", budget, flag, f"{tmp_path / 'new'}/")
    assert_one_error(run, 2, "folder")
    assert snapshot(tmp_path) == before


def test_report_output_ending_in_a_slash_is_refused(tmp_path: Path, model: Path) -> None:
    assert_one_error(invoke("report", model, "-o", f"{tmp_path / 'new'}/"), 2, "folder")
    assert not (tmp_path / "new").exists()


def test_whatif_plot_and_output_are_written_together(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "sweep.png"
    run = invoke("whatif", "--d-model", "32", "--heads", "4", "--plot", plot,
                 "--output", f"{tmp_path / 'missing'}/out.txt")
    assert_one_error(run, 2, "does not exist")
    assert not plot.exists()


DATACLASS_OUT = '''
from dataclasses import dataclass
from typing import NamedTuple


@dataclass
class Out:
    note: str
    hidden: object


class Pair(NamedTuple):
    first: object
    rest: object


class Wrapped(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Attention()

    def forward(self, x):
        return Out("done", Pair(None, {"deep": [self.a(x)]}))


def build_model():
    return Wrapped()
'''


def test_outputs_inside_any_container_are_found(tmp_path: Path) -> None:
    run = invoke("report", model_file(tmp_path, DATACLASS_OUT), "--format", "json")
    assert run.code == 0, run.stderr
    assert len(json.loads(run.stdout)["blocks"]) == 1


IGNORES_SIGTERM = '''
import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
time.sleep(30)


def build_model():
    return Attention()
'''


def test_model_code_cannot_take_sigterm(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    model = model_file(tmp_path, IGNORES_SIGTERM)
    out = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "mhaudit", "report", str(model), "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env())
    time.sleep(4)  # inside the model's import
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err.decode()
    assert not out.exists() and b"Traceback" not in err


HOSTILE_BODIES = {
    "exits": "import sys\nsys.exit(3)\n",
    "os_exit": "import os\n\ndef build_model():\n    os._exit(0)\n",
    "raises_base": "def build_model():\n    raise GeneratorExit\n",
    "bad_repr": ("class E(Exception):\n    def __str__(self):\n        raise ValueError\n\n"
                 "def build_model():\n    raise E()\n"),
    "generator_forward": ("class G(Attention):\n    def forward(self, x):\n        yield x\n\n"
                          "def build_model():\n    return G()\n"),
    "dataclass": DATACLASS_OUT,
    "strange_name": NAMED,
    "debugger_loop": ("import sys\n\ndef build_model():\n    frames = []\n"
                      "    sys.settrace(lambda f, e, a: frames.append(f))\n"
                      "    while True:\n        pass\n"),
    "finaliser_raises": ("class Bad:\n    def __del__(self):\n        raise RuntimeError('x')\n\n"
                         "def build_model():\n    Bad()\n    return Attention()\n"),
    "thread_raises": ("import threading\n\ndef boom():\n    raise RuntimeError('x')\n\n"
                      "def build_model():\n    threading.Thread(target=boom).start()\n"
                      "    return Attention()\n"),
}
"""Hostile model files, each run as a real process: whatever its exit, no traceback."""


@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
def test_no_hostile_fixture_puts_a_traceback_on_stderr(tmp_path: Path, name: str) -> None:
    model = model_file(tmp_path, HOSTILE_BODIES[name])
    run = run_process("report", model, "--timeout", "3", timeout=90)
    assert run.code in (0, 1, 2, 3), run.stderr
    assert "Traceback" not in run.stderr and "Exception ignored" not in run.stderr, run.stderr
    assert all(len(line) <= MAX_LINE_CHARS for line in run.stderr.splitlines()), run.stderr
