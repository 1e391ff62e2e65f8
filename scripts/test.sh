#!/usr/bin/env bash
# Set everything up, then run every check CI runs: import rules, lint, types, the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYTHONHASHSEED=${PYTHONHASHSEED:-random}
echo "== import rules (the protocol core stays pure) =="
.venv/bin/lint-imports
echo "== ruff =="
.venv/bin/ruff check regroup tests
echo "== mypy =="
.venv/bin/mypy
echo "== tests =="
.venv/bin/pytest -q -n 2 --dist loadgroup "$@"
