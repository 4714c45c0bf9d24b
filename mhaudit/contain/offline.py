"""The model hub stays offline: mhaudit never downloads a config, a model or remote code."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
"""Variables huggingface_hub and transformers read (at import) to stay offline."""


def set_offline_env() -> None:
    """Set the offline variables for the rest of the process (the CLI does this first)."""
    for name in OFFLINE_ENV:
        os.environ[name] = "1"


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """The hub offline for the block, for code that imports transformers now or did before.

    The variables are set before any import in the block, and an already imported
    ``huggingface_hub`` has its cached flag switched too; both are restored afterwards.
    """
    saved = {name: os.environ.get(name) for name in OFFLINE_ENV}
    set_offline_env()
    constants: Any = sys.modules.get("huggingface_hub.constants")
    flag = getattr(constants, "HF_HUB_OFFLINE", None)
    if constants is not None:
        constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        imported: Any = sys.modules.get("huggingface_hub.constants")
        if imported is not None:  # imported before or inside the block: the caller's setting
            before = any((v or "").strip().upper() in ("1", "ON", "YES", "TRUE")
                         for v in saved.values())
            imported.HF_HUB_OFFLINE = flag if constants is not None and flag is not None \
                else before
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
