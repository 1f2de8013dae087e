#!/usr/bin/env bash
# Start the local control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager)
# on 127.0.0.1; with --jobset also JobSet's controller, CRD and webhooks, with --lws
# LeaderWorkerSet's, with --training-operator Kubeflow's (PyTorchJob), with --kuberay KubeRay's operator and CRDs;
# with --mpi-operator Kubeflow's MPI operator and MPIJob CRD;
# with --trainer Kubeflow Trainer v2's controller manager (TrainJob), CRDs and webhooks;
# with --workloads Kubernetes' own gangs (1.36 alpha feature gates, v1alpha2 API).
# Usage: hack/controlplane/start.sh [DIR] [--jobset] [--lws] [--workloads] [--training-operator] [--kuberay] [--mpi-operator] [--trainer]   (DIR: .controlplane); prints the kubeconfig.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=.controlplane
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then dir=$1; shift; fi
export TOPOGATE_CONTROLPLANE_BIN=${TOPOGATE_CONTROLPLANE_BIN:-$(hack/controlplane/build.sh)}
python=${PYTHON:-.venv/bin/python}
exec "$python" -m topogate.testing.controlplane start --dir "$dir" "$@"
