"""`topogate serve` as config/'s ServiceAccount, under config/'s RBAC (and again under the
Helm chart's, config/helm/topogate with its defaults), on the RBAC-enabled API server: a queued Job is admitted and its pods ungated, a failed node's pod is moved, the
webhook CA is shared through its Secret, and the API server's audit log shows no request of
the ServiceAccount refused."""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Callable
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


RBAC_KINDS = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"}


def rbac_objects(source: str) -> list[dict[str, Any]]:
    if source == "config":
        return list(yaml.safe_load_all((ROOT / "config/rbac/role.yaml").read_text()))
    from tests.test_helm import helm_binary, template

    return [d for d in template(helm_binary(), namespace=NAMESPACE) if d["kind"] in RBAC_KINDS]


def install_rbac(plane: ControlPlane, objects: list[dict[str, Any]]) -> None:
    """Exactly these rules: objects of the same names (the other source's) are replaced."""
    rbac, core = (
        client.RbacAuthorizationV1Api(api_client(plane)),
        client.CoreV1Api(api_client(plane)),
    )
    calls: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
        "ClusterRole": (rbac.delete_cluster_role, rbac.read_cluster_role),
        "ClusterRoleBinding": (rbac.delete_cluster_role_binding, rbac.read_cluster_role_binding),
        "Role": (rbac.delete_namespaced_role, rbac.read_namespaced_role),
        "RoleBinding": (rbac.delete_namespaced_role_binding, rbac.read_namespaced_role_binding),
        "ServiceAccount": (
            core.delete_namespaced_service_account,
            core.read_namespaced_service_account,
        ),
    }
    for obj in objects:
        delete, read = calls[obj["kind"]]
        where = [obj["metadata"]["name"]] + (
            [obj["metadata"]["namespace"]] if "namespace" in obj["metadata"] else []
        )

        def gone(read: Any = read, where: list[str] = where) -> bool:
            try:
                read(*where)
            except client.ApiException as error:
                if error.status == 404:
                    return True
                raise
            return False

        try:
            delete(*where)
        except client.ApiException as error:
            if error.status != 404:
                raise
        eventually(gone, 30)  # created anew below, not left as it was
    created = create_all(plane.kubeconfig, objects)
    assert all(o["metadata"].get("uid") for o in created)  # made now, none left over


@pytest.mark.parametrize("source", ["config", "chart"])
def test_serve_under_config_rbac_is_never_refused(
    cluster: ControlPlane, pool: Pool, tmp_path: Path, source: str
) -> None:
    # Every kind serve watches is served, so a missing rule shows (a CRD not installed is
    # a 404, not a refusal).
    cluster.install_lws_crds()
    cluster.install_kuberay_crds()
    cluster.install_trainer_crds()
    rbac = rbac_objects(source)
    assert {o["kind"] for o in rbac} == RBAC_KINDS
    install_rbac(cluster, rbac)
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
                "--fair-sharing",  # its shares are written on ClusterQueues' status
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
    # pods, renewed its Lease, injected its CA and kept it in the Secret, wrote shares.
    for needed in [
        ("create", "workloads"),
        ("patch", "pods"),
        ("delete", "pods"),
        ("update", "leases"),
        ("patch", "mutatingwebhookconfigurations"),
        ("get", "secrets"),
        ("patch", "clusterqueues"),  # status.fairSharing
    ]:
        assert needed in used, sorted(used)
