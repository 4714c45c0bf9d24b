"""``mhaudit report TARGET...``: the audit as a table, JSON, markdown, SARIF, GitHub or HTML."""

from __future__ import annotations

from typing import Any

import click

from mhaudit.cli.common import (
    AsciiIntRange,
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
from mhaudit.cli.targets import audit_each, flagged_sweeps, render_options, with_failed
from mhaudit.render.formats import FORMATS, formats_with

EXAMPLES = """\b
Examples:
  mhaudit report examples/textbook_mha.py
  mhaudit report model.py:make_small --seq-len 512,2048,8192 --gpu a100-80g
  mhaudit report config.json --format json -o report.json
  mhaudit report model.py --format sarif -o mhaudit.sarif     # GitHub code scanning
  mhaudit report model.py --format html -o report.html         # charts, one file
  mhaudit report a.py b.py c.py --fail-on warning              # several models, one process
"""


@click.command("report", epilog=EXAMPLES, short_help="Audit the attention blocks of models.")
@click.argument("targets", nargs=-1, required=False, metavar="[TARGET]...",
                shell_complete=complete_target)
@model_options
@phase_options
@click.option("--format", "-f", "fmt", type=click.Choice(sorted(formats_with("report"))),
              default="table", show_default=True, help="Output format.")
@click.option("--output", "-o", type=click.Path(), default=None,
              help="Write the report here (atomically; '-' for stdout) instead of stdout.")
@click.option("--wide", is_flag=True,
              help="Every table column, unwrapped (default: fit the terminal width).")
@rule_options
@click.option("--fail-on", type=click.Choice(["error", "warning", "info", "never"]),
              default="never", show_default=True,
              help="Exit 1 when a flag at or above this severity is raised.")
@click.option("--repeats", type=AsciiIntRange(min=1), default=10, show_default=True,
              help="Timed forwards when measuring on cpu or cuda.")
def report_command(targets: tuple[str, ...], fmt: str, output: str | None, wide: bool,
                   fail_on: str, repeats: int, **params: Any) -> None:
    """Audit the attention blocks of each TARGET.

    TARGET is model.py[:NAME], pkg.module:NAME, or a transformers config.json;
    without one, the targets listed under [tool.mhaudit] in pyproject.toml. With
    several targets every format starts with a summary across models (JSON: a list of
    reports) and the worst exit code wins.
    """
    verbose = params.pop("verbose")
    with errors_to_exit(verbose):
        require_torch()  # before anything that imports it: a broken torch is exit 3
        targets = targets_or_configured(targets)
        destination = output_path(output)
        refuse_inputs_as_outputs([("--output", destination)], command_inputs(targets))
        rule_config = rule_config_from(params)
        phases = phase_options_from(params)
        given = options_from(params)
        warn_unused_phase_options(phases)
        from mhaudit.gate.budget import failing_findings
        from mhaudit.options import AuditOptions
        done, worst, failed = audit_each(targets, lambda progress: AuditOptions(
            rule_config=rule_config, repeats=repeats, progress=progress, **phases, **given),
            verbose)
        reports = [report for _, report in done]
        form = FORMATS[fmt]
        listed = form.listing is not None and len(targets) > 1  # failed ones keep their place
        if reports or listed:
            options = render_options(form, wide, destination.is_stdout,
                                     flagged_sweeps(form, reports))
            text = form.render_reports(reports, options) if reports else None
            text = with_failed(form, text, len(targets), failed)
            refuse_imported_as_output(destination)
            write_output(text or "", destination)
            if any(failing_findings(r.findings, fail_on) for r in reports):
                worst = max(worst, 1)
            verified = [r.verification for r in reports if r.verification is not None]
            if any(not all(row.agrees for row in v.rows) for v in verified):
                say("--verify: a figure disagrees with torch's counter beyond its tolerance")
            if any(v.declared_mismatch for v in verified):
                say("--verify: a module declares a layout the detected block does not have "
                    "(coverage.declared_mismatch)")
            if any(not v.agrees for v in verified):
                worst = max(worst, 1)
            if destination.path is not None:
                say(f"wrote {destination.path}")
    if worst:
        raise SystemExit(worst)
