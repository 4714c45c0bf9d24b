#!/usr/bin/env bash
# Build a Python 3.11 venv at $1 with torch 2.14.1, torchvision 0.29.1, timm and mhaudit (-e),
# for the timm registry sweep: `VENV/bin/python benchmarks/zoo.py --timm --out docs/zoo_timm.md`.
set -euo pipefail
venv="${1:?usage: scripts/timm-venv.sh PATH (e.g. /tmp/timmvenv)}"
cd "$(dirname "$0")/.."
python3.11 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet torch==2.14.1 torchvision==0.29.1 timm
# mhaudit declares torch as a lower bound only; --no-deps keeps the torch above in place.
"$venv/bin/python" -m pip install --quiet --no-deps -e .
"$venv/bin/python" -m pip install --quiet fvcore tabulate click pytest
"$venv/bin/python" -c "import timm, torch, torchvision, mhaudit; print('timm', timm.__version__, 'torch', torch.__version__, 'torchvision', torchvision.__version__)"
