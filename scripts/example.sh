#!/usr/bin/env bash
# Install mhaudit (with transformers, for config.json targets) into .venv and audit the
# bundled textbook example.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -c constraints.txt -e ".[hf]"
.venv/bin/mhaudit report examples/textbook_mha.py "$@"
