"""``--format sarif`` and ``--format github``: valid SARIF 2.1.0, findings on the source line."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fixtures.reports import LAYER_CLASS, MODEL_LINE, hand_report

from mhaudit.cli import main
from mhaudit.render import render
from mhaudit.render.github import render_github
from mhaudit.render.sarif import sarif_log
from mhaudit.rules import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Path(__file__).resolve().parents[1] / "data" / "sarif-schema-2.1.0.json"
TEXTBOOK = "examples/textbook_mha.py"


def _validate(log: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())
    errors = sorted(validator.iter_errors(log), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:5])


def _cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


@pytest.fixture(autouse=True)
def _in_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # locations are relative to the working tree


def test_hand_report_sarif_is_valid_and_complete() -> None:
    log = json.loads(render(hand_report(), "sarif"))
    _validate(log)
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    driver = log["runs"][0]["tool"]["driver"]
    assert [r["id"] for r in driver["rules"]] == [r.code for r in REGISTRY]
    for rule in driver["rules"]:
        assert rule["name"] and rule["shortDescription"]["text"]
        assert rule["fullDescription"]["text"]
        assert rule["helpUri"].endswith(f"docs/rules/{rule['id']}.md")
        assert rule["defaultConfiguration"]["level"] in ("error", "warning", "note")
    results = log["runs"][0]["results"]
    assert len(results) == 5  # MHA005 and MHA010 on two layers, MHA007 on the model
    by_rule = {(r["ruleId"], r["properties"]["block"]): r for r in results}
    layer = by_rule[("MHA005", "layers.0.attn")]
    assert layer["level"] == "warning"
    place = layer["locations"][0]["physicalLocation"]
    assert place["artifactLocation"]["uri"] == LAYER_CLASS.path
    assert place["region"]["startLine"] == LAYER_CLASS.line
    model = by_rule[("MHA007", None)]["locations"][0]["physicalLocation"]
    assert model["region"]["startLine"] == MODEL_LINE.line
    assert by_rule[("MHA010", "layers.1.attn")]["level"] == "note"
    prints = [r["partialFingerprints"]["mhaudit/v1"] for r in results]
    assert len(set(prints)) == len(prints)


def test_fingerprints_ignore_numbers_and_lines() -> None:
    first = sarif_log([hand_report()])["runs"][0]["results"][0]
    report = hand_report()
    moved = report.blocks[0]
    import dataclasses

    from mhaudit.data import SourceLocation

    shifted = dataclasses.replace(moved, location=SourceLocation("models/tiny.py", 99))
    flag = dataclasses.replace(report.findings[0], message="other numbers")
    report = dataclasses.replace(report, blocks=(shifted, *report.blocks[1:]),
                                 findings=(flag, *report.findings[1:]))
    second = sarif_log([report])["runs"][0]["results"][0]
    assert first["partialFingerprints"] == second["partialFingerprints"]
    assert second["locations"][0]["physicalLocation"]["region"]["startLine"] == 99


def test_cli_sarif_points_into_the_attention_class() -> None:
    from examples_textbook import MultiHeadAttention

    done = _cli("report", TEXTBOOK, "--format", "sarif")
    assert done.exit_code == 0, done.output
    log = json.loads(done.stdout)
    _validate(log)
    _, line = inspect.getsourcelines(MultiHeadAttention)
    results = log["runs"][0]["results"]
    assert {r["ruleId"] for r in results} == {"MHA004", "MHA005", "MHA010"}
    for result in results:
        place = result["locations"][0]["physicalLocation"]
        assert place["artifactLocation"] == {"uri": TEXTBOOK, "uriBaseId": "%SRCROOT%"}
        assert place["region"]["startLine"] == line
    again = json.loads(_cli("report", TEXTBOOK, "--format", "sarif").stdout)
    assert [r["partialFingerprints"] for r in again["runs"][0]["results"]] == \
        [r["partialFingerprints"] for r in results]


def test_cli_github_annotations_carry_file_and_line() -> None:
    from examples_textbook import MultiHeadAttention

    done = _cli("report", TEXTBOOK, "--format", "github")
    assert done.exit_code == 0, done.output
    _, line = inspect.getsourcelines(MultiHeadAttention)
    lines = done.stdout.splitlines()
    assert len(lines) == 4 and lines[-1] == "mhaudit: 3 finding(s)"
    for text in lines[:3]:
        assert text.startswith(f"::warning file={TEXTBOOK},line={line},title=mhaudit MHA") or \
            text.startswith(f"::notice file={TEXTBOOK},line={line},title=mhaudit MHA010")


def test_hand_report_github_lines() -> None:
    lines = render_github(hand_report()).splitlines()
    assert lines[0] == (
        "::warning file=models/tiny.py,line=12,title=mhaudit MHA005 materialized-attention-scores"
        "::layers.{0..1}.attn (2 blocks): eager softmax(QKᵀ) materialises the 1×4×128×128 "
        "score matrix: 128 KiB "
        "(2 B per score). Fix: Call F.scaled_dot_product_attention(q, k, v, is_causal=True).")
    assert lines[2].startswith("::warning file=models/tiny.py,line=88,title=mhaudit MHA007")
    assert lines[3] == "mhaudit: 5 finding(s), 3 annotation(s)"


def test_library_class_falls_back_to_the_model_file(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    model = tmp_path / "gpt.py"
    model.write_text(
        "from transformers import GPT2Config, GPT2Model\n\n\n"
        "def build_model():\n"
        "    return GPT2Model(GPT2Config(n_layer=1, n_embd=64, n_head=8, vocab_size=64))\n",
        encoding="utf-8")
    done = _cli("report", str(model), "--format", "sarif", "--seq-len", "16")
    assert done.exit_code == 0, done.output
    log = json.loads(done.stdout)
    _validate(log)
    results = log["runs"][0]["results"]
    assert results  # d_k = 64 / 8 = 8 is below every kernel's smallest head dim (MHA004)
    for result in results:
        place = result["locations"][0]["physicalLocation"]
        assert place["artifactLocation"]["uri"] == model.resolve().as_posix()
        assert place["region"]["startLine"] == 4  # def build_model()


def test_check_sarif_adds_budget_breaches_at_the_model_line(tmp_path: Path) -> None:
    from examples_textbook import build_model

    budget = tmp_path / "budget.toml"
    budget.write_text('[budget]\nmax_params = "10k"\n', encoding="utf-8")
    done = _cli("check", TEXTBOOK, "--budget", str(budget), "--format", "sarif")
    assert done.exit_code == 1
    log = json.loads(done.stdout)
    _validate(log)
    rules = [r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]]
    assert rules[-1] == "MHAB001"
    (breach,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "MHAB001"]
    assert breach["level"] == "error" and "params_total 16,640 exceeds" in breach["message"]["text"]
    place = breach["locations"][0]["physicalLocation"]
    assert place["artifactLocation"]["uri"] == TEXTBOOK
    assert place["region"]["startLine"] == inspect.getsourcelines(build_model)[1]
    assert breach["ruleIndex"] == len(rules) - 1


def test_check_github_flags_carry_file_and_line(tmp_path: Path) -> None:
    from examples_textbook import MultiHeadAttention

    budget = tmp_path / "budget.toml"
    budget.write_text('[budget]\nmax_params = "20k"\nfail_on = "warning"\n', encoding="utf-8")
    done = _cli("check", TEXTBOOK, "--budget", str(budget), "--format", "github")
    assert done.exit_code == 1
    line = inspect.getsourcelines(MultiHeadAttention)[1]
    flags = [text for text in done.stdout.splitlines() if "title=mhaudit MHA" in text]
    assert len(flags) == 2  # MHA004 and MHA005 are warnings; MHA010 is info
    assert all(f.startswith(f"::warning file={TEXTBOOK},line={line},title=") for f in flags)
