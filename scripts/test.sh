#!/usr/bin/env bash
# Install mhaudit with its dev extras into .venv and run lint, types and the full test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -c constraints.txt -e ".[dev]"
.venv/bin/ruff check mhaudit tests examples benchmarks
.venv/bin/mypy
.venv/bin/python -m mhaudit.rules.docs --check
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
