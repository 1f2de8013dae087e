"""Kubeflow's MPI operator (github.com/kubeflow/mpi-operator, built by
hack/controlplane/build.sh) in the local control plane, running MPIJobs (kubeflow.org/v2beta1)
with the CRD of the same release, as :meth:`ControlPlane.start_mpi_operator` starts it.

What it does with an MPIJob, as in a cluster: a headless Service, a ConfigMap (hostfile) and an
SSH Secret at once; a launcher batch/v1 Job ``<name>-launcher`` (suspended while the MPIJob is;
kube-controller-manager's Job controller makes its pod) and, while the MPIJob is not
suspended, one worker pod ``<name>-worker-<i>`` per replica. Suspended again, it deletes the
workers and suspends the launcher Job. It has no webhook.

Two things of its command need care here: it always runs leader election (its Lease
``mpi-operator`` goes in ``default``, a namespace every API server has), and it serves its
health check on port 8080 of every interface, a constant of its source that no flag moves.
build.sh builds it with one file of ours added (hack/controlplane/mpi-operator-health-port.go)
that takes the port from ``MPI_OPERATOR_HEALTH_PORT``: each plane gives it a free port, so two
planes run on one machine (a binary built without the file still takes 8080:
:func:`health_port` says which). It is ready when it holds its Lease.

Kubeflow's training-operator v1.8.1 also serves an MPIJob (kubeflow.org/v1) from a CRD of the
same name, ``mpijobs.kubeflow.org``: the plane never installs that one (it runs the
training-operator with PyTorchJob's scheme only), so both operators can run on one plane.
"""

from __future__ import annotations

import re
import urllib.error
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from topogate.testing.controlplane import ControlPlane

NAME = "mpi-operator"
CRD = "mpijobs.kubeflow.org"
LOCK_NAMESPACE = "default"
UPSTREAM_HEALTH_PORT = 8080  # fixed in the operator's source
HEALTH_PORT_ENV = "MPI_OPERATOR_HEALTH_PORT"  # read by the file build.sh adds
_LISTENING = re.compile(rb"Start listening to (\d+) for health check")


def install_crd(plane: ControlPlane, bin_dir: Path) -> None:
    """The release's MPIJob CRD (v2beta1), created or left as it is, and Established."""
    crd = yaml.safe_load((bin_dir / "mpi-operator-crd.yaml").read_text())
    served = [v["name"] for v in crd["spec"]["versions"]]
    if crd["metadata"]["name"] != CRD or served != ["v2beta1"]:
        raise ValueError(f"{bin_dir}/mpi-operator-crd.yaml: not the v2beta1 MPIJob CRD: {served}")
    plane._apply("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    plane._wait_for(lambda: plane._crd_established(CRD), "the MPIJob CRD Established", 30)


def start(plane: ControlPlane, bin_dir: Path) -> None:
    """Install the CRD, start the operator on all namespaces, and wait until it leads."""
    # Imported here: controlplane imports this module.
    from topogate.testing.controlplane import ControlPlaneError, free_port

    if not (bin_dir / NAME).is_file():
        raise ControlPlaneError(
            f"{bin_dir / NAME} is missing: run hack/controlplane/build.sh and point "
            f"$TOPOGATE_CONTROLPLANE_BIN at the bin directory it prints"
        )
    install_crd(plane, bin_dir)
    plane._spawn(
        NAME,
        [
            str(bin_dir / NAME),
            f"--kubeConfig={plane.kubeconfig}",
            f"--lock-namespace={LOCK_NAMESPACE}",
            # Its defaults (5 QPS, burst 10) throttle a test's creations for seconds.
            "--kube-api-qps=50",
            "--kube-api-burst=100",
        ],
        # KUBECONFIG would override the flag; the namespace variable would scope it.
        env={
            "KUBECONFIG": str(plane.kubeconfig),
            "KUBEFLOW_NAMESPACE": "",
            HEALTH_PORT_ENV: str(free_port()),
        },
    )
    plane._wait_for(lambda: _leading(plane), "mpi-operator holding its Lease", 60)


def health_port(plane: ControlPlane) -> int | None:
    """The port the plane's operator serves its health check on, as its log says (8080: a
    binary built without build.sh's file), or None before it says."""
    log = plane.directory / f"{NAME}.log"
    found = _LISTENING.findall(log.read_bytes()) if log.exists() else []
    return int(found[-1]) if found else None


def _leading(plane: ControlPlane) -> bool:
    """Its Lease has a holder, and every process of the plane still runs."""
    from topogate.testing.controlplane import ControlPlaneError

    for process in plane.processes:
        if process.poll() is not None:
            name = next((n for n, pid in plane.pids.items() if pid == process.pid), "a process")
            raise ControlPlaneError(
                f"{name} exited with {process.returncode}; see {plane.directory}/{name}.log"
            )
    path = f"/apis/coordination.k8s.io/v1/namespaces/{LOCK_NAMESPACE}/leases/{NAME}"
    try:
        lease = plane.request("GET", path)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return False
        raise
    return bool((lease.get("spec") or {}).get("holderIdentity"))
