"""The rules for the terminal and machines, rendered from the rule objects themselves."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from mhaudit.cli import main
from mhaudit.render.rules.text import render_rule_list, render_rule_text, rule_dict
from mhaudit.render.style import RenderOptions
from mhaudit.rules import REGISTRY


def _words(text: str) -> list[str]:
    return text.replace("`", "").split()


def test_rule_text_shows_every_field_of_the_object() -> None:
    for rule in REGISTRY:
        text = render_rule_text(rule, RenderOptions(width=80))
        assert text.splitlines()[:2] == [f"{rule.code}: {rule.name}", "=" * len(
            f"{rule.code}: {rule.name}")]
        assert f"Since: {rule.since}" in text and rule.severity.value in text
        flat = " ".join(text.split())
        for heading, body in rule.sections():
            assert heading in text
            assert " ".join(_words(body)) in flat
        for ref in rule.references:
            assert " ".join(ref.split()) in flat
        for spec in rule.numbers:
            assert spec.key in text
        assert "`" not in text and "**" not in text and "```" not in text
        assert all(len(line) <= 80 for line in text.splitlines() if not line.startswith("    "))


def test_rule_text_follows_the_object_not_a_page() -> None:
    rule = REGISTRY.get("MHA007")
    assert rule is not None
    edited = replace(rule, known_problems="A problem only this copy has.",
                     references=("Someone 2031, a paper",))
    text = render_rule_text(edited)
    assert "A problem only this copy has." in text and "- Someone 2031, a paper" in text


def test_rule_list_formats() -> None:
    rules = list(REGISTRY)
    table = render_rule_list(rules, "table", width=100)
    assert all(r.code in table and r.since in table for r in rules)
    assert max(len(line) for line in table.splitlines()) <= 100
    markdown = render_rule_list(rules, "markdown")
    assert markdown.startswith("| code ") and "| MHA010 " in markdown
    listed = json.loads(render_rule_list(rules, "json"))
    assert [r["code"] for r in listed] == [r.code for r in rules]
    assert listed == [rule_dict(r) for r in rules]
    mha003 = rule_dict(rules[2])
    assert mha003["since"] == "0.1.0" and mha003["references"]
    assert mha003["numbers"]["scores_bytes"]["unit"] == "bytes"
    assert mha003["numbers"]["scores_bytes"]["when"]


def _rows(section: list[str]) -> list[list[str]]:
    """A table or record section's rows: a line starting at the indent begins one, deeper
    lines continue it."""
    rows: list[list[str]] = []
    for line in section:
        if line.startswith("  ") and not line.startswith("   ") and not line.startswith("  --"):
            rows.append([line])
        elif line.startswith("   ") and rows:
            rows[-1].append(line)
    return rows


@pytest.mark.parametrize("width", [60, 80])
def test_rule_pages_fit_narrow_terminals_without_tall_rows(width: int) -> None:
    for rule in REGISTRY:
        done = CliRunner().invoke(main, ["rules", rule.code],
                                  env={"COLUMNS": str(width), "NO_COLOR": "1"})
        assert done.exit_code == 0
        lines = done.stdout.splitlines()
        assert max(len(line) for line in lines) <= width, rule.code
        numbers = lines[lines.index("Numbers") + 4:lines.index("Configuration")]
        config = lines[lines.index("Configuration") + 2:]
        thresholds = config[:config.index("")] if rule.thresholds else []
        for section, short in ((numbers, "unit: "), (thresholds, "default: ")):
            table = bool(section) and section[0].split()[0] in ("key", "threshold")
            for row in _rows(section[1:] if table else section):
                if table:  # a table row wraps its last field to 3 lines at most
                    assert len(row) <= 3, (rule.code, width, row)
                else:  # a record keeps its short fields on its first line
                    assert short in row[0], (rule.code, width, row)
        for spec in rule.numbers:  # every key whole, at the start of its row
            assert any(row[0].split()[0] == spec.key for row in _rows(numbers)), spec.key


def test_a_row_that_would_wrap_tall_turns_the_table_into_records() -> None:
    rule = REGISTRY.get("MHA004")
    assert rule is not None
    narrow = render_rule_text(rule, RenderOptions(width=60))
    assert "  kernel_head_dim  unit: elements\n      the compiled head dim" in narrow
    wide = render_rule_text(rule, RenderOptions(width=100))
    assert "unit: " not in wide and "  key " in wide
