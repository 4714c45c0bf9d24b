"""Model code that exits, interrupts, raises, hangs or nests too deep: exit 3, one line."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hostile_helpers import (
    assert_one_error,
    invoke,
    model_file,
    run_process,
    snapshot,
    subprocess_env,
)

import mhaudit
from mhaudit.errors import LoadError, MhauditError, TraceError


@pytest.fixture
def budget(tmp_path: Path) -> Path:
    path = tmp_path / "budget.toml"
    path.write_text('[budget]\nmax_params = "1k"\n', encoding="utf-8")  # the model has 4,224
    return path


def test_sys_exit_in_build_model_fails_the_gate(tmp_path: Path, budget: Path) -> None:
    model = model_file(tmp_path, "import sys\n\ndef build_model():\n    sys.exit(0)\n")
    before = snapshot(tmp_path)
    run = invoke("check", model, "--budget", budget)
    assert_one_error(run, 3, "model.py", "build_model()", "sys.exit(0)")
    assert run.stdout == ""
    assert snapshot(tmp_path) == before


def test_sys_exit_at_import_fails_the_gate(tmp_path: Path, budget: Path) -> None:
    model = model_file(tmp_path, "import sys\nsys.exit(0)  # a script parsing its arguments\n")
    assert_one_error(invoke("check", model, "--budget", budget), 3, "importing model.py",
                     "sys.exit(0)")


def test_sys_exit_in_forward_is_a_trace_error(tmp_path: Path) -> None:
    model = model_file(tmp_path, "import sys\n\nclass Quits(Attention):\n"
                       "    def forward(self, x):\n        sys.exit(2)\n\n"
                       "def build_model():\n    return Quits()\n")
    assert_one_error(invoke("report", model), 3, "forward()", "sys.exit(2)")


def test_library_audit_target_turns_sys_exit_into_load_error(tmp_path: Path) -> None:
    model = model_file(tmp_path, "import sys\n\ndef build_model():\n    sys.exit('bye')\n")
    with pytest.raises(LoadError, match=r"build_model\(\) called sys.exit\('bye'\)"):
        mhaudit.audit_target(str(model))


def test_keyboard_interrupt_raised_by_the_model_is_a_load_error(tmp_path: Path) -> None:
    model = model_file(tmp_path, "def build_model():\n    raise KeyboardInterrupt\n")
    assert_one_error(invoke("report", model), 3, "raised KeyboardInterrupt")


def _signal_during_build(tmp_path: Path, signum: int, before: str = ""
                         ) -> tuple[int, bytes, bytes]:
    marker = tmp_path / "started"
    model = model_file(tmp_path, "import signal, time\nfrom pathlib import Path\n\n"
                       "def build_model():\n" + before +
                       f"    Path({str(marker)!r}).write_text('x')\n"
                       "    time.sleep(60)\n    return Attention()\n")
    proc = subprocess.Popen([sys.executable, "-m", "mhaudit", "report", str(model)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=subprocess_env())
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert b"Traceback" not in err and len(err.decode().splitlines()) <= 2, err.decode()
    return proc.returncode, out, err


@pytest.mark.slow
def test_ctrl_c_exits_130(tmp_path: Path) -> None:
    code, out, err = _signal_during_build(tmp_path, signal.SIGINT)
    assert code == 130, err.decode()
    assert out == b""


@pytest.mark.slow
def test_ctrl_c_exits_130_even_when_the_model_installs_its_own_handler(tmp_path: Path) -> None:
    code, out, err = _signal_during_build(
        tmp_path, signal.SIGINT, "    signal.signal(signal.SIGINT, lambda *a: None)\n")
    assert code == 130, err.decode()  # the model's handler would swallow Ctrl-C
    assert out == b""


@pytest.mark.slow
def test_sigterm_ends_the_run_with_143_not_a_model_error(tmp_path: Path) -> None:
    code, _, err = _signal_during_build(tmp_path, signal.SIGTERM)
    assert code == 143, err.decode()  # 128 + SIGTERM: containment lets it through


def test_forward_that_fails_only_when_run_exits_3(tmp_path: Path) -> None:
    model = model_file(tmp_path, "class RealOnly(Attention):\n    def forward(self, x):\n"
                       "        if type(x) is torch.Tensor:  # a real tensor, not a fake one\n"
                       "            raise RuntimeError('kernel exploded')\n"
                       "        return super().forward(x)\n\n"
                       "def build_model():\n    return RealOnly()\n")
    run = invoke("report", model, "--device", "cpu", "--repeats", "1")
    assert_one_error(run, 3, "forward() while measuring", "kernel exploded")


def test_out_of_memory_while_measuring_exits_3(tmp_path: Path) -> None:
    model = model_file(tmp_path, "class Hungry(Attention):\n    def forward(self, x):\n"
                       "        if type(x) is torch.Tensor and x.device.type == 'cpu':\n"
                       "            raise torch.OutOfMemoryError('CUDA out of memory. Tried "
                       "to allocate 80.00 GiB')\n"
                       "        return super().forward(x)\n\n"
                       "def build_model():\n    return Hungry()\n")
    run = invoke("report", model, "--device", "cpu", "--repeats", "1")
    assert_one_error(run, 3, "OutOfMemoryError", "--batch-size")


def test_a_3000_deep_sequential_exits_3(tmp_path: Path) -> None:
    model = tmp_path / "deep.py"
    model.write_text("from torch import nn\n\ndef build_model():\n    m = nn.Linear(8, 8)\n"
                     "    for _ in range(3000):\n        m = nn.Sequential(m)\n    return m\n",
                     encoding="utf-8")
    assert_one_error(invoke("report", model), 3, "too deep")


@pytest.mark.slow
def test_timeout_bounds_a_build_model_that_never_returns(tmp_path: Path) -> None:
    model = model_file(tmp_path, "def build_model():\n    while True:\n        pass\n")
    run = run_process("report", model, "--timeout", "1", timeout=60)
    assert_one_error(run, 3, "timed out after 1 s in build_model()")


@pytest.mark.slow
def test_timeout_bounds_tracing(tmp_path: Path) -> None:
    model = model_file(tmp_path, "class Spins(Attention):\n    def forward(self, x):\n"
                       "        while True:\n            pass\n\n"
                       "def build_model():\n    return Spins()\n")
    run = run_process("report", model, "--timeout", "1.5", timeout=60)
    assert_one_error(run, 3, "timed out after 1.5 s in forward() while tracing")


@pytest.mark.slow
def test_whatif_on_a_huge_width_finishes(tmp_path: Path) -> None:
    # divisors(10**12) walks to 10**6 = √n, not to 10**12
    run = run_process("whatif", "--d-model", str(10**12), "--heads", "8", "--format", "json",
                      timeout=60)
    assert run.code == 0, run.stderr


def test_a_base_exception_from_model_code_is_one_line(tmp_path: Path) -> None:
    model = model_file(tmp_path, "class Abort(BaseException):\n    pass\n\n"
                                 "def build_model():\n    raise Abort('stop here')\n")
    assert_one_error(invoke("report", model), 3, "Abort: stop here")


def test_a_bug_in_mhaudit_exits_4_not_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mhaudit.api

    def broken(*args: object, **kwargs: object) -> object:
        raise ZeroDivisionError("a formula divided by zero")

    monkeypatch.setattr(mhaudit.api, "build_report", broken)
    run = invoke("report", model_file(tmp_path, "def build_model():\n    return Attention()\n"))
    assert_one_error(run, 4, "internal error", "ZeroDivisionError", "--verbose")


def test_library_audit_raises_only_mhaudit_errors() -> None:
    class Raises(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise SystemExit(7)

    with pytest.raises(TraceError, match=r"sys.exit\(7\)"):
        mhaudit.audit(Raises(), torch.zeros(1, 2, 4))
    with pytest.raises(MhauditError):
        mhaudit.audit(Raises(), torch.zeros(1, 2, 4))


def test_a_formula_that_raises_is_an_internal_error(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from mhaudit.cost import formulas

    def broken(call: object) -> int:
        raise TypeError("formula bug")

    entry = formulas._REGISTRY["aten.softmax"]
    monkeypatch.setitem(formulas._REGISTRY, "aten.softmax",
                        dataclasses.replace(entry, formula=broken))
    monkeypatch.setitem(formulas._REGISTRY, "aten._softmax",
                        dataclasses.replace(entry, formula=broken))
    run = invoke("report", model_file(tmp_path, "def build_model():\n    return Attention()\n"))
    assert_one_error(run, 4, "internal error", "formula bug")
