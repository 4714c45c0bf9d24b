"""Bounded in time: lingering threads, a disarmed timer, FIFOs, devices, huge files, huge n."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hostile_helpers import assert_one_error, invoke, model_file, run_process

GOOD_BODY = "def build_model():\n    return Attention()\n"


@pytest.mark.slow
def test_a_thread_that_never_ends_does_not_hold_the_exit(tmp_path: Path) -> None:
    model = model_file(tmp_path, "import threading, time\n\ndef build_model():\n"
                       "    threading.Thread(target=time.sleep, args=(3600,)).start()\n"
                       "    return Attention()\n")
    run = run_process("report", model, "--format", "json", timeout=120)
    assert run.code == 0, run.stderr
    assert run.stdout.lstrip().startswith("{")


@pytest.mark.slow
def test_a_lingering_thread_keeps_the_gate_verdict(tmp_path: Path) -> None:
    model = model_file(tmp_path, "import threading, time\n\ndef build_model():\n"
                       "    threading.Thread(target=time.sleep, args=(3600,)).start()\n"
                       "    return Attention()\n")
    tight = tmp_path / "tight.toml"
    tight.write_text('[budget]\nmax_params = "1k"\n', encoding="utf-8")
    run = run_process("check", model, "--budget", tight, timeout=120)
    assert run.code == 1, run.stderr


@pytest.mark.slow
@pytest.mark.parametrize("disarm", [
    "signal.setitimer(signal.ITIMER_REAL, 0)",
    "signal.signal(signal.SIGALRM, signal.SIG_IGN)",
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})",
])
def test_a_model_cannot_disarm_the_timeout(tmp_path: Path, disarm: str) -> None:
    model = model_file(tmp_path, "import signal, time\n\ndef build_model():\n"
                       f"    {disarm}\n    time.sleep(3600)\n")
    start = time.monotonic()
    run = run_process("report", model, "--timeout", "1", timeout=120)
    assert_one_error(run, 3, "timed out after 1 s", "build_model()")
    assert time.monotonic() - start < 100


@pytest.mark.slow
def test_atexit_hook_of_the_model_changes_nothing(tmp_path: Path) -> None:
    model = model_file(tmp_path, "import atexit, sys\natexit.register(lambda: sys.exit(0))\n\n"
                       + GOOD_BODY)
    tight = tmp_path / "tight.toml"
    tight.write_text('[budget]\nmax_params = "1k"\n', encoding="utf-8")
    run = run_process("check", model, "--budget", tight, timeout=120)
    assert run.code == 1
    assert "Traceback" not in run.stderr


def _fifo(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


def test_budget_fifo_is_refused(tmp_path: Path, model: Path) -> None:
    assert_one_error(invoke("check", model, "--budget", _fifo(tmp_path, "b.toml")), 2, "FIFO")


def test_baseline_fifo_is_refused(tmp_path: Path, model: Path, budget: Path) -> None:
    run = invoke("check", model, "--budget", budget, "--baseline", _fifo(tmp_path, "bl.json"))
    assert_one_error(run, 2, "FIFO")


def test_model_file_fifo_is_refused(tmp_path: Path) -> None:
    assert_one_error(invoke("report", _fifo(tmp_path, "model.py")), 2, "FIFO")


def test_config_fifo_is_refused(tmp_path: Path) -> None:
    assert_one_error(invoke("report", _fifo(tmp_path, "config.json")), 2, "FIFO")


@pytest.mark.parametrize("flag", ["--budget", "--baseline"])
def test_dev_zero_is_refused(model: Path, budget: Path, flag: str) -> None:
    args = ["--budget", "/dev/zero"] if flag == "--budget" else [
        "--budget", budget, "--baseline", "/dev/zero"]
    assert_one_error(invoke("check", model, *args), 2, "character device")


def test_dev_zero_as_a_model_is_refused() -> None:
    assert_one_error(invoke("report", "/dev/zero"), 2, "character device")


def test_huge_budget_file_is_refused(tmp_path: Path, model: Path) -> None:
    huge = tmp_path / "huge.toml"
    with open(huge, "wb") as handle:
        handle.truncate(65 * 2**20)  # sparse: nothing written
    assert_one_error(invoke("check", model, "--budget", huge), 2, "limit")


def test_huge_baseline_file_is_refused(tmp_path: Path, model: Path, budget: Path) -> None:
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as handle:
        handle.truncate(65 * 2**20)
    assert_one_error(invoke("check", model, "--budget", budget, "--baseline", huge), 2, "limit")


def test_fifo_named_pyproject_is_not_read(tmp_path: Path, model: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _fifo(tmp_path, "pyproject.toml")
    monkeypatch.chdir(tmp_path)
    run = invoke("report", model)
    assert run.code == 0, run.stderr


def test_whatif_at_the_largest_length_is_quick() -> None:
    start = time.monotonic()
    run = invoke("whatif", "--d-model", "4096", "--heads", "32", "--seq-len",
                 str(2**40), "--format", "json")
    assert run.code == 0, run.stderr
    assert time.monotonic() - start < 30


def test_report_of_a_causal_block_at_a_large_length_is_quick(tmp_path: Path) -> None:
    model = model_file(tmp_path, "import torch.nn.functional as F\n\n"
                       "class Causal(Attention):\n    def forward(self, x):\n"
                       "        b, n, d = x.shape\n"
                       "        q = self.q(x).view(b, n, self.h, self.d_k).transpose(1, 2)\n"
                       "        k = self.k(x).view(b, n, self.h, self.d_k).transpose(1, 2)\n"
                       "        v = self.v(x).view(b, n, self.h, self.d_k).transpose(1, 2)\n"
                       "        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
                       "        return self.o(out.transpose(1, 2).reshape(b, n, d))\n\n"
                       "def build_model():\n    return Causal()\n")
    start = time.monotonic()
    run = invoke("report", model, "--seq-len", "128,1048576,1073741824", "--format", "json")
    assert run.code == 0, run.stderr
    assert time.monotonic() - start < 60


def test_the_watchdog_fires_when_the_timer_is_disarmed() -> None:
    import signal
    import threading

    from mhaudit.contain.contain import contained, set_hard_stop, time_limit

    fired: list[str] = []
    done = threading.Event()
    set_hard_stop(lambda message: (fired.append(message), done.set()))
    try:
        with time_limit(0.2), contained("build_model()", "model.py"):
            signal.setitimer(signal.ITIMER_REAL, 0)  # what a hostile model does
            done.wait(10)
    finally:
        set_hard_stop(None)
    assert fired == ["model.py: timed out after 0.2 s in build_model()"]


def test_no_watchdog_without_a_hard_stop() -> None:
    import threading

    from mhaudit.contain.contain import time_limit

    before = threading.active_count()
    with time_limit(5):
        assert threading.active_count() == before  # the library starts no thread
