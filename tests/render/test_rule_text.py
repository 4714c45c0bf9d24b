"""The rules for the terminal and machines, rendered from the rule objects themselves."""

from __future__ import annotations

import json
from dataclasses import replace

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
