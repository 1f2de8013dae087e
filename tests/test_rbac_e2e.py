"""`topogate serve` as config/'s ServiceAccount, under config/'s RBAC, on the RBAC-enabled
API server: a queued Job is admitted and its pods ungated, a failed node's pod is moved, the
webhook CA is shared through its Secret, and the API server's audit log shows no request of
the ServiceAccount refused."""

from __future__ import annotations

import datetime
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests import test_e2e
from tests.cluster import api_client, drop_webhooks, eventually, with_kube
from tests.test_e2e import RACK, Pool, job, submit
from tests.test_nodefailure_e2e import fail, live_bound
from topogate.testing.controlplane import ControlPlane, free_port
from topogate.testing.localcluster import create_all, serving
from topogate.webhooks.serving import register

pytestmark = pytest.mark.cluster

cluster = test_e2e.cluster
pool = test_e2e.pool

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE, ACCOUNT = "topogate-system", "topogate-manager"
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"


def account_kubeconfig(plane: ControlPlane, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount, with a TokenRequest token."""
    core = client.CoreV1Api(api_client(plane))
    request = {"spec": {"expirationSeconds": 3600}}
    token = core.create_namespaced_service_account_token(ACCOUNT, NAMESPACE, request)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {
                    "server": plane.url,
                    "certificate-authority": str(plane.directory / "serving-ca.crt"),
                },
            }
        ],
        "users": [{"name": ACCOUNT, "user": {"token": token.status.token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": ACCOUNT}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def audited(plane: ControlPlane) -> list[dict[str, Any]]:
    """The ServiceAccount's requests in the audit log (its last stage: ResponseComplete)."""
    events = []
    for line in plane.audit_log.read_text().splitlines():
        event = json.loads(line)
        if event.get("user", {}).get("username") == USER and event["stage"] != "ResponseStarted":
            events.append(event)
    return events


def test_serve_under_config_rbac_is_never_refused(
    cluster: ControlPlane, pool: Pool, tmp_path: Path
) -> None:
    # Every kind serve watches is served, so a missing rule shows (a CRD not installed is
    # a 404, not a refusal).
    cluster.install_lws_crds()
    cluster.install_kuberay_crds()
    rbac = list(yaml.safe_load_all((ROOT / "config/rbac/role.yaml").read_text()))
    create_all(cluster.kubeconfig, rbac)
    started = datetime.datetime.now(datetime.UTC)
    port = free_port()
    # As `kubectl apply -k config/` would: the configurations exist; serve injects its CA.
    with_kube(cluster, lambda kube: register(kube, f"https://127.0.0.1:{port}", b""))
    kubeconfig = account_kubeconfig(cluster, tmp_path / "sa.kubeconfig")
    try:
        with serving(
            kubeconfig,
            tmp_path / "serve.log",
            extra=[
                f"--leader-namespace={NAMESPACE}",
                f"--leader-lease=rbac-{uuid.uuid4().hex[:6]}",
                f"--webhook-ca-secret={NAMESPACE}/topogate-webhook-ca",
                "--webhook-ip=127.0.0.1",
                "--node-failure-grace=1",
            ],
            webhook_dir=tmp_path / "certs",
            webhook_port=port,
            inject_ca="topogate",
        ):
            pool.nodes({("b0", "r0"): 3})
            required = {"kueue.x-k8s.io/podset-required-topology": RACK}
            created = eventually(lambda: submit(pool, job("train", 2, annotations=required)), 30)
            assert created["spec"]["suspend"] is True  # the webhook answered, over its CA
            before = eventually(lambda: live_bound(pool, "train", 2), 60)
            lost = before[0].spec.node_name
            fail(pool, lost)
            eventually(
                lambda: (
                    (b := live_bound(pool, "train", 2))
                    and lost not in {p.spec.node_name for p in b}
                ),
                60,
            )
    finally:
        drop_webhooks(cluster)
    events = [e for e in audited(cluster) if e["requestReceivedTimestamp"] >= started.isoformat()]
    refused = [
        f"{e['verb']} {e['objectRef'].get('resource')}/{e['objectRef'].get('subresource', '')}"
        for e in events
        if e.get("responseStatus", {}).get("code") == 403
    ]
    assert refused == []
    used = {(e["verb"], e["objectRef"].get("resource")) for e in events}
    # The scenario went through the ServiceAccount: it made a Workload, ungated and deleted
    # pods, renewed its Lease, injected its CA and kept it in the Secret.
    for needed in [
        ("create", "workloads"),
        ("patch", "pods"),
        ("delete", "pods"),
        ("update", "leases"),
        ("patch", "mutatingwebhookconfigurations"),
        ("get", "secrets"),
    ]:
        assert needed in used, sorted(used)
