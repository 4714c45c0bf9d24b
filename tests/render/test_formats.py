"""The output-format registry: each command offers what its formats render; the CLI never
branches on a format name."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import click
import pytest

from mhaudit.cli.check_cmd import check_command
from mhaudit.cli.report_cmd import report_command
from mhaudit.cli.rules_cmd import rules
from mhaudit.cli.whatif_cmd import whatif as whatif_command
from mhaudit.data import LayoutSpec, WhatIf, WhatIfRow
from mhaudit.render import FORMATS, OutputFormat, formats_with
from mhaudit.render.rules.listing import rules_table
from mhaudit.render.style import RenderOptions

CLI = Path(__file__).resolve().parents[2] / "mhaudit" / "cli"


def _choices(command: click.Command, option: str = "fmt") -> set[str]:
    (param,) = [p for p in command.params if p.name == option]
    assert isinstance(param.type, click.Choice)
    return set(param.type.choices)


@pytest.mark.parametrize(("command", "kind"), [
    (report_command, "report"), (check_command, "checks"), (whatif_command, "whatif"),
    (rules, "rules"),
])
def test_each_command_offers_the_formats_that_render_its_result(
    command: click.Command, kind: str
) -> None:
    # whatif's --gpus sweep also renders markdown (mhaudit.render.whatif_parallel)
    extra = {"markdown"} if kind == "whatif" else set()
    assert _choices(command) == set(formats_with(kind)) | extra


def test_registry_is_keyed_by_name_with_a_suffix_each() -> None:
    assert all(isinstance(f, OutputFormat) and f.name == key and f.suffix
               and not f.suffix.startswith(".") for key, f in FORMATS.items())
    assert all(f.reports is not None for f in FORMATS.values() if f.report is not None)
    assert all(f.rule is not None for f in FORMATS.values() if f.rules is not None)
    assert [f.name for f in FORMATS.values() if f.terminal] == ["table"]
    assert {f.name for f in FORMATS.values() if f.machine_readable} == {"json", "junit", "sarif"}


@pytest.mark.parametrize("path", sorted(CLI.glob("*.py")), ids=lambda p: p.name)
def test_cli_never_compares_with_a_format_name(path: Path) -> None:
    names = set(FORMATS)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
            for part in parts:
                items = part.elts if isinstance(part, (ast.Tuple, ast.List, ast.Set)) else [part]
                texts = {i.value for i in items if isinstance(i, ast.Constant)}
                assert not texts & names, (path.name, node.lineno, ast.unparse(node))


def _row(heads: int, kv_heads: int) -> WhatIfRow:
    return WhatIfRow(heads, kv_heads, 64 // heads, heads == 8, 16_640, 16_640, 4_000_000,
                     500_000, 2_048 * heads, False, 256 * kv_heads, "flash", 64, 0.0, 1e-6,
                     12.5, "memory", ("MHA004",) if heads > 8 else ())


def test_whatif_json_keeps_the_fields_of_each_dataclass() -> None:
    spec = LayoutSpec(d_model=64, heads=8, kv_heads=8, seq_len=16)
    result = WhatIf(spec, "h100", (_row(8, 8), _row(16, 16)), (_row(8, 8), _row(8, 4)))
    render = FORMATS["json"].whatif
    assert render is not None
    data = json.loads(render(result, RenderOptions()))
    assert data["spec"] == json.loads(json.dumps(dataclasses.asdict(spec)))
    assert data["by_heads"] == json.loads(json.dumps([dataclasses.asdict(r)
                                                      for r in result.by_heads]))
    assert [(r["heads"], r["kv_heads"]) for r in data["rows"]] == [(8, 8), (8, 4), (16, 16)]
    table = FORMATS["table"].whatif
    assert table is not None
    assert table(result, RenderOptions()).splitlines()[-1].startswith("flags: the rule codes")


def test_rules_table_wraps_the_summary_to_the_width() -> None:
    from mhaudit.rules import REGISTRY

    text = rules_table(list(REGISTRY), RenderOptions(width=110))
    assert max(len(line) for line in text.splitlines()) <= 110
    assert len(text.splitlines()) > len(REGISTRY) + 2  # summaries wrap onto more lines
