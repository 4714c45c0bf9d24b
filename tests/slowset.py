"""Which slow tests the default run keeps: a stable sample, the rest in the slow set."""

from __future__ import annotations

import zlib

SAMPLE_EVERY = 8
"""The default run keeps one slow test in this many (by a hash of its id, so the same
ones every run); ``-m slow`` (any ``-m``), a named path or ``MHAUDIT_SLOW=1`` runs all."""

SKIP_REASON = "slow set: run it with `bash scripts/test.sh -m slow` (README, Tests)"


def sampled(nodeid: str) -> bool:
    """Whether the default run keeps the slow test ``nodeid``."""
    return zlib.crc32(nodeid.encode("utf-8")) % SAMPLE_EVERY == 0


def default_run(markexpr: str, from_testpaths: bool, env_slow: str) -> bool:
    """Whether this is the default suite (whole tree, no ``-m``, no ``MHAUDIT_SLOW``),
    which leaves the slow tests out of its sample."""
    return from_testpaths and not markexpr and env_slow in ("", "0")
