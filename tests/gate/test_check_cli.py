"""``mhaudit check``: every exit code and every format, on small textbook model files."""

from __future__ import annotations

import json
import runpy
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner, Result

from mhaudit.cli.check_cmd import check_command
from mhaudit.errors import ConfigError
from mhaudit.gate.check import check
from mhaudit.render.gate import budget_message
from mhaudit.testing import assert_within_budget

MODEL = '''
import math

import torch
from torch import nn

D = {d}


class TextbookMHA(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.h, self.d_k = h, d // h
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)

    def forward(self, x):
        b, n, d = x.shape
        q = self.q(x).view(b, n, self.h, self.d_k).transpose(1, 2)  # (B, h, n, d_k)
        k = self.k(x).view(b, n, self.h, self.d_k).transpose(1, 2)  # (B, h, n, d_k)
        v = self.v(x).view(b, n, self.h, self.d_k).transpose(1, 2)  # (B, h, n, d_k)
        probs = ((q @ k.transpose(-2, -1)) / math.sqrt(self.d_k)).softmax(dim=-1)
        return self.o((probs @ v).transpose(1, 2).reshape(b, n, d))


def build_model():
    return TextbookMHA(D, 8)


def example_inputs():
    return (torch.randn(2, 10, D),)
'''


@pytest.fixture
def models(tmp_path: Path) -> dict[int, Path]:
    """d = 64 (4·64² + 4·64 = 16,640 params) and d = 96 (37,248 params), both 8 heads."""
    out = {}
    for d in (64, 96):
        path = tmp_path / f"textbook_{d}.py"
        path.write_text(MODEL.format(d=d), encoding="utf-8")
        out[d] = path
    return out


def budget(tmp_path: Path, body: str, name: str = "budget.toml") -> Path:
    path = tmp_path / name
    path.write_text(f"[budget]\n{body}\n", encoding="utf-8")
    return path


