"""Bad options, bad library arguments, documented forms that must work, and messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hostile_helpers import TINY_LLAMA, assert_one_error, invoke, model_file, run_process

import mhaudit
from mhaudit.errors import ConfigError

# --- documented forms -------------------------------------------------------------------


def test_module_level_model_with_inferred_inputs(tmp_path: Path) -> None:
    model = model_file(tmp_path, "model = Attention()\n")
    run = invoke("report", model, "-f", "json")
    assert run.code == 0, run.stderr
    assert json.loads(run.stdout)["totals"]["attention_params"] == 4_224  # 4·32² + 4·32


def test_module_level_example_inputs_tensor(tmp_path: Path) -> None:
    model = model_file(tmp_path, "def build_model():\n    return Attention()\n\n"
                                 "EXAMPLE_INPUTS = (torch.zeros(2, 16, 32),)\n")
    run = invoke("report", model, "-f", "json")
    assert run.code == 0, run.stderr
    assert json.loads(run.stdout)["model"]["inputs"]["x"]["shape"] == [2, 16, 32]


def test_build_model_importing_a_sibling_at_call_time(tmp_path: Path) -> None:
    (tmp_path / "sibling_layers.py").write_text(
        "from torch import nn\nWIDTH = 32\n", encoding="utf-8")
    model = model_file(tmp_path, "def build_model():\n    import sibling_layers\n"
                                 "    return Attention(sibling_layers.WIDTH)\n")
    run = invoke("report", model)
    assert run.code == 0, run.stderr


def test_a_file_named_with_a_colon(tmp_path: Path) -> None:
    model = model_file(tmp_path, "def build_model():\n    return Attention()\n", name="exp:3.py")
    run = invoke("report", model)
    assert run.code == 0, run.stderr
    assert "exp:3.py" in run.stdout


def test_a_model_folder_with_config_json_is_built(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA), encoding="utf-8")
    run = invoke("report", tmp_path, "-f", "json", "--seq-len", "8")
    assert run.code == 0, run.stderr
    assert json.loads(run.stdout)["totals"]["num_blocks"] == 1


# --- options that cannot apply ----------------------------------------------------------


def test_seq_len_with_explicit_example_inputs_warns(tmp_path: Path) -> None:
    model = model_file(tmp_path, "def build_model():\n    return Attention()\n\n"
                                 "def example_inputs():\n    return (torch.zeros(1, 8, 32),)\n")
    run = invoke("report", model, "--seq-len", "512", "-f", "json")
    assert run.code == 0
    assert "--seq-len did not apply" in run.stderr and len(run.stderr.splitlines()) == 1
    assert json.loads(run.stdout)["blocks"][0]["seq_len_q"] == 8


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--seq-len", "512,,2048"), "empty item"),
        (("--seq-len", "0"), "positive"),
        (("--seq-len", "12x"), "whole number"),
        (("--input-shape", "1,,8"), "empty item"),
        (("--batch-size", "0"), "--batch-size"),
        (("--timeout", "-1"), "--timeout"),
    ],
)
def test_bad_report_options_exit_2(tmp_path: Path, args: tuple[str, ...], needle: str) -> None:
    model = model_file(tmp_path, "def build_model():\n    return Attention()\n")
    assert_one_error(invoke("report", model, *args), 2, needle)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--seq-len", "0"), "--seq-len"),
        (("--head-dim", "-64"), "--head-dim"),
        (("--repeats", "0"), "--repeats"),
        (("--try-heads", "8,,16"), "--try-heads"),
    ],
)
def test_bad_whatif_options_exit_2(args: tuple[str, ...], needle: str) -> None:
    assert_one_error(invoke("whatif", "--d-model", "64", "--heads", "8", *args), 2, needle)


def test_bad_input_shapes_for_a_config_target_are_usage_errors(tmp_path: Path) -> None:
    # a config takes --input-shape like any target (its main input, or inputs by name);
    # shapes that cannot be are refused before anything is built
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA), encoding="utf-8")
    for bad in ("1,0", "input_ids=", "1-x=1x8"):
        assert_one_error(invoke("report", config, "--input-shape", bad), 2, "--input-shape")


def test_config_sizes_below_one_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**TINY_LLAMA, "num_hidden_layers": -1}), encoding="utf-8")
    assert_one_error(invoke("report", config), 3, "num_hidden_layers = -1")


def test_config_that_does_not_divide_keeps_the_transformers_reason(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**TINY_LLAMA, "hidden_size": 33}), encoding="utf-8")
    assert_one_error(invoke("report", config), 3, "is not a multiple of the number of "
                                                  "attention heads")


# --- library arguments ------------------------------------------------------------------


def _tiny() -> tuple[torch.nn.Module, torch.Tensor]:
    with torch.device("meta"):
        return torch.nn.MultiheadAttention(16, 2, batch_first=True), torch.zeros(1, 4, 16)


@pytest.mark.parametrize(
    ("model", "needle"),
    [(42, "not int"), ("model.py", "audit_target"), (None, "not NoneType")],
)
def test_audit_of_a_non_module_is_a_config_error(model: object, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        mhaudit.audit(model)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"seq_len": "128"}, "seq_len must be an integer"),
        ({"batch_size": 1.5}, "batch_size must be an integer"),
        ({"typo_option": 3}, "unknown audit option 'typo_option'"),
        ({"scaling_seq_lens": (64, -8)}, "scaling_seq_lens item -8"),
        ({"timeout": 0}, "timeout"),
    ],
)
def test_bad_library_options_are_config_errors(override: dict[str, object], needle: str) -> None:
    model, x = _tiny()
    with pytest.raises(ConfigError, match=needle):
        mhaudit.audit(model, (x, x, x), **override)


def test_audit_target_of_a_non_string_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="target string"):
        mhaudit.audit_target(42)  # type: ignore[arg-type]


def test_check_without_a_budget_is_a_config_error() -> None:
    model, x = _tiny()
    with pytest.raises(ConfigError, match="budget must be"):
        mhaudit.check(model, (x, x, x), budget=None)  # type: ignore[arg-type]


def test_a_meta_model_is_not_measured_on_cpu() -> None:
    model, x = _tiny()
    with pytest.raises(ConfigError, match="meta device"):
        mhaudit.audit(model, (x, x, x), device="cpu")


def test_library_audit_keeps_torch_logging_off_stderr(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    class DataDependent(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) if x.sum() > 0 else x

    # torch.export fails on the branch (and logs fake-tensor tracebacks); a later rung traces it
    # (ones, so the branch taken reads the layer: a forward that reads none is refused)
    report = mhaudit.audit(DataDependent(), torch.ones(1, 4, 8))
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""
    assert not report.model.trace_method.startswith("torch.export")


# --- messages ---------------------------------------------------------------------------


def test_a_directory_target_gets_its_own_message(tmp_path: Path) -> None:
    assert_one_error(invoke("report", tmp_path), 3, "is a folder without a config.json")


def test_the_tip_matches_the_cause(tmp_path: Path) -> None:
    needs_args = model_file(tmp_path, "def build_model(width):\n    return Attention(width)\n",
                            name="needs_args.py")
    run = invoke("report", needs_args)
    assert_one_error(run, 3, "TypeError", "called with none")
    broken = model_file(tmp_path, "def build_model():\n    raise ValueError('bad width')\n",
                        name="broken.py")
    run = invoke("report", broken)
    assert_one_error(run, 3, "bad width")
    assert "no arguments" not in run.stderr and "called with none" not in run.stderr


def test_the_chained_cause_stays_in_the_line(tmp_path: Path) -> None:
    model = model_file(tmp_path, "try:\n    import not_a_real_package_xyz\n"
                       "except ImportError as exc:\n"
                       "    raise ImportError('the fast kernels are missing') from exc\n")
    assert_one_error(invoke("report", model), 3, "the fast kernels are missing",
                     "not_a_real_package_xyz")


def test_verbose_shows_the_traceback_and_the_log(tmp_path: Path) -> None:
    model = model_file(tmp_path, "def build_model():\n    raise ValueError('bad width')\n")
    run = invoke("report", model, "--verbose")
    assert run.code == 3
    assert "Traceback" in run.stderr and "bad width" in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith("mhaudit: error:")


def test_a_usage_error_is_one_line(tmp_path: Path) -> None:
    assert_one_error(invoke("report", tmp_path / "m.py", "--no-such-flag"), 2, "--no-such-flag")


@pytest.mark.slow
def test_failing_trace_prints_no_torch_noise(tmp_path: Path) -> None:
    # torch.export fails on the branch and torch logs about it (imported only once the
    # command runs); a later rung of the tracer ladder audits it, and stderr stays empty
    model = model_file(tmp_path, "class DataDependent(Attention):\n    def forward(self, x):\n"
                       "        y = super().forward(x)\n"
                       "        return y if x.sum() > 0 else -y\n\n"
                       "def build_model():\n    return DataDependent()\n")
    run = run_process("report", model, timeout=120)
    assert run.code == 0 and run.stderr == "", run.stderr
