"""The ``mhaudit`` command group."""

from __future__ import annotations

import click

from mhaudit import __version__
from mhaudit.cli.guard import GuardedGroup


@click.group(cls=GuardedGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mhaudit")
def main() -> None:
    """Audit the multi-head attention of a PyTorch model."""


def _register() -> None:
    from mhaudit.cli.check_cmd import check_command
    from mhaudit.cli.report_cmd import report_command
    from mhaudit.cli.rules_cmd import rules
    from mhaudit.cli.whatif_cmd import whatif

    main.add_command(report_command)
    main.add_command(check_command)
    main.add_command(rules)
    main.add_command(whatif)


_register()
