"""``mhaudit check TARGET...``: the CI budget gate."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from mhaudit.cli.common import (
    errors_to_exit,
    model_options,
    options_from,
    rule_config_from,
    rule_options,
    write_output,
)
from mhaudit.cli.targets import audit_each, flagged_sweeps, render_options
from mhaudit.errors import ConfigError
from mhaudit.render.gate import CHECK_RENDERERS, Checked, markdown

FORMATS = tuple(CHECK_RENDERERS)

EXAMPLES = """\b
Examples:
  mhaudit check model.py --budget mhaudit-budget.toml
  mhaudit check model.py --baseline mhaudit-baseline.json --update-baseline
  mhaudit check model.py --baseline mhaudit-baseline.json --format github
  mhaudit check model.py --format sarif -o mhaudit.sarif
  mhaudit check model.py --format junit --output mhaudit-junit.xml
  mhaudit check a.py b.py --budget mhaudit-budget.toml       # worst verdict wins
"""


@click.command("check", epilog=EXAMPLES, short_help="Fail CI when models exceed a budget.")
@click.argument("targets", nargs=-1, required=True, metavar="TARGET...")
@click.option("--budget", "budget_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="TOML file with a [budget] table (default: the nearest "
              "pyproject.toml with [tool.mhaudit.budget]).")
@click.option("--baseline", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A previous JSON report to compare with (max_increase_percent).")
@click.option("--update-baseline", is_flag=True,
              help="Write this run's JSON report to --baseline instead of comparing with it.")
@model_options
@rule_options
@click.option("--format", "-f", "fmt", type=click.Choice(FORMATS), default="table",
              show_default=True, help="Output format.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the output here (atomically) instead of stdout.")
def check_command(targets: tuple[str, ...], budget_path: Path | None, baseline: Path | None,
                  update_baseline: bool, fmt: str, output: Path | None, **params: Any) -> None:
    """Fail (exit 1) when a TARGET is over its attention budget.

    TARGET is model.py[:NAME], pkg.module:NAME, or a transformers config.json.
    Exit codes: 0 within budget, 1 over budget or a failing flag, 2 bad
    configuration, 3 the model could not be loaded or traced; with several
    targets the worst one wins.
    """
    from mhaudit.gate.budget import (
        evaluate,
        load_baseline,
        load_budget,
        metric_values,
        write_baseline,
    )

    with errors_to_exit():
        if update_baseline and baseline is None:
            raise ConfigError("--update-baseline needs --baseline FILE",
                              "Name the JSON file to write, e.g. --baseline mhaudit-baseline.json.")
        if baseline is not None and len(targets) > 1:
            raise ConfigError("--baseline compares one model, and several targets were given",
                              "Run mhaudit check once per model, each with its own baseline.")
        budget = load_budget(budget_path)
        previous = load_baseline(baseline) if baseline is not None and not update_baseline else None
        rule_config = rule_config_from(params)
        given = options_from(params)
    from mhaudit.api import AuditOptions

    done, worst = audit_each(targets, lambda progress: AuditOptions(
        rule_config=rule_config, progress=progress, **given))
    items = []
    for target, report in done:
        outcome = evaluate(report, budget, previous)
        items.append(Checked(target, report, outcome, metric_values(report)))
    if items:
        sweeps = flagged_sweeps([c.report for c in items]) if fmt == "html" else ()
        options = render_options(fmt, False, output is None, sweeps)
        with errors_to_exit():
            write_output(CHECK_RENDERERS[fmt](items, options), output)
            if update_baseline and baseline is not None:
                write_baseline(items[0].data(), baseline)
                click.echo(f"mhaudit: wrote baseline {baseline}", err=True)
        if fmt == "github":
            _append_step_summary(markdown(items))
    from mhaudit.render.ci import verdict

    if output is not None or fmt in ("json", "junit", "sarif", "html"):
        for c in items:
            prefix = f"{c.target}: " if len(items) > 1 else ""
            click.echo(f"mhaudit: {prefix}{verdict(c.outcome)}", err=True)
    if any(not c.outcome.passed for c in items):
        worst = max(worst, 1)
    if worst:
        raise SystemExit(worst)


def _append_step_summary(text: str) -> None:
    """Append to the file GitHub names in GITHUB_STEP_SUMMARY, when it is set."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text + "\n")
    except OSError as exc:
        click.echo(f"mhaudit: warning: cannot write GITHUB_STEP_SUMMARY {path}: {exc}", err=True)
