"""``mhaudit check TARGET``: the CI budget gate."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from mhaudit.api import AuditOptions
from mhaudit.cli.common import (
    audit_quietly,
    errors_to_exit,
    model_options,
    options_from,
    rule_config_from,
    rule_options,
    write_output,
)
from mhaudit.cli.phase_options import phase_options, phase_options_from
from mhaudit.errors import ConfigError
from mhaudit.gate.budget import (
    evaluate,
    load_baseline,
    load_budget,
    metric_values,
    phases_needed,
    write_baseline,
)
from mhaudit.render.ci import (
    budget_to_dict,
    render_github,
    render_junit,
    render_markdown,
    render_table,
    verdict,
)

FORMATS = ("table", "json", "github", "junit", "markdown")


@click.command("check")
@click.argument("target")
@click.option("--budget", "budget_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="TOML file with a [budget] table (default: the nearest "
              "pyproject.toml with [tool.mhaudit.budget]).")
@click.option("--baseline", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A previous JSON report to compare with (max_increase_percent).")
@click.option("--update-baseline", is_flag=True,
              help="Write this run's JSON report to --baseline instead of comparing with it.")
@model_options
@phase_options
@rule_options
@click.option("--format", "-f", "fmt", type=click.Choice(FORMATS), default="table",
              show_default=True, help="Output format.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the output here (atomically) instead of stdout.")
def check_command(target: str, budget_path: Path | None, baseline: Path | None,
                  update_baseline: bool, fmt: str, output: Path | None, **params: Any) -> None:
    """Fail (exit 1) when TARGET is over its attention budget.

    TARGET is model.py[:NAME], pkg.module:NAME, or a transformers config.json.
    Exit codes: 0 within budget, 1 over budget or a failing flag, 2 bad
    configuration, 3 the model could not be loaded or traced.
    """
    with errors_to_exit():
        if update_baseline and baseline is None:
            raise ConfigError("--update-baseline needs --baseline FILE",
                              "Name the JSON file to write, e.g. --baseline mhaudit-baseline.json.")
        budget = load_budget(budget_path)
        previous = load_baseline(baseline) if baseline is not None and not update_baseline else None
        rule_config = rule_config_from(params)
        phases = phase_options_from(params)
        for phase in phases_needed(budget):  # a budget on a phase metric runs that phase
            phases[phase] = True
        options = AuditOptions(rule_config=rule_config, **phases, **options_from(params))
        report = audit_quietly(target, options)
        outcome = evaluate(report, budget, previous)
        data = {**report.to_dict(), "budget": budget_to_dict(outcome, metric_values(report))}
        if fmt == "json":
            text = json.dumps(data, indent=2) + "\n"
        elif fmt == "github":
            text = render_github(outcome)
        elif fmt == "junit":
            text = render_junit(outcome)
        elif fmt == "markdown":
            text = render_markdown(outcome, title=f"mhaudit budget: {target}")
        else:
            text = render_table(outcome, title=f"mhaudit check {target}")
        write_output(text, output)
        if update_baseline and baseline is not None:
            write_baseline(data, baseline)
            click.echo(f"mhaudit: wrote baseline {baseline}", err=True)
        if fmt == "github":
            _append_step_summary(render_markdown(outcome, title=f"mhaudit budget: {target}"))
    if output is not None or fmt in ("json", "junit"):
        click.echo(f"mhaudit: {verdict(outcome)}", err=True)
    if not outcome.passed:
        raise SystemExit(1)


def _append_step_summary(markdown: str) -> None:
    """Append to the file GitHub names in GITHUB_STEP_SUMMARY, when it is set."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(markdown + "\n")
    except OSError as exc:
        click.echo(f"mhaudit: warning: cannot write GITHUB_STEP_SUMMARY {path}: {exc}", err=True)
