"""The size limits a real CPU reference run stays within."""

from __future__ import annotations

import os

from mhaudit import units

LIMIT_BYTES = 4 * 2**30
"""Largest a real CPU reference run may allocate by default (also at most half the free
memory)."""


def _free_bytes() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def over_limits(need_bytes: int, flops: int, limit_flops: int, run: str,
                limit_bytes: int = LIMIT_BYTES) -> str | None:
    """Why ``run`` (``a real CPU step``) of this size is not made; None when it fits:
    ``need_bytes`` over ``limit_bytes`` or half the free memory, or ``flops`` over
    ``limit_flops``."""
    free = _free_bytes()
    limit = limit_bytes if free is None else min(limit_bytes, free // 2)
    if need_bytes > limit:
        where = "" if limit == limit_bytes else " (half the free memory)"
        return (f"{run} would allocate {units.nbytes(need_bytes)}, over the "
                f"{units.nbytes(limit)} limit{where}; verify a smaller batch or sequence")
    if flops > limit_flops:
        return (f"{run} would compute {flops:,} FLOPs, over the {limit_flops:,} limit; "
                "verify a smaller batch or sequence")
    return None
