"""Output that cannot be corrupted or do damage: stdout, encodings, links, devices, signals."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
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

NOISY = """
import os
import sys
import threading
import time


def chatter():
    for _ in range(2000):
        print("thread noise")
        time.sleep(0.001)


class Noisy(Attention):
    def forward(self, x):
        print("print noise")
        os.write(1, b"fd noise\\n")
        return super().forward(x)


def build_model():
    print("build noise")
    os.write(1, b"fd build noise\\n")
    threading.Thread(target=chatter, daemon=True).start()
    return Noisy()
"""


@pytest.mark.slow
def test_json_on_stdout_survives_prints_fd_writes_and_threads(tmp_path: Path) -> None:
    model = model_file(tmp_path, NOISY)
    run = run_process("report", model, "--format", "json", timeout=120)
    assert run.code == 0, run.stderr
    data = json.loads(run.stdout)  # nothing but the report on fd 1
    assert data["totals"]["attention_params"] == 4_224  # 4·32² + 4·32
    assert "fd build noise" in run.stderr and "print noise" in run.stderr


@pytest.mark.slow
def test_non_utf8_stdout_falls_back_to_ascii(tmp_path: Path) -> None:
    model = model_file(tmp_path, "def build_model():\n    return Attention()\n")
    env = subprocess_env(PYTHONIOENCODING="cp1252")
    run = run_process("report", model, "--wide", env=env, timeout=120)
    assert run.code == 0, run.stderr
    assert "delta" in run.stdout  # the Δ column header, which cp1252 cannot encode
    assert "Traceback" not in run.stderr


def test_output_onto_a_symlink_writes_its_target(tmp_path: Path) -> None:
    model = model_file(tmp_path, "def build_model():\n    return Attention()\n")
    target = tmp_path / "real.json"
    target.write_text("old", encoding="utf-8")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    run = invoke("report", model, "-f", "json", "--output", link)
    assert run.code == 0, run.stderr
    assert link.is_symlink() and link.resolve() == target
    assert json.loads(target.read_text(encoding="utf-8"))["schema_version"] == 1


@pytest.mark.skipif(not hasattr(os, "mknod") or os.geteuid() != 0,
                    reason="making a character device needs root")
def test_output_onto_a_character_device_writes_it_in_place(tmp_path: Path) -> None:
    model = model_file(tmp_path, "def build_model():\n    return Attention()\n")
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # the /dev/null device
    run = invoke("report", model, "--output", null)
    assert run.code == 0, run.stderr
    assert stat.S_ISCHR(null.lstat().st_mode)  # still the device, never replaced
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_output_onto_a_fifo_is_refused(tmp_path: Path) -> None:
    model = model_file(tmp_path, "def build_model():\n    return Attention()\n")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    before = snapshot(tmp_path)
    assert_one_error(invoke("report", model, "--output", fifo), 2, "FIFO")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert snapshot(tmp_path) == before


def test_output_onto_a_directory_is_refused_in_one_line(tmp_path: Path) -> None:
    model = model_file(tmp_path, "def build_model():\n    return Attention()\n")
    folder = tmp_path / "out"
    folder.mkdir()
    assert_one_error(invoke("report", model, "--output", folder), 2, "directory")
    assert folder.is_dir() and list(folder.iterdir()) == []


def test_dash_means_stdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = model_file(tmp_path, "def build_model():\n    return Attention()\n")
    monkeypatch.chdir(tmp_path)
    run = invoke("report", model, "-f", "json", "--output", "-")
    assert run.code == 0, run.stderr
    assert json.loads(run.stdout)["schema_version"] == 1
    assert not (tmp_path / "-").exists()


def test_dev_stdout_is_the_report_stream_and_never_replaced(tmp_path: Path) -> None:
    model = model_file(tmp_path, "def build_model():\n    return Attention()\n")
    node = Path("/dev/stdout")
    was_link = node.is_symlink()
    run = invoke("report", model, "-f", "json", "--output", "/dev/stdout")
    assert run.code == 0, run.stderr
    assert json.loads(run.stdout)["schema_version"] == 1
    assert node.is_symlink() == was_link  # the link itself is untouched


def test_full_disk_on_output_is_one_line(tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    model = model_file(tmp_path, "def build_model():\n    return Attention()\n")
    assert_one_error(invoke("report", model, "--output", "/dev/full"), 2, "No space left")


def test_model_calling_chdir_does_not_move_a_relative_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    model = model_file(tmp_path, f"import os\n\ndef build_model():\n"
                                 f"    os.chdir({str(elsewhere)!r})\n    return Attention()\n")
    monkeypatch.chdir(tmp_path)
    run = invoke("report", model, "-f", "json", "--output", "report.json")
    assert run.code == 0, run.stderr
    assert (tmp_path / "report.json").is_file()
    assert not (elsewhere / "report.json").exists()
    assert Path.cwd() == tmp_path


def test_check_writes_baseline_and_output_together_or_neither(tmp_path: Path) -> None:
    model = model_file(tmp_path, "def build_model():\n    return Attention()\n")
    budget = tmp_path / "budget.toml"
    budget.write_text('[budget]\nmax_params = "1M"\n', encoding="utf-8")
    output = tmp_path / "report.json"
    output.write_text("previous", encoding="utf-8")
    missing = tmp_path / "no_such_folder" / "baseline.json"
    run = invoke("check", model, "--budget", budget, "-f", "json", "--output", output,
                 "--baseline", missing, "--update-baseline")
    assert_one_error(run, 2, "no_such_folder")
    assert output.read_text(encoding="utf-8") == "previous"


@pytest.mark.slow
def test_temporary_file_is_removed_on_sigterm(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import os, signal, sys
        from pathlib import Path
        from mhaudit.atomic import write_text_atomic
        from mhaudit.cli.guard import terminate_as_exception
        from mhaudit.contain.contain import Terminated

        real_fsync = os.fsync
        def fsync_then_terminate(fd):
            real_fsync(fd)
            os.kill(os.getpid(), signal.SIGTERM)  # arrives while the temp file exists
        os.fsync = fsync_then_terminate
        folder = Path({str(tmp_path)!r})
        try:
            with terminate_as_exception():
                write_text_atomic(folder / "out.txt", "x" * 100)
        except Terminated:
            print(sorted(p.name for p in folder.iterdir()))
            sys.exit(143)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60,
                          env=subprocess_env(), cwd=tmp_path, check=False)
    assert done.returncode == 143, done.stderr.decode()
    assert done.stdout.decode().strip() == "[]"  # no temp file, no half-written output
