#!/usr/bin/env bash
# Stop the local control plane started by start.sh. Usage: hack/controlplane/stop.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-.venv/bin/python}
exec "$python" -m topogate.testing.controlplane stop --dir "${1:-.controlplane}"
