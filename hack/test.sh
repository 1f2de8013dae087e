#!/usr/bin/env bash
# The test command (README and .ci/run call this): installs what the tests need into .venv,
# then runs the linters, the type checker and the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev]'

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy (strict)"
.venv/bin/mypy
echo "== pytest"
.venv/bin/pytest "$@"
