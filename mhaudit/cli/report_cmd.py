"""``mhaudit report TARGET``: the audit, as a table, JSON or markdown."""

from __future__ import annotations

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
    stderr_progress,
    write_output,
)
from mhaudit.cli.phase_options import phase_options, phase_options_from
from mhaudit.gate.budget import failing_findings
from mhaudit.render import RENDERERS, render


@click.command("report")
@click.argument("target")
@model_options
@phase_options
@click.option("--format", "-f", "fmt", type=click.Choice(sorted(RENDERERS)), default="table",
              show_default=True, help="Output format.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the report here (atomically) instead of stdout.")
@rule_options
@click.option("--fail-on", type=click.Choice(["error", "warning", "info", "never"]),
              default="never", show_default=True,
              help="Exit 1 when a flag at or above this severity is raised.")
@click.option("--repeats", type=click.IntRange(min=1), default=10, show_default=True,
              help="Timed forwards when measuring on cpu or cuda.")
def report_command(target: str, fmt: str, output: Path | None, fail_on: str, repeats: int,
                   **params: Any) -> None:
    """Audit the attention blocks of TARGET.

    TARGET is model.py[:NAME], pkg.module:NAME, or a transformers config.json.
    """
    with errors_to_exit():
        rule_config = rule_config_from(params)
        options = AuditOptions(rule_config=rule_config, repeats=repeats,
                               progress=stderr_progress(), **phase_options_from(params),
                               **options_from(params))
        result = audit_quietly(target, options)
        write_output(render(result, fmt), output)
    if failing_findings(result.findings, fail_on):
        raise SystemExit(1)
