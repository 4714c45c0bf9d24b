"""Every output format has a golden file; rewrite them with ``pytest --regen-golden``."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from mhaudit.api import audit
from mhaudit.data import Report
from mhaudit.render import RENDERERS, render

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parents[1] / "golden"
EXAMPLES = ("textbook_mha", "llama_gqa", "encoder_decoder")
SUFFIX = {"table": "txt", "markdown": "md", "json": "json"}


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


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
@pytest.mark.parametrize("name", EXAMPLES)
def test_renderer_matches_golden(name: str, fmt: str, regen_golden: bool) -> None:
    text = render(_report(name), fmt)
    if fmt == "json":
        data = json.loads(text)
        data["tool"]["version"] = "<version>"
        text = json.dumps(data, indent=2) + "\n"
    path = GOLDEN / f"{name}.{SUFFIX[fmt]}"
    if regen_golden:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing {path}; run pytest --regen-golden"
    assert text == path.read_text(encoding="utf-8")


def test_every_renderer_has_a_golden_suffix() -> None:
    assert set(RENDERERS) == set(SUFFIX)
