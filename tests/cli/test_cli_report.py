"""``mhaudit report`` through click's CliRunner: formats, output files, and every exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mhaudit.cli import main

ROOT = Path(__file__).resolve().parents[2]
TEXTBOOK = str(ROOT / "examples" / "textbook_mha.py")


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_textbook_table_reports_one_block_of_16640_params() -> None:
    code, out, err = _run("report", TEXTBOOK)
    assert code == 0, err
    # 4·64² + 4·64 = 16,384 + 256 = 16,640
    assert "16,640" in out
    assert "MHA004" in out and "MHA005" in out


@pytest.mark.parametrize(
    ("target", "d_k", "total"),
    [
        (TEXTBOOK, 8, 16_640),  # 4·64² + 4·64
        (TEXTBOOK + ":make_large", 64, 1_050_624),  # 4·512² + 4·512 = 1,048,576 + 2,048
        (TEXTBOOK + ":make_single_head", 64, 16_640),  # h = 1: d_k = d = 64, same count
    ],
)
def test_textbook_layouts_are_exact_in_json(target: str, d_k: int, total: int) -> None:
    code, out, err = _run("report", target, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["schema_version"] == 1
    assert data["totals"]["num_blocks"] == 1
    block = data["blocks"][0]
    assert block["name"] == ""
    assert block["head_dim"] == d_k
    assert block["params"]["total"] == total == block["params"]["textbook"]


def test_json_has_the_contract_fields() -> None:
    code, out, _ = _run("report", TEXTBOOK, "-f", "json")
    assert code == 0
    data = json.loads(out)
    assert set(data) >= {"schema_version", "tool", "model", "blocks", "totals", "flags"}
    assert set(data["model"]) >= {
        "source", "class", "params_total", "trace_method", "device", "dtype", "inputs"
    }
    block = data["blocks"][0]
    assert set(block) >= {
        "name", "module_type", "kind", "implementation", "d_model", "num_heads",
        "num_kv_heads", "head_dim", "v_head_dim", "seq_len_q", "seq_len_kv", "params",
        "flops", "memory", "flags",
    }
    assert set(block["params"]) >= {"q", "k", "v", "o", "total", "textbook"}
    assert set(block["flops"]) >= {
        "q_proj", "k_proj", "v_proj", "scores", "softmax", "context", "o_proj", "total"
    }
    assert set(block["memory"]) >= {"scores_bytes", "kv_cache_bytes_per_token"}
    assert set(data["totals"]) >= {
        "num_blocks", "attention_params", "flops", "kv_cache_bytes_per_token"
    }
    for flag in block["flags"]:
        assert set(flag) >= {"code", "severity", "message"}


def test_output_file_is_written_and_stdout_stays_empty(tmp_path: Path) -> None:
    target = tmp_path / "report.md"
    code, out, _ = _run("report", TEXTBOOK, "-f", "markdown", "-o", str(target))
    assert code == 0
    assert out == ""
    assert target.read_text().startswith("## mhaudit")
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


def test_prints_inside_model_files_do_not_reach_stdout(tmp_path: Path) -> None:
    model = tmp_path / "noisy.py"
    model.write_text(
        "import torch\nprint('hello from import')\n"
        "def build_model():\n    print('hello from build')\n"
        "    return torch.nn.MultiheadAttention(32, 4, batch_first=True)\n"
        "def example_inputs():\n    x = torch.zeros(1, 8, 32)\n    return (x, x, x)\n"
    )
    code, out, err = _run("report", str(model), "-f", "json")
    assert code == 0, err
    assert json.loads(out)["blocks"][0]["num_heads"] == 4


def test_fail_on_warning_exits_1() -> None:
    code, _, _ = _run("report", TEXTBOOK, "--fail-on", "warning")
    assert code == 1


def test_bad_flag_exits_2() -> None:
    code, _, _ = _run("report", TEXTBOOK, "--format", "yaml")
    assert code == 2


def test_bad_seq_len_exits_2() -> None:
    code, _, _ = _run("report", TEXTBOOK, "--seq-len", "many")
    assert code == 2


def test_missing_model_file_exits_3_with_one_line() -> None:
    code, out, err = _run("report", "no/such/model.py")
    assert code == 3
    assert out == ""
    assert err.count("\n") == 1 and "does not exist" in err


def test_model_file_without_factory_exits_3(tmp_path: Path) -> None:
    model = tmp_path / "empty.py"
    model.write_text("x = 1\n")
    code, _, err = _run("report", str(model))
    assert code == 3
    assert "build_model()" in err


def test_untraceable_model_exits_3_naming_the_cause(tmp_path: Path) -> None:
    model = tmp_path / "branchy.py"
    model.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.lin = torch.nn.Linear(8, 8)\n"
        "    def forward(self, x):\n"
        "        raise ValueError('no forward on these inputs')\n"
        "def build_model():\n    return M()\n"
        "def example_inputs():\n    return (torch.zeros(2, 8),)\n"
    )
    code, out, err = _run("report", str(model))
    assert code == 3
    assert out == ""
    assert "could not trace M" in err


def test_module_target_with_colon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "zoo_pkg").mkdir()
    (tmp_path / "zoo_pkg" / "__init__.py").write_text("")
    (tmp_path / "zoo_pkg" / "models.py").write_text(
        "import torch\n"
        "def small():\n    return torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, err = _run("report", "zoo_pkg.models:small", "-f", "json", "-n", "16")
    assert code == 0, err
    data = json.loads(out)
    assert data["blocks"][0]["name"] == "self_attn"
    assert data["blocks"][0]["seq_len_q"] == 16


def test_rule_options_change_severity_and_suppress_by_module() -> None:
    code, out, err = _run("report", TEXTBOOK, "-f", "json", "--severity", "MHA005=error",
                          "--per-module-ignores", "*=MHA004")
    assert code == 0, err
    flags = {f["code"]: f["severity"] for f in json.loads(out)["blocks"][0]["flags"]}
    assert flags["MHA005"] == "error"
    assert "MHA004" not in flags


def test_select_keeps_only_matching_rules() -> None:
    code, out, _ = _run("report", TEXTBOOK, "-f", "json", "--select", "MHA005")
    assert code == 0
    assert [f["code"] for f in json.loads(out)["blocks"][0]["flags"]] == ["MHA005"]


def test_bad_severity_value_exits_2() -> None:
    code, out, err = _run("report", TEXTBOOK, "--severity", "MHA005=fatal")
    assert code == 2
    assert out == "" and "MHA005" in err


def test_module_level_model_and_keyword_inputs(tmp_path: Path) -> None:
    model = tmp_path / "kw.py"
    model.write_text(
        "import torch\n"
        "class Cross(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.attn = torch.nn.MultiheadAttention(32, 4, batch_first=True)\n"
        "    def forward(self, x, memory):\n"
        "        return self.attn(x, memory, memory, need_weights=False)[0]\n"
        "model = Cross()\n"
        "EXAMPLE_INPUTS = {'x': torch.zeros(2, 5, 32), 'memory': torch.zeros(2, 9, 32)}\n"
    )
    code, out, err = _run("report", str(model), "-f", "json")
    assert code == 0, err
    block = json.loads(out)["blocks"][0]
    assert (block["kind"], block["seq_len_q"], block["seq_len_kv"]) == ("cross", 5, 9)


def test_inputs_are_inferred_from_the_first_layer_with_batch_and_seq_len(tmp_path: Path) -> None:
    model = tmp_path / "plain.py"
    model.write_text(
        "import torch\n"
        "def build_model():\n"
        "    return torch.nn.TransformerEncoderLayer(48, 6, 96, batch_first=True)\n"
    )
    code, out, err = _run("report", str(model), "-f", "json", "-b", "3", "-n", "20")
    assert code == 0, err
    data = json.loads(out)
    assert data["model"]["inputs"]["src"]["shape"] == [3, 20, 48]
    code, out, err = _run("report", str(model), "-f", "json", "--input-shape", "2x7x48")
    assert code == 0, err
    assert json.loads(out)["blocks"][0]["seq_len_q"] == 7


def test_bad_input_shape_exits_2() -> None:
    code, _, err = _run("report", TEXTBOOK, "--input-shape", "2xfoo")
    assert code == 2 and "shape" in err


def test_prints_inside_forward_do_not_reach_the_json(tmp_path: Path) -> None:
    model = tmp_path / "chatty.py"
    model.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.attn = torch.nn.MultiheadAttention(32, 4, batch_first=True)\n"
        "    def forward(self, x):\n"
        "        print('hello from forward')\n"
        "        return self.attn(x, x, x, need_weights=False)[0]\n"
        "def build_model():\n    return M()\n"
        "def example_inputs():\n    return (torch.zeros(1, 8, 32),)\n"
    )
    budget = tmp_path / "budget.toml"
    budget.write_text("[budget]\nmax_params = 100000\n")
    for extra in ((), ("--budget", str(budget))):
        command = "check" if extra else "report"
        code, out, err = _run(command, str(model), "-f", "json", *extra)
        assert code == 0, err
        assert json.loads(out)["blocks"][0]["num_heads"] == 4


@pytest.mark.parametrize("device", ["cudax", "tpu", "cuda:banana"])
def test_unknown_device_exits_2(device: str) -> None:
    code, out, err = _run("report", TEXTBOOK, "--device", device)
    assert code == 2 and out == ""
    assert "device" in err and "Traceback" not in err


def test_every_offered_dtype_is_accepted() -> None:
    for dtype in ("float32", "fp32", "bfloat16", "bf16", "float16", "fp16", "float8", "fp8"):
        code, _, err = _run("report", TEXTBOOK, "--dtype", dtype, "-f", "json")
        assert code == 0, (dtype, err)


def test_whatif_output_to_a_missing_folder_exits_2(tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "out.txt"
    code, _, err = _run("whatif", "--d-model", "64", "--heads", "8", "-o", str(target))
    assert code == 2 and err.startswith("mhaudit: error:")
