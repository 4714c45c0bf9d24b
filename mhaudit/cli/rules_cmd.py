"""``mhaudit rules [CODE]``: list the rules or explain one, from the rule objects."""

from __future__ import annotations

import click

from mhaudit.cli.common import errors_to_exit, verbose_option, write_output
from mhaudit.cli.complete import complete_rule
from mhaudit.cli.guard import report_stream
from mhaudit.cli.terminal import terminal_width, use_color
from mhaudit.errors import ConfigError
from mhaudit.render.formats import FORMATS, formats_with
from mhaudit.render.style import RenderOptions
from mhaudit.rules import REGISTRY

EXAMPLES = """\b
Examples:
  mhaudit rules                       # every rule, its default severity and summary
  mhaudit rules MHA004                # what it flags, why it costs, the fix
  mhaudit rules kv-cache-heavy        # by name
  mhaudit rules MHA007 --format markdown
"""


@click.command("rules", epilog=EXAMPLES, short_help="List the rules, or explain one.")
@click.argument("code", required=False, shell_complete=complete_rule)
@click.option("--format", "-f", "fmt", type=click.Choice(formats_with("rules")),
              default="table", show_default=True, help="Output format.")
@verbose_option
def rules(code: str | None, fmt: str, verbose: bool) -> None:
    """List the rules, or explain one by its code or name (mhaudit rules MHA005)."""
    with errors_to_exit(verbose):
        write_output(_text(code, fmt), None)


def _text(code: str | None, fmt: str) -> str:
    form = FORMATS[fmt]
    assert form.rules is not None and form.rule is not None
    options = RenderOptions(width=terminal_width(), color=use_color(report_stream()))
    if code is None:
        return form.rules(list(REGISTRY), options)
    rule = REGISTRY.get(code)
    if rule is None:
        raise ConfigError(f"unknown rule {code!r}", "Run `mhaudit rules` to list them.")
    return form.rule(rule, options)
