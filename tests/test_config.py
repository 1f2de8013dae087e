"""config/: the kustomize base renders, and the API server accepts every object (dry run)."""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, dynamic

from tests.cluster import with_kube
from tests.conftest import BASES
from topogate.testing.controlplane import BIN_ENV, ControlPlane, binaries
from topogate.webhooks.configuration import configurations
from topogate.webhooks.serving import inject_ca

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parent.parent


def _render(folder: str = "default") -> list[dict[str, Any]]:
    kustomize = Path(os.environ.get(BIN_ENV) or binaries()) / "kustomize"
    done = subprocess.run(
        [str(kustomize), "build", str(ROOT / "config" / folder)],
        capture_output=True,
        text=True,
        check=True,
    )
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def test_kustomize_base_applies_with_a_server_side_dry_run(crds: client.ApiClient) -> None:
    docs = _render()
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Deployment", "topogate-manager") in kinds
    assert ("MutatingWebhookConfiguration", "topogate") in kinds
    # Every CRD the package generates is in the base (the Cohort kind made it six).
    crds_in_base = sum(d["kind"] == "CustomResourceDefinition" for d in docs)
    assert crds_in_base == len(list(BASES.glob("*.yaml"))) == 6
    resources = dynamic.DynamicClient(crds).resources
    for doc in docs:
        resource = resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        # The namespace must exist for namespaced objects to be dry-run applied into it.
        dry_run = None if doc["kind"] == "Namespace" else "All"
        applied = resource.server_side_apply(
            body=doc,
            name=doc["metadata"]["name"],
            namespace=doc["metadata"].get("namespace"),
            field_manager="topogate-test",
            dry_run=dry_run,
            force_conflicts=True,
        )
        assert applied.metadata.name == doc["metadata"]["name"]
    webhooks = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")["webhooks"]
    for hook in webhooks:
        assert hook["sideEffects"] == "None" and hook["failurePolicy"] == "Fail"
        assert hook["clientConfig"]["service"]["namespace"] == "topogate-system"
        if "namespaceSelector" in hook:
            assert "kube-system" in hook["namespaceSelector"]["matchExpressions"][0]["values"]


def test_the_server_injects_its_ca_into_the_configurations(
    crds: client.ApiClient, control_plane: ControlPlane
) -> None:
    admission = client.AdmissionregistrationV1Api(crds)
    mutating, validating = configurations(service=("topogate-system", "topogate-webhook"))
    for body in (mutating, validating):
        body["metadata"]["name"] = "inject-test"
    admission.create_mutating_webhook_configuration(mutating)
    admission.create_validating_webhook_configuration(validating)
    try:
        bundle = b"-----BEGIN CERTIFICATE-----\nTEST\n"
        with_kube(control_plane, lambda kube: inject_ca(kube, "inject-test", bundle))
        for read in (
            admission.read_mutating_webhook_configuration,
            admission.read_validating_webhook_configuration,
        ):
            hooks = read("inject-test").webhooks
            assert hooks and all(
                base64.b64decode(h.client_config.ca_bundle).startswith(b"-----BEGIN") for h in hooks
            )
    finally:
        admission.delete_mutating_webhook_configuration("inject-test")
        admission.delete_validating_webhook_configuration("inject-test")


def test_the_client_auth_overlay_requires_the_api_servers_certificate(
    crds: client.ApiClient,
) -> None:
    """config/client-auth: the manager trusts the CA in the ConfigMap it mounts and refuses
    other clients; its args are serve's own (parsed here), and the API server accepts it."""
    import argparse

    from topogate.runtime import serve
    from topogate.webhooks.options import ClientAuth, options

    docs = _render("client-auth")
    manager = next(d for d in docs if d["kind"] == "Deployment")
    pod = manager["spec"]["template"]["spec"]
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    args = parser.parse_args(pod["containers"][0]["args"][1:])
    assert options(args)["client_auth"] == ClientAuth(
        ca="/var/run/topogate/client-ca/ca.crt", required=True
    )
    mounted = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounted["client-ca"] == "/var/run/topogate/client-ca"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["client-ca"]["configMap"]["name"] == "topogate-webhook-client-ca"
    apps = client.AppsV1Api(crds)
    with contextlib.suppress(client.ApiException):  # the base test may have made it
        client.CoreV1Api(crds).create_namespace({"metadata": {"name": "topogate-system"}})
    applied = apps.create_namespaced_deployment("topogate-system", manager, dry_run="All")
    assert applied.metadata.name == "topogate-manager"
    # The API server's side, as the local control plane runs it (controlplane.py).
    admission = yaml.safe_load(
        (ROOT / "config/client-auth/apiserver/admission-config.yaml").read_text()
    )
    assert {p["name"] for p in admission["plugins"]} == {
        "ValidatingAdmissionWebhook",
        "MutatingAdmissionWebhook",
    }
