"""``python -m mhaudit``."""

from __future__ import annotations

from mhaudit.cli import main

if __name__ == "__main__":
    main()
