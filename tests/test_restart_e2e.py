"""`serve` lives through kube-apiserver restarts: admission resumes within seconds, the process
keeps running, and nothing is logged as a crash. Its own control plane: the restarts must not
disturb the other end-to-end tests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import eventually
from tests.test_e2e import RACK, Pool, Serve, condition, job, submit
from topogate.testing.controlplane import ControlPlane
from topogate.testing.localcluster import create_all, install_crds

pytestmark = pytest.mark.cluster

# Recovery goal: a job created as soon as the API server is back is admitted within this.
RECOVERY_SECONDS = 8.0


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    started = ControlPlane.start(tmp_path_factory.mktemp("restarts"))
    try:
        install_crds(started.kubeconfig)
        create_all(
            started.kubeconfig,
            [
                {
                    "apiVersion": "topogate.dev/v1alpha1",
                    "kind": "Topology",
                    "metadata": {"name": "e2e"},
                    "spec": {
                        "levels": [
                            {"nodeLabel": "example.com/block"},
                            {"nodeLabel": RACK},
                            {"nodeLabel": "kubernetes.io/hostname"},
                        ]
                    },
                }
            ],
        )
        yield started
    finally:
        started.stop()


def admitted_within(pool: Pool, name: str, seconds: float) -> float:
    started = time.monotonic()
    eventually(lambda: condition(pool.workload_of(name), "Admitted") is not None, timeout=seconds)
    return time.monotonic() - started


def test_admission_resumes_within_seconds_after_each_api_server_restart(
    plane: ControlPlane, tmp_path: Path
) -> None:
    """Three restarts of one API server under one `serve`: each must be recovered from as
    fast as the first (a backoff left over from an earlier outage made it 53-60 s)."""
    serve = Serve(plane, tmp_path)
    with serve.stack:
        # A Lease that outlives the restarts: this test is about the watches and writers.
        process = serve.start("--lease-duration=90", "--renew-deadline=75", "--retry-period=1")
        pool = Pool(plane, "restarts", "restarts")
        pool.setup()
        pool.nodes({("b0", "r0"): 2, ("b0", "r1"): 4})  # room for every job: none finishes
        annotations = {"kueue.x-k8s.io/podset-required-topology": RACK}
        submit(pool, job("before", 2, annotations=annotations))
        admitted_within(pool, "before", 30)
        for round_, (down, kill) in enumerate([(0.0, False), (3.0, True), (0.0, False)]):
            time.sleep(2)  # the watches are healthy and idle, as in a quiet cluster
            plane.restart_apiserver(down, kill=kill)
            submit(pool, job(f"after-{round_}", 1, annotations=annotations))
            admitted_within(pool, f"after-{round_}", RECOVERY_SECONDS)  # fails past it
            assert process.poll() is None, serve.log()
        assert "Traceback" not in serve.log()
