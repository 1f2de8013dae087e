#!/usr/bin/env bash
# The test command (README and .ci/run call this): installs what the tests need into .venv,
# builds (or finds cached) the local control plane, then runs the linters, the type checker and
# the test suite. Needs python3 with venv, and Go >= 1.24 with the module proxy for a cold build.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev]'

echo "== control plane (built from Go modules once, then cached outside the repo)"
TOPOGATE_CONTROLPLANE_BIN=$(hack/controlplane/build.sh)
export TOPOGATE_CONTROLPLANE_BIN
echo "$TOPOGATE_CONTROLPLANE_BIN"

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy (strict)"
.venv/bin/mypy
echo "== pytest"
.venv/bin/pytest "$@"
