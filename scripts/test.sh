#!/usr/bin/env bash
# Install mhaudit with its dev extras into .venv and run lint, types and the full test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -c constraints.txt -e ".[dev]"
# Headless Chromium for the HTML report's screenshot test (Debian's package). Where it
# cannot be installed (no root, no apt-get) that one test skips and says why.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        (export DEBIAN_FRONTEND=noninteractive
         apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium) \
            >/dev/null 2>&1 || echo "scripts/test.sh: could not install chromium; the HTML screenshot test will skip" >&2
    else
        echo "scripts/test.sh: chromium is missing and apt-get needs root; the HTML screenshot test will skip" >&2
    fi
fi
.venv/bin/ruff check mhaudit tests examples benchmarks
.venv/bin/mypy
.venv/bin/python -m mhaudit.rules.docs --check
# The default run keeps a sample of the tests marked slow; `bash scripts/test.sh -m slow`
# runs all of them. --durations lists the slowest, to mark the next heavy test slow.
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "$@"
