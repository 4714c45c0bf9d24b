"""The ``mhaudit`` command group; importing it (for --help or completion) imports no torch."""

from __future__ import annotations

import click

from mhaudit import __version__
from mhaudit.cli.guard import GuardedGroup

EXAMPLES = """\b
Examples:
  mhaudit report model.py                      audit every attention block
  mhaudit report a.py b.py --format sarif      code scanning for several models
  mhaudit check model.py --budget budget.toml  the CI gate (exit 1 when over)
  mhaudit whatif --d-model 4096 --heads 32     the cost of other head layouts
  mhaudit rules MHA004                         explain a rule

\b
Shell completion (bash, zsh, fish):
  eval "$(_MHAUDIT_COMPLETE=bash_source mhaudit)"   # in ~/.bashrc
  eval "$(_MHAUDIT_COMPLETE=zsh_source mhaudit)"    # in ~/.zshrc
  _MHAUDIT_COMPLETE=fish_source mhaudit | source    # in ~/.config/fish/config.fish
"""


@click.group(cls=GuardedGroup, epilog=EXAMPLES,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", "-V", prog_name="mhaudit")
def main() -> None:
    """Audit the multi-head attention of PyTorch models: heads, parameters, FLOPs, memory,
    kernels, and a CI budget gate."""


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
