"""timm's registry, where timm imports: each model built at a small size, audited and checked."""

from __future__ import annotations

import sys
from pathlib import Path


def timm_import_error() -> str | None:
    """Why timm cannot be used here, or None when it imports."""
    try:
        import timm  # noqa: F401
    except Exception as exc:  # missing, or a torchvision built for another torch/CUDA
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


def note() -> str:
    """One line for the zoo page on timm's registry."""
    reason = timm_import_error()
    if reason is None:
        return "timm imports here, but this harness sweeps only transformers so far."
    return f"timm's registry is not swept: `import timm` fails here ({reason})."


def main(out: Path) -> int:
    """Sweep timm's registry: where timm does not import, say why and return 0."""
    reason = timm_import_error()
    if reason is not None:
        print(f"timm sweep skipped: timm does not import here ({reason})")
        return 0
    print("timm imports here, but this harness sweeps only transformers so far", file=sys.stderr)
    return 2
