#!/usr/bin/env bash
# The test command (README and .ci/run call this): installs what the tests need into .venv,
# builds (or finds cached) the local control plane, then runs the linters, the type checker and
# the test suite. Needs python3 with venv, and Go >= 1.26 with the module proxy for a cold build.
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

echo "== helm (renders config/helm/topogate in tests; built from Go modules once, then cached)"
TOPOGATE_HELM=$(hack/tools/build-helm.sh)
export TOPOGATE_HELM
"$TOPOGATE_HELM" version --short

echo "== chromium (renders topogate topology's HTML page in a test)"
if [ ! -x /usr/bin/chromium ]; then
  sudo=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then sudo=sudo; fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
/usr/bin/chromium --version

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy (strict)"
.venv/bin/mypy
echo "== pytest"
.venv/bin/pytest "$@"
