"""The terminal table: fitted to COLUMNS, --wide, colour by severity; several targets at once."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mhaudit.cli import main
from mhaudit.cli.progress import Status

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(str(p) for p in (ROOT / "examples").glob("*.py"))
TEXTBOOK = str(ROOT / "examples" / "textbook_mha.py")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _run(*args: str, env: dict[str, str] | None = None) -> Any:
    base = {"COLUMNS": "100", "NO_COLOR": "", "FORCE_COLOR": ""}
    return CliRunner().invoke(main, list(args), env={**base, **(env or {})})


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: Path(p).stem)
def test_default_report_fits_100_columns(example: str) -> None:
    done = _run("report", example)
    assert done.exit_code == 0, done.output
    widest = max(done.stdout.splitlines(), key=len)
    assert len(widest) <= 100, widest


def test_narrow_terminal_keeps_the_core_columns() -> None:
    done = _run("report", str(ROOT / "examples" / "llama_gqa.py"), env={"COLUMNS": "72"})
    assert done.exit_code == 0
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 72
    header = next(line for line in lines if line.startswith("block"))
    assert header.split()[:2] == ["block", "h"] or "h_kv" in header.split()


def test_wide_shows_every_column_unwrapped() -> None:
    done = _run("report", TEXTBOOK, "--wide")
    header = next(line for line in done.stdout.splitlines() if line.startswith("block"))
    assert header.split() == ["block", "×", "type", "kind", "impl", "d_model", "h", "h_kv", "d_k",
                              "params", "4·d²+b", "Δ", "FLOPs", "scores", "KV/token", "flags"]
    flag = next(line for line in done.stdout.splitlines() if line.startswith("MHA004"))
    assert flag.endswith("over 10 positions") and len(flag) > 100


def test_colour_follows_force_color_and_no_color() -> None:
    plain = _run("report", TEXTBOOK)
    assert "\x1b[" not in plain.stdout  # CliRunner's stdout is not a TTY
    forced = _run("report", TEXTBOOK, env={"FORCE_COLOR": "1"})
    assert "\x1b[33mMHA004 warning\x1b[0m" in forced.stdout
    assert "\x1b[36mMHA010 info\x1b[0m" in forced.stdout
    assert ANSI.sub("", forced.stdout) == plain.stdout
    assert "\x1b[" not in _run("report", TEXTBOOK, env={"FORCE_COLOR": "1",
                                                        "NO_COLOR": "1"}).stdout
    assert "\x1b[" not in _run("report", TEXTBOOK, "-f", "json",
                               env={"FORCE_COLOR": "1"}).stdout


def test_output_file_says_where_it_went(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    done = _run("report", TEXTBOOK, "-f", "html", "-o", str(out))
    assert done.exit_code == 0 and done.stdout == ""
    assert done.stderr.splitlines() == [f"mhaudit: wrote {out}"]
    assert out.read_text(encoding="utf-8").count("<svg") >= 4


def test_several_targets_in_one_process() -> None:
    llama = str(ROOT / "examples" / "llama_gqa.py")
    table = _run("report", TEXTBOOK, llama)
    assert table.exit_code == 0, table.output
    assert table.stdout.startswith("mhaudit: summary of 2 models\n")
    summary = table.stdout.split("\n\n")[1].splitlines()
    # the paths are long: the summary gives up columns in SUMMARY_DROP_ORDER to fit 100
    kept = summary[0].split()
    assert kept[0] == "model" and "FLOPs" in kept and kept[-1] == "findings"
    assert "attention" not in kept and max(len(line) for line in summary) <= 100
    assert "2 warning, 1 info" in summary[2]  # MHA004, MHA005; MHA010
    # MHA010 on each of two layers; on H100 at bf16 the cuDNN kernel runs d_k = 32 unpadded
    assert "2 info" in summary[3] and "warning" not in summary[3]
    data = json.loads(_run("report", TEXTBOOK, llama, "-f", "json").stdout)
    assert [d["model"]["class"] for d in data] == ["MultiHeadAttention", "Llama"]
    sarif = json.loads(_run("report", TEXTBOOK, llama, "-f", "sarif").stdout)
    assert len(sarif["runs"]) == 1 and len(sarif["runs"][0]["results"]) == 3 + 2


def test_worst_exit_code_wins_and_the_others_still_report(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.py")
    done = _run("report", TEXTBOOK, missing, "-f", "json")
    assert done.exit_code == 3
    assert [line for line in done.stderr.splitlines() if "error" in line] == [
        f"mhaudit: error: model file {missing} does not exist. Check the path."]
    made, failed = json.loads(done.stdout)  # several targets: always the list, in order
    assert made["model"]["class"] == "MultiHeadAttention"
    assert failed == {"source": missing, "exit_code": 3,
                      "error": f"model file {missing} does not exist. Check the path."}
    failing = _run("report", TEXTBOOK, TEXTBOOK + ":make_large", "--fail-on", "warning")
    assert failing.exit_code == 1  # the textbook layout warns; worst of 1 and 0


def test_check_several_targets(tmp_path: Path) -> None:
    budget = tmp_path / "budget.toml"
    budget.write_text('[budget]\nmax_params = "20k"\n', encoding="utf-8")
    done = _run("check", TEXTBOOK, TEXTBOOK + ":make_large", "--budget", str(budget))
    assert done.exit_code == 1  # 16,640 fits 20k; 1,050,624 does not
    assert done.stdout.startswith("mhaudit: 2 models")
    body, overall = done.stdout.rstrip().rsplit("\n", 1)
    assert body.count("PASS:") == 1 and body.count("FAIL:") == 1
    assert overall == "FAIL: 2 models: 1 passed, 1 failed"
    data = json.loads(_run("check", TEXTBOOK, TEXTBOOK + ":make_large", "--budget",
                           str(budget), "-f", "json").stdout)
    assert [d["budget"]["passed"] for d in data] == [True, False]
    baseline = _run("check", TEXTBOOK, TEXTBOOK, "--baseline", str(tmp_path / "b.json"))
    assert baseline.exit_code == 2 and "several targets" in baseline.stderr


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_status_line_draws_a_bar_on_a_tty_only() -> None:
    tty = _Tty()
    with Status("mhaudit: m.py", stream=tty, interval=0.01) as status:
        status.measured(3, 10)
        assert "measuring [#######" in tty.getvalue() and "3/10" in tty.getvalue()
    assert tty.getvalue().endswith("\r\x1b[K")  # the line is cleared at the end
    log = io.StringIO()
    with Status("mhaudit: m.py", stream=log) as status:
        status.measured(3, 10)
        status.measured(10, 10)
    assert log.getvalue() == "mhaudit: m.py: measured 10 forwards\n"
