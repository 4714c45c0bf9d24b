"""Hardening, third pass: each failure class of the sweep, by the mechanism that closes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_helpers import assert_one_error, invoke, model_file

from mhaudit.errors import MAX_LINE_CHARS

STRANGE = "a\ud800\u202eb\x07"
"""A module name with a lone surrogate, a right-to-left override and a BEL."""

NAMED = f'''
class Named(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module({STRANGE!r}, Attention())

    def forward(self, x):
        return getattr(self, {STRANGE!r})(x)


def build_model():
    return Named()
'''


@pytest.mark.parametrize("fmt", ["table", "json", "markdown", "github", "sarif", "html"])
def test_any_string_renders_in_every_format(tmp_path: Path, fmt: str) -> None:
    model = model_file(tmp_path, NAMED)
    out = tmp_path / f"out.{fmt}"
    run = invoke("report", model, "--format", fmt, "--output", out)
    assert run.code == 0, run.stderr
    text = out.read_text(encoding="utf-8")  # valid UTF-8: no lone surrogate got through
    assert "\u202e" not in text and "\x07" not in text
    if fmt in ("json", "sarif"):
        json.loads(text)


def test_echoed_user_text_is_cut_with_a_marker(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "x" * 200_000}), encoding="utf-8")
    run = invoke("report", config)
    assert_one_error(run, 2 if run.code == 2 else 3, "model_type")
    assert all(len(line) <= MAX_LINE_CHARS for line in run.stderr.splitlines())
    assert "…" in run.stderr


def test_a_usage_error_echoing_a_huge_value_stays_one_short_line(model: Path) -> None:
    run = invoke("report", model, "--seq-len", "9" * 5000)
    assert_one_error(run, 2)
    assert all(len(line) <= MAX_LINE_CHARS for line in run.stderr.splitlines())


@pytest.mark.parametrize("args", [
    ("--seq-len", str(2**40)), ("--batch-size", str(2**40)),
    ("--batch-size", "65536", "--seq-len", "65536"), ("--input-shape", f"1x{2**40}x32"),
])
def test_sizes_torch_would_overflow_on_are_refused_naming_the_limit(
        model: Path, args: tuple[str, ...]) -> None:
    assert_one_error(invoke("report", model, *args), 2, "a traced input takes")


def test_a_huge_length_after_the_first_is_still_costed(model: Path) -> None:
    run = invoke("report", model, "--seq-len", f"128,{2**40}", "--format", "json")
    assert run.code == 0, run.stderr


def test_timing_a_layout_beyond_the_traced_limit_is_refused() -> None:
    run = invoke("whatif", "--d-model", "32", "--heads", "4", "--seq-len", str(2**40),
                 "--device", "cpu")
    assert_one_error(run, 2, "16,777,216")
