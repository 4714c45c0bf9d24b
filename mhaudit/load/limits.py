"""Size limits every batch, length, count and dimension a user gives is checked against."""

from __future__ import annotations

MAX_SIZE = 2**40
"""Largest batch, length, count or dimension accepted: beyond it no shape is meant."""