def run(*args: str | Path, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(check_command, [str(a) for a in args], env=env)


@pytest.mark.parametrize(
    ("limit", "code"), [("20000", 0), ('"20k"', 0), ("10000", 1), ('"16k"', 1)]
)
def test_textbook_params_budget(models: dict[int, Path], tmp_path: Path, limit: str,
                                code: int) -> None:
    result = run(models[64], "--budget", budget(tmp_path, f"max_params = {limit}"))
    assert result.exit_code == code, result.output
    assert "params_total" in result.stdout
    assert "16,640" in result.stdout
    if code:
        assert "params_total 16,640 exceeds budget" in result.stdout
        assert result.stdout.rstrip().splitlines()[-1].startswith("FAIL")
    else:
        assert result.stdout.rstrip().splitlines()[-1].startswith("PASS")


def test_every_breach_is_listed(models: dict[int, Path], tmp_path: Path) -> None:
    path = budget(tmp_path, 'max_params = "10k"\nmax_attention_params = 10000\n'
                            "max_peak_activation_bytes = 100")
    result = run(models[64], "--budget", path)
    assert result.exit_code == 1
    for line in ("params_total 16,640 exceeds budget 10,000 (+6,640, +66.4%)",
                 "attention_params 16,640 exceeds budget 10,000",
                 "peak_activation_bytes 15.6 KiB exceeds budget 100 B"):
        assert line in result.stdout


def test_typo_key_exits_2_and_names_it(models: dict[int, Path], tmp_path: Path) -> None:
    result = run(models[64], "--budget", budget(tmp_path, "max_parms = 20000"))
    assert result.exit_code == 2
    assert "budget.max_parms" in result.stderr
    assert "max_params" in result.stderr
    assert result.stdout == ""


def test_bad_value_exits_2(models: dict[int, Path], tmp_path: Path) -> None:
    result = run(models[64], "--budget", budget(tmp_path, 'max_flops = "lots"'))
    assert result.exit_code == 2
    assert "max_flops" in result.stderr


def test_malformed_toml_exits_2(models: dict[int, Path], tmp_path: Path) -> None:
    path = tmp_path / "budget.toml"
    path.write_text("[budget\nmax_params = 1\n", encoding="utf-8")
    result = run(models[64], "--budget", path)
    assert result.exit_code == 2
    assert "budget.toml" in result.stderr
    assert "TOML" in result.stderr


def test_missing_budget_file_exits_2(models: dict[int, Path], tmp_path: Path) -> None:
    result = run(models[64], "--budget", tmp_path / "missing.toml")
    assert result.exit_code == 2
    assert "missing.toml" in result.stderr


def test_missing_model_exits_3(tmp_path: Path) -> None:
    result = run(tmp_path / "no_such_model.py", "--budget", budget(tmp_path, "max_params = 1"))
    assert result.exit_code == 3
    assert "no_such_model.py" in result.stderr


def test_broken_model_exits_3(tmp_path: Path) -> None:
    model = tmp_path / "broken.py"
    model.write_text("def build_model():\n    raise RuntimeError('boom')\n", encoding="utf-8")
    result = run(model, "--budget", budget(tmp_path, "max_params = 1"))
    assert result.exit_code == 3
    assert "boom" in result.stderr


def test_baseline_round_trip(models: dict[int, Path], tmp_path: Path) -> None:
    path = budget(tmp_path, "max_increase_percent = 10")
    base = tmp_path / "baseline.json"
    written = run(models[64], "--budget", path, "--baseline", base, "--update-baseline")
    assert written.exit_code == 0, written.output
    data = json.loads(base.read_text(encoding="utf-8"))
    assert data["totals"]["params_total"] == 16_640
    assert data["budget"]["metrics"]["params_total"] == 16_640
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []

    same = run(models[64], "--budget", path, "--baseline", base)
    assert same.exit_code == 0, same.output

    other = run(models[96], "--budget", path, "--baseline", base)
    assert other.exit_code == 2  # recorded for textbook_64.py, not textbook_96.py
    assert "--allow-other-model" in other.stderr

    models[64].write_text(models[96].read_text(encoding="utf-8"), encoding="utf-8")
    grown = run(models[64], "--budget", path, "--baseline", base)
    assert grown.exit_code == 1
    # 37,248 vs 16,640 is +123.8%; the allowed ceiling is 16,640 · 1.1 = 18,304.
    assert "params_total 37,248 exceeds baseline 16,640 +10% = 18,304" in grown.stdout
    assert "+123.8% vs baseline" in grown.stdout


def test_update_baseline_needs_a_path(models: dict[int, Path], tmp_path: Path) -> None:
    result = run(models[64], "--budget", budget(tmp_path, "max_params = 1"), "--update-baseline")
    assert result.exit_code == 2
    assert "--baseline" in result.stderr


def test_missing_baseline_exits_2(models: dict[int, Path], tmp_path: Path) -> None:
    result = run(models[64], "--budget", budget(tmp_path, "max_increase_percent = 10"),
                 "--baseline", tmp_path / "none.json")
    assert result.exit_code == 2
    assert "none.json" in result.stderr
    assert "--update-baseline" in result.stderr


def test_json_format_has_report_and_budget(models: dict[int, Path], tmp_path: Path) -> None:
    result = run(models[64], "--budget", budget(tmp_path, "max_params = 10000"), "--format", "json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1
    assert data["model"]["params_total"] == 16_640
    assert data["budget"]["passed"] is False
    (entry,) = data["budget"]["results"]
    assert entry["metric"] == "params_total"
    assert entry["limit"] == 10_000
    assert entry["actual"] == 16_640
    assert "FAIL" in result.stderr


def test_junit_format_is_valid_with_a_failing_case(models: dict[int, Path],
                                                   tmp_path: Path) -> None:
    path = budget(tmp_path, 'max_params = "16k"\nmax_kv_cache_bytes_per_token = "1KiB"')
    result = run(models[64], "--budget", path, "--format", "junit")
    assert result.exit_code == 1
    root = ET.fromstring(result.stdout)
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert cases["params_total"].find("failure") is not None
    assert cases["kv_cache_bytes_per_token"].find("failure") is None
    assert root.get("failures") == "1"


def test_github_format_and_step_summary(models: dict[int, Path], tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    result = run(models[64], "--budget", budget(tmp_path, "max_params = 10000"),
                 "--format", "github", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.exit_code == 1
    assert result.stdout.startswith("::error title=mhaudit budget params_total::")
    text = summary.read_text(encoding="utf-8")
    assert "| `params_total` | 16,640 | 10,000 |" in text
    assert "❌ failed" in text


def test_markdown_format(models: dict[int, Path], tmp_path: Path) -> None:
    result = run(models[64], "--budget", budget(tmp_path, "max_params = 20000"),
                 "--format", "markdown")
    assert result.exit_code == 0
    assert "✅ passed" in result.stdout


def test_output_file_is_written(models: dict[int, Path], tmp_path: Path) -> None:
    out = tmp_path / "check.xml"
    result = run(models[64], "--budget", budget(tmp_path, "max_params = 20000"),
                 "--format", "junit", "--output", out)
    assert result.exit_code == 0
    assert result.stdout == ""
    assert ET.parse(out).getroot().get("failures") == "0"


def test_warning_flags_fail_when_fail_on_warning(models: dict[int, Path], tmp_path: Path) -> None:
    # The textbook layout has d_k = 8 and materialises its score matrix: warnings.
    loose = run(models[64], "--budget", budget(tmp_path, "max_params = 20000"))
    assert loose.exit_code == 0
    strict = run(models[64], "--budget",
                 budget(tmp_path, 'max_params = 20000\nfail_on = "warning"', "strict.toml"))
    assert strict.exit_code == 1
    assert "Flags at or above warning:" in strict.stdout


def test_budget_from_pyproject(models: dict[int, Path], tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.mhaudit.budget]\nmax_params = "16k"\n',
                                             encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = run(models[64])
    assert result.exit_code == 1
    assert "params_total 16,640 exceeds budget 16,000" in result.stdout


def test_transformers_config_target(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
        "architectures": ["GPT2LMHeadModel"],
    }), encoding="utf-8")
    result = run(config, "--budget", budget(tmp_path, 'max_params = "1G"'), "--seq-len", "16",
                 "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["model"]["class"] == "GPT2LMHeadModel"
    assert data["totals"]["num_blocks"] == 2
    assert data["model"]["inputs"]["input_ids"]["shape"] == [1, 16]


def _module(path: Path) -> Any:
    return runpy.run_path(str(path))["build_model"]()


def test_library_gate(models: dict[int, Path], tmp_path: Path) -> None:
    model = _module(models[64])
    x = torch.randn(2, 10, 64)  # (B, n, d)
    assert check(model, x, budget={"max_params": "20k"}).passed
    outcome = check(model, x, budget={"max_params": "16k"})
    assert not outcome.passed
    assert budget_message(outcome.results[0]).startswith(
        "params_total 16,640 exceeds budget 16,000")
    from_file = check(str(models[64]), budget=budget(tmp_path, "max_params = 20000"))
    assert from_file.passed
    grown = check(_module(models[96]), torch.randn(2, 10, 96),
                  budget={"max_increase_percent": 10}, baseline={"params_total": 16_640})
    assert [r.metric for r in grown.results if not r.passed] == ["params_total"]
    with pytest.raises(ConfigError, match="max_parms"):
        check(model, x, budget={"max_parms": 1})


def test_assert_within_budget(models: dict[int, Path]) -> None:
    model = _module(models[64])
    x = torch.randn(2, 10, 64)  # (B, n, d)
    assert assert_within_budget(model, x, max_params=20_000).passed
    with pytest.raises(AssertionError) as err:
        assert_within_budget(model, x, max_params="16k", max_attention_params=10_000)
    text = str(err.value)
    assert "params_total 16,640 exceeds budget 16,000" in text
    assert "attention_params 16,640 exceeds budget 10,000" in text
    with pytest.warns(UserWarning, match="params_total"):
        assert_within_budget(model, x, max_params={"limit": 10, "severity": "warning"})


def test_update_baseline_exits_0_once_recorded_and_still_shows_the_verdict(
        models: dict[int, Path], tmp_path: Path) -> None:
    base = tmp_path / "baseline.json"
    over = run(models[64], "--budget", budget(tmp_path, "max_params = 1"), "--baseline", base,
               "--update-baseline")
    assert over.exit_code == 0, over.output  # the job that records a baseline stays green
    assert base.is_file()
    assert "FAIL" in over.output and "params_total" in over.output  # the verdict is not hidden


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_several_targets_give_a_verdict_per_model_and_one_overall(
        models: dict[int, Path], tmp_path: Path, fmt: str) -> None:
    limit = budget(tmp_path, "max_params = 20000")  # d = 64 passes, d = 96 fails
    result = run(models[64], models[96], "--budget", limit, "--format", fmt)
    assert result.exit_code == 1, result.output
    out = result.stdout
    assert "2 models: 1 passed, 1 failed" in out
    lines = out.splitlines()
    assert "FAIL: 2 models: 1 passed, 1 failed" in lines[-1]
    if fmt == "table":
        assert f"PASS {models[64]}" in lines and f"FAIL {models[96]}" in lines
    else:
        assert any("PASS" in x and models[64].name in x for x in lines if x.startswith("| "))
        assert any("FAIL" in x and models[96].name in x for x in lines if x.startswith("| "))
    # the FLOPs budget depends on the example input: each model's header names it
    assert out.count("(input x 2×10×") == 2


def test_two_passing_targets_pass_overall(models: dict[int, Path], tmp_path: Path) -> None:
    result = run(models[64], models[96], "--budget", budget(tmp_path, "max_params = 50000"))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "PASS: 2 models: 2 passed, 0 failed"


def test_summary_writes_the_markdown_beside_the_output_in_one_run(
        models: dict[int, Path], tmp_path: Path) -> None:
    summary, sarif = tmp_path / "summary.md", tmp_path / "gate.sarif"
    limit = budget(tmp_path, "max_params = 20000")
    result = run(models[96], "--budget", limit, "--format", "sarif", "--output", sarif,
                 "--summary", summary)
    assert result.exit_code == 1, result.output
    assert json.loads(sarif.read_text(encoding="utf-8"))["version"] == "2.1.0"
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("## mhaudit budget: ") and "❌ failed" in text
    assert "params_total" in text
    assert text.splitlines()[-1].startswith("FAIL: 1 budget(s) checked, 1 exceeded")
    assert not list(tmp_path.glob("*.tmp*")) and not list(tmp_path.glob(".*summary*"))


@pytest.mark.parametrize("what", ["model", "budget", "stream"])
def test_summary_never_overwrites_an_input(models: dict[int, Path], tmp_path: Path,
                                           what: str) -> None:
    limit = budget(tmp_path, "max_params = 50000")
    target = {"model": models[64], "budget": limit, "stream": Path("-")}[what]
    before = target.read_bytes() if what != "stream" else b""
    result = run(models[64], "--budget", limit, "--summary", target)
    assert result.exit_code == 2, result.output
    assert "--summary" in result.output
    if what != "stream":
        assert target.read_bytes() == before


def test_several_targets_to_a_file_say_the_overall_verdict_on_stderr(
        models: dict[int, Path], tmp_path: Path) -> None:
    out = tmp_path / "gate.json"
    result = run(models[64], models[96], "--budget", budget(tmp_path, "max_params = 20000"),
                 "--format", "json", "--output", out)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].endswith("FAIL: 2 models: 1 passed, 1 failed")
