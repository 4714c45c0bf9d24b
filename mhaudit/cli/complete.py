"""Shell completion of arguments click cannot type: model targets and rule codes."""

from __future__ import annotations

import click
from click.shell_completion import CompletionItem


def complete_target(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """File paths for TARGET (``model.py[:NAME]`` and ``pkg.module:NAME`` are typed whole)."""
    return [CompletionItem(incomplete, type="file")]


def complete_rule(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The codes, then the names, of the registered rules that start with ``incomplete``."""
    from mhaudit.rules import REGISTRY

    typed = incomplete.lower()
    codes = [CompletionItem(r.code, help=r.name) for r in REGISTRY
             if r.code.lower().startswith(typed)]
    names = [CompletionItem(r.name, help=r.code) for r in REGISTRY
             if r.name.startswith(typed)]
    return codes + names
