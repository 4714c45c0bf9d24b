"""``mhaudit check TARGET...``: the CI budget gate."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mhaudit.atomic import OutputPath, write_texts_atomic
from mhaudit.cli.common import (
    errors_to_exit,
    model_options,
    options_from,
    output_path,
    require_torch,
    rule_config_from,
    rule_options,
    say,
    write_output,
)
from mhaudit.cli.complete import complete_target
from mhaudit.cli.configured import targets_or_configured
from mhaudit.cli.inputs import (
    command_inputs,
    refuse_imported_as_output,
    refuse_inputs_as_outputs,
)
from mhaudit.cli.phase_options import (
    phase_options,
    phase_options_from,
    warn_unused_phase_options,
)
from mhaudit.cli.targets import Failed, audit_each, flagged_sweeps, render_options, with_failed
from mhaudit.errors import ConfigError
from mhaudit.render.formats import FORMATS, OutputFormat, formats_with
from mhaudit.render.gate import Checked, overall_verdict, verdict
from mhaudit.render.style import PLAIN

if TYPE_CHECKING:
    from mhaudit.data import Report
    from mhaudit.gate.baseline import Baseline
    from mhaudit.gate.budget import Budget

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
@click.argument("targets", nargs=-1, required=False, metavar="[TARGET]...",
                shell_complete=complete_target)
@click.option("--budget", "budget_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="TOML file with a [budget] table (default: the nearest "
              "pyproject.toml with [tool.mhaudit.budget]).")
@click.option("--baseline", type=click.Path(dir_okay=False), default=None,
              help="A previous JSON report to compare with (max_increase_percent).")
@click.option("--update-baseline", is_flag=True,
              help="Write this run's JSON report to --baseline instead of comparing with it.")
@click.option("--allow-other-model", is_flag=True,
              help="Compare with a baseline recorded for a different model source or class.")
@model_options
@phase_options
@rule_options
@click.option("--format", "-f", "fmt", type=click.Choice(formats_with("checks")), default="table",
              show_default=True, help="Output format.")
@click.option("--output", "-o", type=click.Path(), default=None,
              help="Write the output here (atomically; '-' for stdout) instead of stdout.")
@click.option("--summary", "summary", type=click.Path(dir_okay=False),
              default=None, help="Also write the markdown summary to this file (atomically, "
              "with --output), so one run gives both.")
def check_command(targets: tuple[str, ...], budget_path: Path | None, baseline: str | None,
                  update_baseline: bool, allow_other_model: bool, fmt: str,
                  output: str | None, summary: str | None, **params: Any) -> None:
    """Fail (exit 1) when a TARGET is over its attention budget.

    TARGET is model.py[:NAME], pkg.module:NAME, or a transformers config.json;
    without one, the targets listed under [tool.mhaudit] in pyproject.toml.
    Exit codes: 0 within budget, 1 over budget or a failing flag, 2 bad
    configuration, 3 the model could not be loaded or traced, 4 a bug in mhaudit;
    with several targets the worst one wins.
    """
    verbose = params.pop("verbose")
    with errors_to_exit(verbose):
        require_torch()  # before anything that imports it: a broken torch is exit 3
        targets = targets_or_configured(targets)
        if update_baseline and baseline is None:
            raise ConfigError("--update-baseline needs --baseline FILE",
                              "Name the JSON file to write, e.g. --baseline mhaudit-baseline.json.")
        if baseline is not None and len(targets) > 1:
            raise ConfigError("--baseline compares one model, and several targets were given",
                              "Run mhaudit check once per model, each with its own baseline.")
        destination = output_path(output)
        baseline_out = output_path(baseline) if update_baseline else None
        summary_out = _summary_path(summary)
        step_out = _step_summary_path(FORMATS[fmt])
        _refuse_same_file(destination, baseline_out)
        refuse_inputs_as_outputs(
            [("--output", destination), ("--baseline", baseline_out),
             ("--summary", summary_out), ("GITHUB_STEP_SUMMARY", step_out)],
            command_inputs(targets, budget=budget_path,
                           baseline=None if update_baseline else baseline))
        from mhaudit.gate.baseline import load_baseline_report
        from mhaudit.gate.budget import check_budget_applies, load_budget
        from mhaudit.gate.phases import budget_phase_options
        from mhaudit.options import AuditOptions

        budget = load_budget(budget_path)
        recorded = (load_baseline_report(baseline)
                    if baseline is not None and not update_baseline else None)
        rule_config = rule_config_from(params)
        # a budget on a phase metric runs that phase, under the budget's plan if it has one
        phases = budget_phase_options(budget, phase_options_from(params))
        given = options_from(params)
        warn_unused_phase_options(phases)
        check_budget_applies(budget, given.get("device", "meta"))
        chosen = {"rule_config": rule_config, **phases, **given}
        done, worst, failed = audit_each(
            targets, lambda progress: AuditOptions(progress=progress, **chosen), verbose)
        items = _judge(done, budget, recorded, allow_other_model, AuditOptions(**chosen))
        form = FORMATS[fmt]
        listed = form.listing is not None and len(targets) > 1  # failed ones keep their place
        if items or listed:
            _emit(form, items, (destination, baseline_out, summary_out, step_out), baseline,
                  (len(targets), failed))
            # recording a baseline is the job's purpose: it succeeds once written, and the
            # verdict is still shown
            if not update_baseline and any(not c.outcome.passed for c in items):
                worst = max(worst, 1)
    if worst:
        raise SystemExit(worst)


def _judge(done: list[tuple[str, Report]], budget: Budget, recorded: Baseline | None,
           allow_other_model: bool, options: Any) -> list[Checked]:
    """Each report through the gate, against the baseline's metrics when one is given; a
    failing per-GPU limit gets the smallest change that passes (``options`` audited)."""
    from dataclasses import replace

    from mhaudit.gate.baseline import check_same_model
    from mhaudit.gate.budget import evaluate, metric_values
    from mhaudit.whatif.suggest import failing_limits, suggest

    items = []
    for target, report in done:
        previous = None
        if recorded is not None:
            check_same_model(recorded, report, allow_other=allow_other_model)
            previous = recorded.metrics
        outcome = evaluate(report, budget, previous)
        if failing_limits(outcome):
            outcome = replace(outcome, suggestion=suggest(target, options, budget, outcome,
                                                          report))
        items.append(Checked(target, report, outcome, metric_values(report)))
    return items


def _emit(form: OutputFormat, items: list[Checked],
          outputs: tuple[OutputPath, OutputPath | None, OutputPath | None, OutputPath | None],
          baseline: str | None, targets: tuple[int, list[Failed]]) -> None:
    """Write the output, the baseline and the summary (all or none), then the verdicts on
    stderr. ``outputs``: where the output, the baseline (or None) and the markdown summary
    (or None) and the GitHub step summary (or None) go; ``targets``: how many were given
    and the failed ones."""
    from mhaudit.gate.baseline import baseline_text

    destination, baseline_out, summary_out, step_out = outputs
    assert form.checks is not None
    options = render_options(form, False, destination.is_stdout,
                             flagged_sweeps(form, [c.report for c in items]))
    text = with_failed(form, form.checks(items, options) if items else None, *targets) or ""
    writes: list[tuple[OutputPath, str | bytes]] = [(destination, text)]
    if baseline_out is not None and items:  # every file is replaced, or none
        writes.append((baseline_out, baseline_text(items[0].data())))
    if summary_out is not None:
        markdown = FORMATS["markdown"]
        assert markdown.checks is not None
        summary = markdown.checks(items, PLAIN) if items else None
        writes.append((summary_out, with_failed(markdown, summary, *targets) or ""))
    if step_out is not None and form.step_summary is not None:
        writes.append((step_out, _appended(step_out, form.step_summary(items, PLAIN) + "\n")))
    for out, _ in writes:
        refuse_imported_as_output(out)
    write_texts_atomic(writes)  # the report stream is skipped here and printed below
    if destination.path is None:
        write_output(text, destination)
    if baseline_out is not None and items:
        say(f"wrote baseline {baseline}")
    if not destination.is_stdout or not form.states_verdict:
        for c in items:
            prefix = f"{c.target}: " if len(items) > 1 else ""
            say(f"{prefix}{verdict(c.outcome)}")
        if len(items) > 1:
            say(overall_verdict(items))


def _summary_path(summary: str | None) -> OutputPath | None:
    """``--summary FILE``: a file, never a stream (the output already has stdout)."""
    if summary is None:
        return None
    out = output_path(summary)
    if out.path is None or out.in_place:
        raise ConfigError("--summary needs a file, not a stream",
                          "Name a markdown file, e.g. --summary mhaudit-summary.md.")
    return out


def _refuse_same_file(output: OutputPath, baseline: OutputPath | None) -> None:
    if baseline is not None and baseline.path is not None and output.path == baseline.path:
        raise ConfigError(f"--output and --baseline both name {baseline.path}",
                          "Write the report and the baseline to two different files.")
    if baseline is not None and baseline.path is None:
        raise ConfigError("--update-baseline needs a file for --baseline, not a stream",
                          "Name a JSON file, e.g. --baseline mhaudit-baseline.json.")


def _step_summary_path(form: OutputFormat) -> OutputPath | None:
    """The file GitHub names in GITHUB_STEP_SUMMARY, for a format that writes one: checked
    as every output is (a regular file or refused), before the model runs."""
    name = os.environ.get("GITHUB_STEP_SUMMARY")
    if form.step_summary is None or not name:
        return None
    try:
        out = output_path(name)
    except ConfigError as error:
        raise ConfigError(f"GITHUB_STEP_SUMMARY: {error.message}", error.tip) from None
    if out.path is None:
        raise ConfigError(f"GITHUB_STEP_SUMMARY names a stream ({name}), not a file",
                          "Point it at a file, or unset it.")
    return out


def _appended(out: OutputPath, text: str) -> bytes:
    """The step summary's bytes with ``text`` added (a summary is appended to, never
    replaced), read through the one input reader: regular, bounded, never blocking."""
    from mhaudit.contain.files import read_input_bytes

    new = text.encode("utf-8", "backslashreplace")
    if out.path is None or out.in_place or not out.path.exists():
        return new
    return read_input_bytes(out.path, "GITHUB_STEP_SUMMARY") + new
