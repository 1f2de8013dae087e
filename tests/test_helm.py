"""config/helm/topogate: helm lints it, renders it with several value sets, its defaults render
the kustomize base's objects (so the two never drift), and the API server accepts what it
renders (server-side dry run). Marked `cluster` like test_config: helm and kustomize are built
from Go modules (hack/tools/build-helm.sh, hack/controlplane/build.sh)."""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, dynamic

from tests.test_config import _render as kustomize
from topogate.runtime import serve
from topogate.webhooks.options import ClientAuth, options

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "config" / "helm" / "topogate"
HELM_ENV = "TOPOGATE_HELM"

Doc = dict[str, Any]


def helm_binary() -> str:
    """$TOPOGATE_HELM, or what build-helm.sh prints (cached; built once from Go modules)."""
    if os.environ.get(HELM_ENV):
        return os.environ[HELM_ENV]
    done = subprocess.run(
        ["bash", str(ROOT / "hack" / "tools" / "build-helm.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def helm() -> str:
    return helm_binary()


def run_helm(helm: str, *args: str, values: Doc | None = None) -> subprocess.CompletedProcess[str]:
    command = [helm, *args]
    if values is not None:
        command += ["--values", "-"]
    return subprocess.run(
        command,
        input=yaml.safe_dump(values) if values is not None else None,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def template(helm: str, values: Doc | None = None, namespace: str = "topogate-system") -> list[Doc]:
    done = run_helm(
        helm, "template", "topogate", str(CHART), "--namespace", namespace, values=values
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def refusal(helm: str, values: Doc) -> str:
    done = run_helm(helm, "template", "topogate", str(CHART), values=values)
    assert done.returncode != 0, done.stdout
    return done.stderr


def by_key(docs: list[Doc]) -> dict[tuple[str, str], Doc]:
    keyed = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert len(keyed) == len(docs), "two objects of one kind and name"
    return keyed


def serve_args(docs: list[Doc]) -> argparse.Namespace:
    """The Deployment's args, parsed by serve's own parser (a flag it lacks fails here)."""
    manager = by_key(docs)[("Deployment", "topogate-manager")]
    args = manager["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "serve"
    parser = argparse.ArgumentParser(exit_on_error=False)
    serve.add_arguments(parser)
    return parser.parse_args(args[1:])


def pod_spec(docs: list[Doc]) -> Doc:
    spec: Doc = by_key(docs)[("Deployment", "topogate-manager")]["spec"]["template"]["spec"]
    return spec


def rules(docs: list[Doc], kind: str, name: str) -> list[Doc]:
    found: list[Doc] = by_key(docs)[(kind, name)]["rules"]
    return found


VALUE_SETS: dict[str, Doc] = {
    "defaults": {},
    "cert-manager": {"webhook": {"certificate": {"mode": "certManager"}}},
    "given-secret": {
        "webhook": {
            "certificate": {"mode": "secret", "secretName": "my-webhook-tls"},
            "clientCA": {"configMap": "apiserver-ca", "required": True},
        }
    },
    "features": {
        "replicas": 3,
        "image": {"repository": "registry.example/topogate", "tag": "v0.1.0"},
        "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
        "features": {
            "fairSharing": True,
            "nativeGangs": "off",
            "exactBudget": 0,
            "nodeFailureGrace": 60,
            "kubeApiQps": 50,
            "kubeApiBurst": 100,
            "logLevel": "DEBUG",
        },
        "leaderElection": {"leaseName": "tg", "leaseDuration": 30, "renewDeadline": 20},
        "metrics": {"host": "0.0.0.0", "service": {"enabled": True}},
        "dashboard": {"enabled": True},
        "extraArgs": ["--ungate-interval=0.5"],
    },
    "external": {"crds": {"install": False}, "rbac": {"create": False}},
}


def test_helm_lints_the_chart_with_every_value_set(helm: str) -> None:
    for name, values in VALUE_SETS.items():
        done = run_helm(helm, "lint", "--strict", str(CHART), values=values)
        assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"


def test_the_defaults_render_the_kustomize_base(helm: str) -> None:
    """Everything `kubectl apply -k config/default` makes, the chart makes alike; only the
    Namespace differs (helm install --create-namespace makes it), and the CRDs are kept on
    uninstall."""
    chart = by_key(template(helm))
    base = by_key(kustomize())
    assert base.pop(("Namespace", "topogate-system"))
    for (kind, _), doc in chart.items():
        if kind == "CustomResourceDefinition":
            annotations = doc["metadata"].pop("annotations")
            assert annotations == {"helm.sh/resource-policy": "keep"}
    assert sorted(chart) == sorted(base)
    for key, doc in base.items():
        assert chart[key] == doc, key


def test_value_sets_render_what_they_say(helm: str) -> None:
    # The built-in shared CA (defaults): serve keeps it in a Secret and injects it.
    docs = template(helm)
    args = serve_args(docs)
    assert args.webhook_ca_secret == ("topogate-system", "topogate-webhook-ca")
    assert args.webhook_inject_ca == "topogate" and args.metrics_host == "127.0.0.1"
    assert pod_spec(docs)["volumes"][0] == {"name": "certs", "emptyDir": {}}

    # cert-manager: its Certificate's Secret mounted, its cainjector fills the caBundle, so
    # serve neither injects nor may patch the configurations.
    docs = template(helm, VALUE_SETS["cert-manager"])
    objects = by_key(docs)
    certificate = objects[("Certificate", "topogate-webhook-cert")]
    assert certificate["spec"]["dnsNames"][0] == "topogate-webhook.topogate-system.svc"
    assert certificate["spec"]["issuerRef"] == {"name": "topogate-selfsigned", "kind": "Issuer"}
    assert ("Issuer", "topogate-selfsigned") in objects
    args = serve_args(docs)
    assert args.webhook_inject_ca is None and args.webhook_ca_secret is None
    assert pod_spec(docs)["volumes"][0]["secret"] == {"secretName": "topogate-webhook-cert"}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotations = objects[(kind, "topogate")]["metadata"]["annotations"]
        assert annotations == {
            "cert-manager.io/inject-ca-from": "topogate-system/topogate-webhook-cert"
        }
    groups = {
        g for rule in rules(docs, "ClusterRole", "topogate-manager") for g in rule["apiGroups"]
    }
    assert "admissionregistration.k8s.io" not in groups
    assert all(
        "secrets" not in r["resources"] for r in rules(docs, "Role", "topogate-leader-election")
    )
    issuer = {"name": "corp-ca", "kind": "ClusterIssuer"}
    mine = {"webhook": {"certificate": {"mode": "certManager", "issuerRef": issuer}}}
    objects = by_key(template(helm, mine))
    assert ("Issuer", "topogate-selfsigned") not in objects
    assert objects[("Certificate", "topogate-webhook-cert")]["spec"]["issuerRef"] == issuer

    # A given Secret: mounted read-only, its ca.crt injected by serve; the client CA as
    # config/client-auth has it.
    docs = template(helm, VALUE_SETS["given-secret"])
    args = serve_args(docs)
    assert args.webhook_inject_ca == "topogate" and args.webhook_ca_secret is None
    assert options(args)["client_auth"] == ClientAuth(
        ca="/var/run/topogate/client-ca/ca.crt", required=True
    )
    pod = pod_spec(docs)
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["certs"]["secret"] == {"secretName": "my-webhook-tls"}
    assert volumes["client-ca"]["configMap"] == {"name": "apiserver-ca"}
    assert pod["containers"][0]["volumeMounts"][0]["readOnly"] is True

    # serve's switches, image, replicas, resources, leader election, metrics exposure.
    docs = template(helm, VALUE_SETS["features"])
    args = serve_args(docs)
    assert args.fair_sharing is True and args.native_gangs == "off"
    assert args.exact_budget == 0 and args.node_failure_grace == 60
    assert args.kube_api_qps == 50 and args.kube_api_burst == 100
    assert args.log_level == "DEBUG" and args.ungate_interval == 0.5
    assert (args.leader_lease, args.lease_duration, args.renew_deadline) == ("tg", 30, 20)
    assert args.metrics_host == "0.0.0.0" and args.metrics_port == 8080 and args.dashboard
    objects = by_key(docs)
    manager = objects[("Deployment", "topogate-manager")]
    assert manager["spec"]["replicas"] == 3
    container = manager["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/topogate:v0.1.0"
    assert container["resources"] == {
        "requests": {"cpu": "2", "memory": "4Gi"},
        "limits": {"memory": "8Gi"},
    }
    assert {"name": "metrics", "containerPort": 8080} in container["ports"]
    assert objects[("Service", "topogate-metrics")]["spec"]["ports"][0]["targetPort"] == "metrics"

    # CRDs and RBAC managed elsewhere: neither is rendered; the ServiceAccount still is.
    kinds = {d["kind"] for d in template(helm, VALUE_SETS["external"])}
    assert not kinds & {"CustomResourceDefinition", "ClusterRole", "Role", "RoleBinding"}
    assert "ServiceAccount" in kinds
    bare = {"serviceAccount": {"create": False, "name": "mine"}}
    docs = template(helm, bare)
    assert "ServiceAccount" not in {d["kind"] for d in docs}
    assert pod_spec(docs)["serviceAccountName"] == "mine"
    binding = by_key(docs)[("ClusterRoleBinding", "topogate-manager")]
    assert binding["subjects"][0]["name"] == "mine"


def test_another_namespace_is_followed_everywhere(helm: str) -> None:
    docs = template(helm, namespace="batch-admission")
    args = serve_args(docs)
    assert args.leader_namespace == "batch-admission"
    assert args.webhook_ca_secret == ("batch-admission", "topogate-webhook-ca")
    assert args.webhook_dns_name == ["topogate-webhook.batch-admission.svc"]
    objects = by_key(docs)
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in objects[(kind, "topogate")]["webhooks"]:
            assert hook["clientConfig"]["service"]["namespace"] == "batch-admission"
            # An outage never blocks the control plane nor topogate's own namespace.
            for expression in (hook.get("namespaceSelector") or {}).get("matchExpressions", []):
                assert expression["values"] == ["kube-system", "batch-admission"]
    namespaced = [d for d in docs if d["kind"] not in {"CustomResourceDefinition", "ClusterRole"}]
    for doc in namespaced:
        if "Webhook" in doc["kind"] or doc["kind"] == "ClusterRoleBinding":
            continue
        assert doc["metadata"]["namespace"] == "batch-admission", doc["kind"]
    # The Lease elsewhere: the CA Secret's rules stay in the release's namespace.
    docs = template(helm, {"leaderElection": {"namespace": "leases"}}, namespace="batch-admission")
    objects = by_key(docs)
    assert objects[("Role", "topogate-leader-election")]["metadata"]["namespace"] == "leases"
    ca_role = objects[("Role", "topogate-webhook-ca")]
    assert ca_role["metadata"]["namespace"] == "batch-admission"
    assert ca_role["rules"][1]["resourceNames"] == ["topogate-webhook-ca"]


def test_bad_values_are_refused_naming_the_value(helm: str) -> None:
    assert 'webhook.certificate.mode: "bogus" is not one of builtin, certManager, secret' in (
        refusal(helm, {"webhook": {"certificate": {"mode": "bogus"}}})
    )
    assert "webhook.certificate.secretName" in refusal(
        helm, {"webhook": {"certificate": {"mode": "secret"}}}
    )
    assert 'features.nativeGangs: "maybe"' in refusal(helm, {"features": {"nativeGangs": "maybe"}})
    assert "metrics.service.enabled" in refusal(helm, {"metrics": {"service": {"enabled": True}}})
    assert "dashboard.enabled" in refusal(
        helm, {"dashboard": {"enabled": True}, "metrics": {"enabled": False}}
    )
    assert "serviceAccount.name" in refusal(helm, {"serviceAccount": {"create": False, "name": ""}})


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"replicas": "two"}, "at '/replicas': got string, want integer"),
        ({"replicas": -1}, "at '/replicas': minimum: got -1, want 0"),
        ({"webhook": {"port": "9443x"}}, "at '/webhook/port': got string, want integer"),
        ({"metrics": {"port": 70000}}, "at '/metrics/port': maximum"),
        ({"resources": "big"}, "at '/resources': got string, want object"),
        ({"nodeSelector": ["gpu"]}, "at '/nodeSelector': got array, want object"),
        ({"tolerations": {"key": "gpu"}}, "at '/tolerations': got object, want array"),
        ({"podAnnotations": {"a": 1}}, "at '/podAnnotations/a': got number, want string"),
        ({"crds": {"install": "yes"}}, "at '/crds/install': got string, want boolean"),
        ({"image": {"tag": 1.1}}, "at '/image/tag': got number, want string"),
        ({"extraArgs": "--x"}, "at '/extraArgs': got string, want array"),
        ({"features": {"exactBudget": -1}}, "at '/features/exactBudget'"),
        ({"leaderElection": {"leaseDuration": "soon"}}, "at '/leaderElection/leaseDuration'"),
        ({"replica": 3}, "additional properties 'replica' not allowed"),
    ],
)
def test_values_of_the_wrong_type_are_refused_naming_the_value(
    helm: str, values: Doc, says: str
) -> None:
    # Without the chart's schema each rendered (replicas: two, a port of "9443x") and the API
    # server refused the Deployment at install, naming no value; a typo was silently ignored.
    assert says in refusal(helm, values)


def test_numbers_given_as_strings_still_render(helm: str) -> None:
    docs = template(helm, {"leaderElection": {"leaseDuration": "30"}, "image": {"tag": "1.10"}})
    assert "--lease-duration=30" in pod_spec(docs)["containers"][0]["args"]


def _namespace(api: client.ApiClient, name: str) -> None:
    with contextlib.suppress(client.ApiException):  # made by an earlier test
        client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})


def dry_run_apply(api: client.ApiClient, docs: list[Doc]) -> Iterator[str]:
    """Server-side apply every object with dryRun=All: the API server validates each one
    (schemas, CRD structure, webhook configurations, RBAC escalation checks)."""
    resources = dynamic.DynamicClient(api).resources
    for doc in docs:
        resource = resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        applied = resource.server_side_apply(
            body=doc,
            name=doc["metadata"]["name"],
            namespace=doc["metadata"].get("namespace"),
            field_manager="topogate-helm-test",
            dry_run="All",
            force_conflicts=True,
        )
        assert applied.metadata.name == doc["metadata"]["name"]
        yield f"{doc['kind']}/{doc['metadata']['name']}"


@pytest.mark.parametrize(
    ("values", "namespace"),
    [
        ({}, "topogate-system"),
        (VALUE_SETS["given-secret"], "batch-admission"),
        (VALUE_SETS["features"], "topogate-system"),
    ],
    ids=["defaults", "given-secret-elsewhere", "features"],
)
def test_the_api_server_accepts_the_rendered_objects(
    helm: str, crds: client.ApiClient, values: Doc, namespace: str
) -> None:
    docs = template(helm, values, namespace=namespace)
    _namespace(crds, namespace)
    applied = list(dry_run_apply(crds, docs))
    kinds = {a.split("/")[0] for a in applied}
    assert {
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ClusterRole",
        "Role",
        "Deployment",
        "Service",
    } <= kinds
    assert ("CustomResourceDefinition" in kinds) == (values.get("crds", {}).get("install", True))
