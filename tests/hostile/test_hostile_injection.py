"""Names from the model (module and class names) cannot inject into any output format."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hostile_helpers import invoke, model_file

EVIL = "evil\\n::error::pwned <b>&x\\x1b[31m\\x0bq"
"""A module and class name with a newline, a workflow command, HTML, ESC and vertical tab."""

BODY = f'''
NAME = "{EVIL}"
Evil = type(NAME, (Attention,), {{}})


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module(NAME, Evil())

    def forward(self, x):
        return getattr(self, NAME)(x)


def build_model():
    return Model()
'''


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return model_file(tmp_path, BODY)


def _clean_lines(text: str) -> None:
    assert "\x1b" not in text and "\x0b" not in text
    for line in text.splitlines():
        assert not line.lstrip().startswith("::"), line


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_report_formats_show_names_escaped(model: Path, fmt: str) -> None:
    run = invoke("report", model, "-f", fmt)
    assert run.code == 0, run.stderr
    _clean_lines(run.stdout)
    assert "evil\\n" in run.stdout  # shown, not executed
    if fmt == "markdown":  # raw HTML only inside the fenced block, where it is literal text
        outside = run.stdout.split("```")[::2]
        assert run.stdout.count("```") == 2
        assert all("<b>" not in part for part in outside)


@pytest.fixture
def budget(tmp_path: Path) -> Path:
    path = tmp_path / "budget.toml"
    path.write_text('[budget]\nmax_params = "1k"\nfail_on = "warning"\n', encoding="utf-8")
    return path


def test_junit_is_valid_xml(model: Path, budget: Path) -> None:
    run = invoke("check", model, "--budget", budget, "-f", "junit")
    assert run.code == 1, run.stderr
    root = ET.fromstring(run.stdout.encode("utf-8"))  # raises on invalid XML characters
    names = [case.get("name") or "" for case in root.iter("testcase")]
    assert any("pwned" in name for name in names)


def test_check_table_and_markdown_cannot_start_workflow_commands(model: Path,
                                                                  budget: Path) -> None:
    for fmt in ("table", "markdown"):
        run = invoke("check", model, "--budget", budget, "-f", fmt)
        assert run.code == 1, run.stderr
        _clean_lines(run.stdout)


def test_github_annotations_and_job_summary(model: Path, budget: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    run = invoke("check", model, "--budget", budget, "-f", "github")
    assert run.code == 1, run.stderr
    commands = [line for line in run.stdout.splitlines() if line.startswith("::")]
    assert commands and all(line.startswith(("::error ", "::warning ", "::notice "))
                            for line in commands)
    assert all("\n" not in line and "%0A" in line for line in commands if "pwned" in line)
    text = summary.read_text(encoding="utf-8")
    assert "<b>" not in text and "&lt;b&gt;" in text
    _clean_lines(text)


def test_error_lines_show_control_characters_escaped(tmp_path: Path) -> None:
    model = model_file(tmp_path, "def build_model():\n"
                                 "    raise ValueError('bad\\x1b[2J\\rname')\n", name="esc.py")
    run = invoke("report", model)
    assert run.code == 3
    assert "\x1b" not in run.stderr and "\r" not in run.stderr
    assert "\\x1b[2J" in run.stderr
