"""``mhaudit rules [CODE]``: list the rules or explain one, from the rule objects."""

from __future__ import annotations

import json
from typing import Any

import click
from tabulate import tabulate

from mhaudit.cli.common import errors_to_exit, verbose_option, write_output
from mhaudit.errors import ConfigError
from mhaudit.rules import REGISTRY, Rule
from mhaudit.rules.docs import rule_page


def _as_dict(rule: Rule) -> dict[str, Any]:
    return {
        "code": rule.code, "name": rule.name, "severity": rule.severity.value,
        "summary": rule.summary, "why": rule.why, "example": rule.example, "fix": rule.fix,
        "thresholds": {t.key: {"default": t.default, "description": t.description}
                       for t in rule.thresholds},
    }


@click.command("rules")
@click.argument("code", required=False)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="Output format.")
@verbose_option
def rules(code: str | None, fmt: str, verbose: bool) -> None:
    """List the rules, or explain one: mhaudit rules MHA005 (a code or a name)."""
    with errors_to_exit(verbose):
        if code is None:
            if fmt == "json":
                text = json.dumps([_as_dict(r) for r in REGISTRY], indent=2)
            else:
                table = [(r.code, r.name, r.severity.value, r.summary) for r in REGISTRY]
                text = tabulate(table, headers=("code", "name", "severity", "summary"),
                                maxcolwidths=[None, None, None, 60])
        else:
            rule = REGISTRY.get(code)
            if rule is None:
                raise ConfigError(f"unknown rule {code!r}", "Run `mhaudit rules` to list them.")
            text = json.dumps(_as_dict(rule), indent=2) if fmt == "json" else rule_page(rule)
        write_output(text + "\n", None)
