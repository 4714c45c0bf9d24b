"""``mhaudit check TARGET``: the CI budget gate."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from mhaudit.api import AuditOptions
from mhaudit.atomic import OutputPath, write_texts_atomic
from mhaudit.cli.common import (
    audit_quietly,
    errors_to_exit,
    model_options,
    options_from,
    output_path,
    rule_config_from,
    rule_options,
    say,
    warn_unused_shape_options,
    write_output,
)
from mhaudit.errors import ConfigError
from mhaudit.gate.baseline import baseline_text, check_same_model, load_baseline_report
from mhaudit.gate.budget import check_budget_applies, evaluate, load_budget, metric_values
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
@click.option("--allow-other-model", is_flag=True,
              help="Compare with a baseline recorded for a different model source or class.")
@model_options
@rule_options
@click.option("--format", "-f", "fmt", type=click.Choice(FORMATS), default="table",
              show_default=True, help="Output format.")
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None,
              help="Write the output here (atomically; '-' for stdout) instead of stdout.")
def check_command(target: str, budget_path: Path | None, baseline: Path | None,
                  update_baseline: bool, allow_other_model: bool, fmt: str,
                  output: Path | None, **params: Any) -> None:
    """Fail (exit 1) when TARGET is over its attention budget.

    TARGET is model.py[:NAME], pkg.module:NAME, or a transformers config.json.
    Exit codes: 0 within budget, 1 over budget or a failing flag, 2 bad
    configuration, 3 the model could not be loaded or traced, 4 a bug in mhaudit.
    """
    with errors_to_exit(params.pop("verbose")):
        if update_baseline and baseline is None:
            raise ConfigError("--update-baseline needs --baseline FILE",
                              "Name the JSON file to write, e.g. --baseline mhaudit-baseline.json.")
        destination = output_path(output)
        baseline_out = output_path(baseline) if update_baseline else None
        _refuse_same_file(destination, baseline_out)
        budget = load_budget(budget_path)
        recorded = (load_baseline_report(baseline)
                    if baseline is not None and not update_baseline else None)
        rule_config = rule_config_from(params)
        options = AuditOptions(rule_config=rule_config, **options_from(params))
        check_budget_applies(budget, options.device)
        report = audit_quietly(target, options)
        warn_unused_shape_options(report)
        previous = None
        if recorded is not None:
            check_same_model(recorded, report, allow_other=allow_other_model)
            previous = recorded.metrics
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
        if baseline_out is not None:  # both files are replaced, or neither
            write_texts_atomic([(destination, text), (baseline_out, baseline_text(data))])
            if destination.path is None:
                write_output(text, destination)
            say(f"wrote baseline {baseline}")
        else:
            write_output(text, destination)
        if fmt == "github":
            _append_step_summary(render_markdown(outcome, title=f"mhaudit budget: {target}"))
        if not destination.is_stdout or fmt in ("json", "junit"):
            say(verdict(outcome))
    if not outcome.passed:
        raise SystemExit(1)


def _refuse_same_file(output: OutputPath, baseline: OutputPath | None) -> None:
    if baseline is not None and baseline.path is not None and output.path == baseline.path:
        raise ConfigError(f"--output and --baseline both name {baseline.path}",
                          "Write the report and the baseline to two different files.")
    if baseline is not None and baseline.path is None:
        raise ConfigError("--update-baseline needs a file for --baseline, not a stream",
                          "Name a JSON file, e.g. --baseline mhaudit-baseline.json.")


def _append_step_summary(markdown: str) -> None:
    """Append to the file GitHub names in GITHUB_STEP_SUMMARY, when it is set."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(markdown + "\n")
    except OSError as exc:
        say(f"warning: cannot write GITHUB_STEP_SUMMARY {path}: {exc}")
