"""Command-line interface: the only place that prints or exits."""

from __future__ import annotations

from mhaudit.cli.main import main

__all__ = ["main"]
