"""Two `topogate serve` replicas on the real control plane, as config/'s Deployment runs them:
one Lease, one CA Secret, one caBundle that the API server uses for whichever replica it
reaches."""

from __future__ import annotations

import base64
import contextlib
import socket
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests import test_e2e
from tests.cluster import api_client, drop_webhooks, eventually
from topogate.testing.controlplane import ControlPlane, free_port
from topogate.testing.localcluster import serving

pytestmark = pytest.mark.cluster

cluster = test_e2e.cluster


def handshake(port: int, bundle: bytes) -> bytes:
    """The certificate a replica serves, verified with ``bundle`` as the only trust root."""
    context = ssl.create_default_context(cadata=bundle.decode())
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def queued_job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}
            }
        },
    }


@contextlib.contextmanager
def replicas(plane: ControlPlane, tmp_path: Path, secret: str) -> Iterator[list[int]]:
    """Two replicas started together (they race for the Secret); both register the webhooks
    at replica 0's port, so the configuration is the same whoever writes it last."""
    ports = [free_port(), free_port()]
    lease = f"replicas-{uuid.uuid4().hex[:6]}"
    with contextlib.ExitStack() as stack:
        for index, port in enumerate(ports):
            stack.enter_context(
                serving(
                    plane.kubeconfig,
                    tmp_path / f"serve-{index}.log",
                    extra=[
                        f"--leader-lease={lease}",
                        f"--webhook-ca-secret=kube-system/{secret}",
                        "--webhook-ip=127.0.0.1",
                    ],
                    webhook_dir=tmp_path / f"certs-{index}",
                    webhook_port=port,
                    register_url=f"https://127.0.0.1:{ports[0]}",
                )
            )
        yield ports


def test_two_replicas_share_one_ca_and_the_api_server_trusts_both(
    cluster: ControlPlane, tmp_path: Path
) -> None:
    api = api_client(cluster)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    hooks_api = client.AdmissionregistrationV1Api(api)
    secret = f"webhook-ca-{uuid.uuid4().hex[:6]}"
    namespace = f"replicas-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    try:
        with replicas(cluster, tmp_path, secret) as ports:

            def injected() -> bytes | None:
                try:
                    hook = hooks_api.read_mutating_webhook_configuration("topogate")
                except client.ApiException:
                    return None
                found = {base64.b64decode(h.client_config.ca_bundle) for h in hook.webhooks}
                ready = all((tmp_path / f"certs-{i}" / "tls.crt").exists() for i in (0, 1))
                return found.pop() if len(found) == 1 and ready else None

            bundle = eventually(injected, 60)
            stored = core.read_namespaced_secret(secret, "kube-system").data
            ca: bytes = base64.b64decode(stored["ca.crt"])
            assert bundle.count(ca) == 1  # the Secret's CA is the one injected
            # Each replica's own serving certificate verifies against the one bundle.
            served = [handshake(port, bundle) for port in ports]
            assert served[0] != served[1]
            # The API server reaches replica 0, then (the Service choosing the other pod)
            # replica 1, with the caBundle as written: every queued Job is suspended.
            names = iter(range(100))

            def all_mutated(count: int) -> bool:
                jobs = [
                    batch.create_namespaced_job(namespace, queued_job(f"j-{next(names)}"))
                    for _ in range(count)
                ]
                return all(job.spec.suspend for job in jobs)

            assert eventually(lambda: all_mutated(10), 30)
            for hook in hooks_api.list_mutating_webhook_configuration().items:
                for entry in hook.webhooks or []:
                    entry.client_config.url = entry.client_config.url.replace(
                        str(ports[0]), str(ports[1])
                    )
                hooks_api.replace_mutating_webhook_configuration(hook.metadata.name, hook)
            assert all_mutated(10)  # no TLS failure: replica 1 is trusted through the bundle
    finally:
        drop_webhooks(cluster)
        with contextlib.suppress(client.ApiException):
            core.delete_namespaced_secret(secret, "kube-system")
        core.delete_namespace(namespace)
