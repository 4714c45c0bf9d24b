"""CI renderers: golden files, valid JUnit XML, GitHub escaping, value formatting.

Regenerate the golden files with ``pytest --regen-golden``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from mhaudit.data import Finding, GateOutcome, Severity
from mhaudit.gate.budget import evaluate_metrics, parse_budget
from mhaudit.render.gate import (
    budget_to_dict,
    format_value,
    render_github,
    render_junit,
    render_markdown,
    render_table,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden"

# d = 96 against a d = 64 baseline: 4·96² + 4·96 = 37,248 vs 16,640 parameters.
BASELINE: dict[str, float | None] = {
    "params_total": 16_640, "attention_params": 16_640, "flops": 11_223_040,
    "kv_cache_bytes_per_token": 256, "peak_memory_bytes": 1_500_000, "latency_ms": None,
}
GROWN: dict[str, float | None] = {
    "params_total": 37_248, "attention_params": 37_248, "flops": 24_944_640,
    "kv_cache_bytes_per_token": 384, "peak_memory_bytes": 2_250_000, "latency_ms": None,
}
FLAG = Finding(
    "MHA006", "kv-heads-do-not-divide-heads", Severity.ERROR,
    "12 query heads cannot share 5 KV heads evenly", "Use a KV head count that divides 12.",
    "layers.0.attn",
)


def failing_outcome() -> GateOutcome:
    budget = parse_budget({
        "max_params": "20k",
        "max_flops": {"limit": "20M", "severity": "warning"},
        "max_kv_cache_bytes_per_token": "1KiB",
        "max_latency_ms": 5,
        "max_increase_percent": {"default": 10, "kv_cache_bytes_per_token": 60},
        "fail_on": "error",
    }, "mhaudit-budget.toml")
    return evaluate_metrics(GROWN, budget, BASELINE, [FLAG])


def passing_outcome() -> GateOutcome:
    budget = parse_budget({"max_params": 20000, "max_kv_cache_bytes_per_token": "1KiB"})
    return evaluate_metrics(BASELINE, budget)


def _json(outcome: GateOutcome) -> str:
    return json.dumps(budget_to_dict(outcome, GROWN), indent=2) + "\n"


RENDERERS: dict[str, Callable[[GateOutcome], str]] = {
    "table.txt": lambda o: render_table(o, title="mhaudit check model.py"),
    "github.txt": render_github,
    "summary.md": render_markdown,
    "junit.xml": render_junit,
    "budget.json": _json,
}


@pytest.mark.parametrize("case", ["fail", "pass"])
@pytest.mark.parametrize("name", sorted(RENDERERS))
def test_golden(name: str, case: str, regen_golden: bool) -> None:
    outcome = failing_outcome() if case == "fail" else passing_outcome()
    text = RENDERERS[name](outcome)
    path = GOLDEN / f"ci_{case}_{name}"
    if regen_golden:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def test_junit_is_valid_xml_with_one_case_per_metric_and_flag() -> None:
    root = ET.fromstring(render_junit(failing_outcome()))
    assert root.tag == "testsuites"
    budget, flags = root.findall("testsuite")
    names = [case.get("name") for case in budget.findall("testcase")]
    assert names == ["params_total", "attention_params", "flops",
                     "kv_cache_bytes_per_token", "peak_memory_bytes", "latency_ms"]
    failed = [c.get("name") for c in budget.findall("testcase") if c.find("failure") is not None]
    # flops is only a warning; the rest exceed an error-severity budget or baseline.
    assert failed == ["params_total", "attention_params", "peak_memory_bytes", "latency_ms"]
    failure = budget.find("testcase/failure")
    assert failure is not None
    assert "params_total 37,248 exceeds" in (failure.get("message") or "")
    assert budget.get("tests") == "6"
    assert budget.get("failures") == "4"
    (flag_case,) = flags.findall("testcase")
    assert flag_case.get("name") == "MHA006 kv-heads-do-not-divide-heads (layers.0.attn)"
    assert root.get("failures") == "5"


def test_junit_passing_has_no_failures() -> None:
    root = ET.fromstring(render_junit(passing_outcome()))
    assert root.get("failures") == "0"
    assert root.findall(".//failure") == []


def test_github_annotations() -> None:
    lines = render_github(failing_outcome()).splitlines()
    assert lines[0].startswith("::error title=mhaudit budget params_total::params_total 37,248")
    assert any(line.startswith("::warning title=mhaudit budget flops::") for line in lines)
    assert any(line.startswith("::error title=mhaudit MHA006") for line in lines)
    assert lines[-1].startswith("FAIL:")
    assert render_github(passing_outcome()).startswith("PASS:")


def test_github_escapes_newlines_and_percent() -> None:
    flag = Finding("X1", "a:b,c", Severity.ERROR, "50% of\nit", "", None)
    outcome = GateOutcome((), (flag,), "error")
    line = render_github(outcome).splitlines()[0]
    assert line == "::error title=mhaudit X1 a%3Ab%2Cc::X1 a:b,c [error]: 50%25 of%0Ait"


def test_budget_json_fields() -> None:
    data = budget_to_dict(failing_outcome(), GROWN)
    assert data["passed"] is False
    assert data["fail_on"] == "error"
    first = data["results"][0]
    assert set(first) == {"metric", "actual", "limit", "baseline", "delta_percent", "severity",
                          "passed", "message"}
    assert data["failing_flags"][0]["code"] == "MHA006"
    assert data["metrics"]["params_total"] == 37_248


@pytest.mark.parametrize(
    ("metric", "value", "text"),
    [
        ("params_total", 16_640, "16,640"),
        ("params_total", 70_553_706_496, "70,553,706,496"),
        ("flops", 640, "640 FLOP"),
        ("flops", 604_730_000_000_000, "605 TFLOP"),  # the report's 3 significant digits
        ("flops", 2_000_000_000, "2 GFLOP"),
        ("kv_cache_bytes_per_token", 327_680, "320 KiB"),
        ("peak_memory_bytes", 2 * 1024**3, "2 GiB"),
        ("kv_cache_bytes_per_token", 512, "512 B"),
        ("latency_ms", 12.345, "12.3 ms"),
        ("params_total", -3_360, "-3,360"),
        ("flops", None, "n/a"),
    ],
)
def test_format_value(metric: str, value: float | None, text: str) -> None:
    assert format_value(metric, value) == text


def test_renderers_do_not_import_torch() -> None:
    code = "import sys, mhaudit.render.gate, mhaudit.gate.budget; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("width", [60, 80, 100])
def test_check_table_fits_the_terminal_with_status_kept(width: int) -> None:
    """Like ``report``: columns given up in a stated order, long lines wrapped; the metric,
    its value, its limit and whether it passed stay."""
    from mhaudit.render.gate import render_table

    title = "mhaudit check examples/textbook_mha.py (input query 32×10×64; key 32×10×64; " \
            "value 32×10×64)"
    text = render_table(failing_outcome(), title=title, width=width)
    assert max(len(line) for line in text.splitlines()) <= width, text
    for word in ("params_total", "kv_cache_bytes_per_token", "Over budget:", "MHA006"):
        assert word in text
    if width >= 80:
        header = next(line for line in text.splitlines() if line.startswith("metric"))
        assert header.split()[:3] == ["metric", "actual", "limit"] and "status" in header
