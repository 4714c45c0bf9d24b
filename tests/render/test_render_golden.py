"""Goldens: every renderer on a hand-written report, and the bundled examples end to end.

Rewrite them with ``pytest --regen-golden``. The renderer goldens start from
``fixtures.reports.hand_report()``, so only a renderer change can move them; the
end-to-end goldens also check that the per-block figures add up to the totals.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from fixtures.reports import hand_report

from mhaudit.api import audit
from mhaudit.data import Report
from mhaudit.render import FORMATS, RENDERERS, render, render_reports
from mhaudit.render.style import RenderOptions

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parents[1] / "golden"
EXAMPLES = ("textbook_mha", "llama_gqa", "encoder_decoder")
SUFFIX = {"table": "txt", "markdown": "md", "json": "json", "github": "github.txt",
          "sarif": "sarif", "html": "html"}


def _stable(text: str, fmt: str) -> str:
    """The version moves with every release; goldens hold a placeholder."""
    from mhaudit import __version__

    if fmt == "json":
        data = json.loads(text)
        for item in data if isinstance(data, list) else [data]:
            item["tool"]["version"] = "<version>"
        return json.dumps(data, indent=2) + "\n"
    return text.replace(f'"version": "{__version__}"', '"version": "<version>"').replace(
        f'"semanticVersion": "{__version__}"', '"semanticVersion": "<version>"')


def _check(path: Path, text: str, regen: bool) -> None:
    if regen:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing {path}; run pytest --regen-golden"
    assert text == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_renderer_golden_from_a_hand_written_report(fmt: str, regen_golden: bool) -> None:
    text = _stable(render(hand_report(), fmt), fmt)
    _check(GOLDEN / f"hand.{SUFFIX[fmt]}", text, regen_golden)


def test_table_golden_fitted_to_80_columns(regen_golden: bool) -> None:
    text = render(hand_report(), "table", RenderOptions(width=80))
    assert max(len(line) for line in text.splitlines()) <= 80
    _check(GOLDEN / "hand_80.txt", text, regen_golden)


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_summary_across_models_golden(fmt: str, regen_golden: bool) -> None:
    text = render_reports([hand_report(), hand_report()], fmt, RenderOptions(width=100))
    _check(GOLDEN / f"hand_many.{SUFFIX[fmt]}", text, regen_golden)


def test_every_renderer_has_a_golden_suffix() -> None:
    assert set(RENDERERS) == set(SUFFIX)
    assert all(SUFFIX[name].endswith(FORMATS[name].suffix) for name in RENDERERS)


def _example(name: str) -> ModuleType:
    path = ROOT / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"golden_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _report(name: str) -> Report:
    module = _example(name)
    with torch.device("meta"):
        model = module.build_model()
        inputs = module.example_inputs()
    return audit(model, inputs, source=f"examples/{name}.py")


def _assert_sums(report: Report, data: dict[str, object]) -> None:
    """Per-block figures add up to the totals, in the report and in its JSON."""
    totals = report.totals
    assert sum(b.flops.total for b in report.blocks) == totals.attention_flops
    assert sum(b.memory.kv_cache_bytes_per_token for b in report.blocks) == \
        totals.kv_cache_bytes_per_token
    assert sum(g.count for g in report.groups) == totals.num_blocks == len(report.blocks)
    shared = {p.weight for b in report.blocks for p in (b.layout.q, b.layout.k, b.layout.v,
                                                          b.layout.o) if p is not None}
    if len(shared) == 4 * len(report.blocks):  # no weight shared between blocks or roles
        assert sum(b.params.total for b in report.blocks) == totals.attention_params
    for b in report.blocks:
        f = b.flops
        assert f.total == (f.q_proj + f.k_proj + f.v_proj + f.scores + f.softmax + f.context
                           + f.o_proj)
        assert b.params.total == b.params.textbook + sum(d.params for d in b.params.deviations)
    blocks = data["blocks"]
    assert isinstance(blocks, list)
    json_totals = data["totals"]
    assert isinstance(json_totals, dict)
    assert sum(b["flops"]["total"] for b in blocks) == json_totals["attention_flops"]
    assert sum(b["memory"]["kv_cache_bytes_per_token"] for b in blocks) == \
        json_totals["kv_cache_bytes_per_token"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_end_to_end(name: str, regen_golden: bool) -> None:
    report = _report(name)
    data = json.loads(render(report, "json"))
    _assert_sums(report, data)
    table = render(report, "table", RenderOptions(width=100))
    assert max(len(line) for line in table.splitlines()) <= 100
    for fmt, text in (("table", table), ("markdown", render(report, "markdown")),
                      ("json", render(report, "json"))):
        _check(GOLDEN / f"{name}.{SUFFIX[fmt]}", _stable(text, fmt), regen_golden)
