"""``mhaudit rules [CODE]``: list the rules or explain one, from the rule objects."""

from __future__ import annotations

import json
from typing import Any

import click
from tabulate import tabulate

from mhaudit.cli.common import fail
from mhaudit.errors import ConfigError, MhauditError
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
def rules(code: str | None, fmt: str) -> None:
    """List the rules, or explain one: mhaudit rules MHA005 (a code or a name)."""
    try:
        if code is None:
            if fmt == "json":
                click.echo(json.dumps([_as_dict(r) for r in REGISTRY], indent=2))
                return
            table = [(r.code, r.name, r.severity.value, r.summary) for r in REGISTRY]
            click.echo(tabulate(table, headers=("code", "name", "severity", "summary"),
                                maxcolwidths=[None, None, None, 60]))
            return
        rule = REGISTRY.get(code)
        if rule is None:
            raise ConfigError(f"unknown rule {code!r}", "Run `mhaudit rules` to list them.")
        click.echo(json.dumps(_as_dict(rule), indent=2) if fmt == "json" else rule_page(rule))
    except MhauditError as error:
        fail(error)
