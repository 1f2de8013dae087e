#!/usr/bin/env bash
# Start the local control plane (etcd, kube-apiserver, kube-scheduler) on 127.0.0.1.
# Usage: hack/controlplane/start.sh [DIR]   (default .controlplane); prints the kubeconfig.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-.controlplane}
export TOPOGATE_CONTROLPLANE_BIN=${TOPOGATE_CONTROLPLANE_BIN:-$(hack/controlplane/build.sh)}
python=${PYTHON:-.venv/bin/python}
exec "$python" -m topogate.testing.controlplane start --dir "$dir"
