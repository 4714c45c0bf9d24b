"""Global state a model may change, restored after it: torch's defaults and imported modules.

A model file that calls ``torch.set_default_dtype(torch.float64)`` at import, turns grad
mode off, sets a default device or deterministic algorithms, or imports sibling modules,
would otherwise change every model audited after it in the same process.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

_KEPT = ("mhaudit", "torch", "transformers", "huggingface_hub")
"""Packages whose modules stay imported: torch imports its own submodules lazily."""


def _torch_state(torch: Any) -> dict[str, Any]:
    cudnn = torch.backends.cudnn
    return {
        "dtype": torch.get_default_dtype(),
        "device": torch.get_default_device(),
        "grad": torch.is_grad_enabled(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "anomaly": torch.is_anomaly_enabled(),
        "cudnn": (cudnn.deterministic, cudnn.benchmark),
    }


def _restore_torch(torch: Any, state: dict[str, Any]) -> None:
    torch.set_default_dtype(state["dtype"])
    device = state["device"]
    torch.set_default_device(None if device == torch.device("cpu") else device)
    torch.set_grad_enabled(state["grad"])
    torch.use_deterministic_algorithms(state["deterministic"], warn_only=state["warn_only"])
    torch.set_anomaly_enabled(state["anomaly"])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = state["cudnn"]


def _under(module: Any, folders: Sequence[Path]) -> bool:
    """True for a module loaded from a file in one of ``folders`` (installed packages aside)."""
    file = getattr(module, "__file__", None)
    if not isinstance(file, str):
        return False
    path = os.path.realpath(file)
    if "site-packages" in path or "dist-packages" in path:
        return False
    return any(path.startswith(str(folder) + os.sep) for folder in folders)


def _user_modules(before: set[str], folders: Sequence[Path]) -> list[str]:
    names = []
    for name in set(sys.modules) - before:
        if name.split(".")[0] in _KEPT:
            continue
        module = sys.modules.get(name)
        if name.startswith("mhaudit_user_") or _under(module, folders):
            names.append(name)
    return names


_IMPORTED: set[str] = set()
"""Files of the modules the model files imported from their folders (and the model files),
kept after the modules are dropped: an output must never replace one of them."""


def imported_files() -> frozenset[str]:
    """Every source file a model run in this process imported from its own folder."""
    return frozenset(_IMPORTED)


@contextlib.contextmanager
def clean_state(model_folders: Sequence[str | Path] = ()) -> Iterator[None]:
    """Restore torch's global defaults after the block and drop the modules it imported from
    ``model_folders`` (the folders of the model files) or as model files.

    Restored: default dtype and device, grad mode, deterministic algorithms (and warn-only),
    anomaly mode, cuDNN's deterministic and benchmark flags. torch is read only if it is
    imported already; a block that imports it starts from its defaults.
    """
    folders = [Path(os.path.realpath(f)) for f in model_folders]
    before = set(sys.modules)
    torch = sys.modules.get("torch")
    state = _torch_state(torch) if torch is not None else None
    try:
        yield
    finally:
        if torch is not None and state is not None:
            with contextlib.suppress(Exception):
                _restore_torch(torch, state)
        for name in _user_modules(before, folders):
            origin = getattr(sys.modules.get(name), "__file__", None)
            if isinstance(origin, str):
                _IMPORTED.add(origin)
            sys.modules.pop(name, None)
