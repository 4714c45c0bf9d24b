"""Exit 4 only for mhaudit's own bugs: pipes, disks, digits, deep files, odd objects, torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_helpers import (
    TINY_LLAMA,
    assert_one_error,
    invoke,
    model_file,
    run_process,
    subprocess_env,
)

from mhaudit.errors import first_line, safe_text

GOOD_BODY = "def build_model():\n    return Attention()\n"


def _shell(command: str, cwd: Path, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=env or subprocess_env(), check=False)


MHAUDIT = f"{sys.executable} -m mhaudit"


@pytest.mark.slow
def test_stdout_closed_by_its_reader_exits_141_quietly(model: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "mhaudit", "report", str(model)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env())
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first write
    err = proc.stderr.read().decode("utf-8", "replace")
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err
    assert "error" not in err


@pytest.mark.slow
def test_report_into_a_full_disk_is_exit_2(tmp_path: Path, model: Path) -> None:
    done = _shell(f"{MHAUDIT} report {model} > /dev/full", tmp_path)
    assert_one_error(_run(done), 2, "No space left on device")
    assert "ResourceWarning" not in done.stderr


@pytest.mark.slow
def test_closed_stdout_is_exit_2(tmp_path: Path, model: Path) -> None:
    assert_one_error(_run(_shell(f"{MHAUDIT} report {model} >&-", tmp_path)), 2,
                     "stdout is closed")


@pytest.mark.slow
def test_closed_stdout_with_output_file_still_writes_it(tmp_path: Path, model: Path) -> None:
    done = _shell(f"{MHAUDIT} report {model} -o out.txt >&-", tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").startswith("mhaudit")


@pytest.mark.slow
def test_closed_stderr_keeps_the_exit_code(tmp_path: Path) -> None:
    model = model_file(tmp_path, "def build_model():\n    raise ValueError('bad')\n")
    assert _shell(f"{MHAUDIT} report {model} 2>&-", tmp_path).returncode == 3


@pytest.mark.slow
def test_model_that_closes_fd_2_and_raises_is_exit_3(tmp_path: Path) -> None:
    model = model_file(tmp_path, "import os\n\ndef build_model():\n    os.close(2)\n"
                       "    raise ValueError('after closing stderr')\n")
    assert_one_error(run_process("report", model, timeout=120), 3, "after closing stderr")


@pytest.mark.slow
def test_broken_torch_on_pythonpath_is_an_environment_error(tmp_path: Path,
                                                            model: Path) -> None:
    fake = tmp_path / "shadow" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('half-installed torch build')\n",
                                      encoding="utf-8")
    root = Path(__file__).resolve().parents[2]
    env = subprocess_env(PYTHONPATH=f"{fake.parent}{__import__('os').pathsep}{root}")
    run = run_process("report", model, env=env, timeout=120)
    assert_one_error(run, 3, "torch could not be imported", "half-installed torch build")
    assert "bug in mhaudit" not in run.stderr


def _run(done: subprocess.CompletedProcess[str]) -> object:
    from hostile_helpers import Run

    return Run(done.returncode, done.stdout, done.stderr)


@pytest.mark.parametrize("args", [
    ("--seq-len", "²"), ("--seq-len", "128,²"), ("--input-shape", "1x8x²"),
    ("--batch-size", "３"), ("--seq-len", "١٢٨"), ("--tensor-parallel", "²"),
])
def test_non_ascii_digits_are_usage_errors(model: Path, args: tuple[str, str]) -> None:
    run = invoke("report", model, *args)
    assert_one_error(run, 2)
    assert "internal error" not in run.stderr


@pytest.mark.parametrize("args", [
    ("--heads", "٣"), ("--seq-len", "²"), ("--try-heads", "²,4"),
])
def test_whatif_takes_ascii_digits_only(args: tuple[str, str]) -> None:
    base = {"--heads": "4", "--d-model": "64"}
    base.update({args[0]: args[1]} if args[0] in base else {})
    extra = [] if args[0] in base else list(args)
    run = invoke("whatif", *[x for kv in base.items() for x in kv], *extra)
    assert_one_error(run, 2)


def test_decode_context_in_superscript_is_a_usage_error(model: Path) -> None:
    assert_one_error(invoke("report", model, "--decode", "--context", "²"), 2)


def _deep(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def test_deep_config_json_is_a_load_error(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(_deep(50_000), encoding="utf-8")
    assert_one_error(invoke("report", config), 3, "nests too deeply")


def test_deep_baseline_is_a_config_error(tmp_path: Path, model: Path, budget: Path) -> None:
    baseline = tmp_path / "baseline.json"
    baseline.write_text(_deep(50_000), encoding="utf-8")
    assert_one_error(invoke("check", model, "--budget", budget, "--baseline", baseline), 2)


def test_deep_budget_toml_is_a_config_error(tmp_path: Path, model: Path) -> None:
    deep = tmp_path / "deep.toml"
    deep.write_text("[budget]\nx = " + "[" * 50_000 + "]" * 50_000 + "\n", encoding="utf-8")
    run = invoke("check", model, "--budget", deep)
    assert_one_error(run, 2)


def _not_utf8(path: Path, body: bytes) -> Path:
    path.write_bytes(body)
    return path


def test_pyproject_not_utf8_under_report_is_exit_2(tmp_path: Path, model: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _not_utf8(tmp_path / "pyproject.toml", b'[tool.mhaudit]\nignore = ["\xff"]\n')
    monkeypatch.chdir(tmp_path)
    assert_one_error(invoke("report", model), 2, "not UTF-8")


def test_pyproject_not_utf8_under_check_is_exit_2(tmp_path: Path, model: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _not_utf8(tmp_path / "pyproject.toml", b'[tool.mhaudit.budget]\nmax_params = "\xff"\n')
    monkeypatch.chdir(tmp_path)
    assert_one_error(invoke("check", model), 2, "UTF-8")


def test_budget_not_utf8_is_exit_2(tmp_path: Path, model: Path) -> None:
    bad = _not_utf8(tmp_path / "b.toml", b'[budget]\nmax_params = "\xfe\xff"\n')
    assert_one_error(invoke("check", model, "--budget", bad), 2, "UTF-8")


def test_baseline_not_utf8_is_exit_2(tmp_path: Path, model: Path, budget: Path) -> None:
    bad = _not_utf8(tmp_path / "bl.json", b'{"schema_version": 1, "x": "\xff"}')
    assert_one_error(invoke("check", model, "--budget", budget, "--baseline", bad), 2, "UTF-8")


def test_config_not_utf8_is_a_load_error(tmp_path: Path) -> None:
    bad = _not_utf8(tmp_path / "config.json", b'{"model_type": "\xff"}')
    assert_one_error(invoke("report", bad), 3, "UTF-8")


@pytest.mark.parametrize("value", ["1" + "0" * 400, "-" + "1" + "0" * 400])
def test_baseline_with_a_400_digit_number_is_exit_2(tmp_path: Path, model: Path,
                                                    budget: Path, value: str) -> None:
    baseline = tmp_path / "bl.json"
    baseline.write_text('{"schema_version": 1, "model": {"source": "x"}, "totals": '
                        f'{{"params_total": {value}}}}}', encoding="utf-8")
    run = invoke("check", model, "--budget", budget, "--baseline", baseline,
                 "--allow-other-model")
    assert_one_error(run, 2, "params_total")
    assert len(run.stderr) < 600


MODEL_CODE = {
    "module_getattr": ("def __getattr__(name):\n    raise RuntimeError('lazy ' + name)\n",
                       "lazy build_model"),
    "module_getattr_after_build": (
        GOOD_BODY + "\ndef __getattr__(name):\n    raise RuntimeError('lazy ' + name)\n",
        "lazy example_inputs"),
    "str_raises": ("class Odd(Exception):\n    def __str__(self):\n        raise ValueError\n\n"
                   "def build_model():\n    raise Odd()\n", "unprintable Odd"),
    "str_not_a_string": ("class Odd(Exception):\n    def __str__(self):\n        return 7\n\n"
                         "def build_model():\n    raise Odd()\n", "Odd"),
    "exit_repr_raises": ("import sys\n\nclass Code:\n    def __repr__(self):\n"
                         "        raise ValueError\n\ndef build_model():\n    sys.exit(Code())\n",
                         "unprintable Code"),
    "generator_exit": ("def build_model():\n    raise GeneratorExit\n", "GeneratorExit"),
    "generator_exit_in_forward": (
        "class Odd(Attention):\n    def forward(self, x):\n        raise GeneratorExit\n\n"
        "def build_model():\n    return Odd()\n", "GeneratorExit"),
    "base_exception": ("class Stop(BaseException):\n    pass\n\n"
                       "def build_model():\n    raise Stop('halt')\n", "Stop"),
    "base_exception_at_import": ("class Stop(BaseException):\n    pass\n\nraise Stop('halt')\n",
                                 "Stop"),
    "factory_name_raises": (
        "class Factory:\n    def __call__(self):\n        return Attention()\n"
        "    def __getattr__(self, name):\n        raise RuntimeError('no ' + name)\n\n"
        "build_model = Factory()\n", "no __name__"),
}


@pytest.mark.parametrize("case", sorted(MODEL_CODE))
def test_hostile_model_code_is_exit_3(tmp_path: Path, case: str) -> None:
    body, needle = MODEL_CODE[case]
    run = invoke("report", model_file(tmp_path, body))
    assert_one_error(run, 3, needle)
    assert "bug in mhaudit" not in run.stderr


def test_verbose_with_an_unprintable_exception_is_still_exit_3(tmp_path: Path) -> None:
    body = MODEL_CODE["str_raises"][0]
    run = invoke("report", model_file(tmp_path, body), "--verbose")
    assert run.code == 3, run.stderr
    assert "internal error" not in run.stderr


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


class _Cause(Exception):
    @property  # type: ignore[misc]
    def __cause__(self) -> BaseException:  # type: ignore[override]
        raise RuntimeError("no")


def test_the_error_formatter_is_total() -> None:
    assert first_line(_Unprintable()) == "_Unprintable: <unprintable _Unprintable>"
    assert first_line(_Cause("x")).startswith("_Cause")

    class Repr:
        def __repr__(self) -> str:
            raise RuntimeError

    assert safe_text(Repr(), repr) == "<unprintable Repr>"


def test_tiny_config_still_loads(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA), encoding="utf-8")
    assert invoke("report", config).code == 0


def test_deep_pyproject_under_report_is_a_config_error(tmp_path: Path, model: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[tool.mhaudit]\nignore = " + "[" * 50_000 + "]" * 50_000 + "\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert_one_error(invoke("report", model), 2, "nests too deeply")
