"""``mhaudit rules``: the rule list and one rule's explanation, rendered from the rule objects."""

from __future__ import annotations

import json
from collections.abc import Sequence

from mhaudit.render.rules.text import render_rule_list, render_rule_text, rule_dict
from mhaudit.render.style import PLAIN, RenderOptions
from mhaudit.rules.base import Rule
from mhaudit.rules.docs import rule_page


def rules_table(rules: Sequence[Rule], options: RenderOptions = PLAIN) -> str:
    """One line per rule; the summary column wraps to fit ``options.width``."""
    return render_rule_list(rules, "table", options.width or 88)


def rules_markdown(rules: Sequence[Rule], options: RenderOptions = PLAIN) -> str:
    """The rule list as a GitHub markdown table."""
    return render_rule_list(rules, "markdown")


def rules_json(rules: Sequence[Rule], options: RenderOptions = PLAIN) -> str:
    """Every rule's declared fields as one JSON list."""
    return render_rule_list(rules, "json")


def rule_text(rule: Rule, options: RenderOptions = PLAIN) -> str:
    """One rule explained for the terminal."""
    return render_rule_text(rule, options)


def rule_markdown(rule: Rule, options: RenderOptions = PLAIN) -> str:
    """One rule's documentation page, as ``docs/rules/`` holds it."""
    return rule_page(rule)


def rule_json(rule: Rule, options: RenderOptions = PLAIN) -> str:
    """One rule's declared fields as JSON."""
    return json.dumps(rule_dict(rule), indent=2) + "\n"
