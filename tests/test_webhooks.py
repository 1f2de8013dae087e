"""The webhooks on the real control plane: the API server itself calls them over TLS."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.cluster import drop_webhooks, eventually
from topogate.testing.controlplane import WEBHOOK_CLIENT_CA, ControlPlane, free_port
from topogate.testing.localcluster import JOBSET_CRD

pytestmark = pytest.mark.cluster

BLOCK, RACK = "cloud.com/block", "cloud.com/rack"
NS = "wh-test"


def _job(
    name: str, queue: str | None = "q", annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue} if queue else {}},
        "spec": {
            "parallelism": 4,
            "completions": 4,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]},
            },
        },
    }


class WebhookServer:
    def __init__(self, plane: ControlPlane, directory: Path) -> None:
        self.plane, self.directory, self.port = plane, directory, free_port()
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        plane = self.plane
        argv = [
            sys.executable, "-m", "topogate", "webhook", "--host", "127.0.0.1", "--port", str(self.port),
            "--cert-dir", str(self.directory / "certs"), "--ip", "127.0.0.1",
            "--kubeconfig", str(self.plane.kubeconfig), "--register-url", f"https://127.0.0.1:{self.port}",
            "--reload-interval", "1",
            # The API server presents the control plane's webhook client certificate.
            "--client-ca", str(plane.directory / WEBHOOK_CLIENT_CA), "--require-client-cert",
        ]  # fmt: skip
        with open(self.directory / "webhook.log", "w") as log:
            self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert "webhooks ready" in line, (self.directory / "webhook.log").read_text()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            if self.process.stdout is not None:
                self.process.stdout.close()
            self.process = None


@pytest.fixture(scope="module")
def webhook(
    crds: client.ApiClient, control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[client.ApiClient]:
    api = crds
    client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
    server = WebhookServer(control_plane, tmp_path_factory.mktemp("webhook"))
    server.start()
    batch = client.BatchV1Api(api)
    counter = iter(range(1000))

    def webhook_answers() -> bool:
        # The API server learns about new configurations through an informer: wait for it.
        job = batch.create_namespaced_job(NS, _job(f"probe-{next(counter)}"))
        return bool(job.spec.suspend)

    eventually(webhook_answers, timeout=30)
    api.webhook_server = server  # type: ignore[attr-defined]
    try:
        yield api
    finally:
        server.stop()
        drop_webhooks(control_plane)


def test_queued_job_is_suspended_by_the_api_servers_call(webhook: client.ApiClient) -> None:
    batch = client.BatchV1Api(webhook)
    assert batch.create_namespaced_job(NS, _job("queued")).spec.suspend is True
    assert batch.read_namespaced_job("queued", NS).spec.suspend is True
    assert not batch.create_namespaced_job(NS, _job("free", queue=None)).spec.suspend


def test_dry_run_is_mutated_and_not_stored(webhook: client.ApiClient) -> None:
    batch = client.BatchV1Api(webhook)
    assert batch.create_namespaced_job(NS, _job("dry"), dry_run="All").spec.suspend is True
    with pytest.raises(client.ApiException) as error:
        batch.read_namespaced_job("dry", NS)
    assert error.value.status == 404


def test_queued_jobset_is_suspended(webhook: client.ApiClient) -> None:
    extensions = client.ApiextensionsV1Api(webhook)
    try:
        extensions.create_custom_resource_definition(JOBSET_CRD)
    except client.ApiException as error:
        if error.status != 409:  # the end-to-end tests may have installed it already
            raise
    custom = client.CustomObjectsApi(webhook)
    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "labels": {"topogate.dev/queue-name": "q"}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "parallelism": 2,
                            "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
                        }
                    },
                }
            ]
        },
    }

    def create() -> Any:
        return custom.create_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", NS, "jobsets", body
        )

    created = eventually(create)  # until the new CRD serves
    assert created["spec"]["suspend"] is True


def test_invalid_topology_annotation_is_refused_with_the_webhooks_message(
    webhook: client.ApiClient,
) -> None:
    batch = client.BatchV1Api(webhook)
    bad = _job(
        "bad",
        annotations={
            "kueue.x-k8s.io/podset-required-topology": RACK,
            "kueue.x-k8s.io/podset-preferred-topology": BLOCK,
        },
    )
    with pytest.raises(client.ApiException) as error:
        batch.create_namespaced_job(NS, bad)
    assert error.value.status == 422
    body = str(error.value.body)
    assert (
        'admission webhook \\"kueue-queued-jobs.validate.topogate.dev\\" denied the request' in body
    )
    assert (
        "spec.template.metadata.annotations: Invalid value: must not contain more than one topology annotation"
        in body
    )


def test_an_unknown_annotation_comes_back_as_a_warning_header(webhook: client.ApiClient) -> None:
    """What kubectl prints as ``Warning: ...``: the API server passes the webhook's warnings
    on as HTTP Warning headers (code 299), and the job is still created."""
    batch = client.BatchV1Api(webhook)
    typo = _job("typo", annotations={"kueue.x-k8s.io/podset-required-topolgy": RACK})
    created, status, headers = batch.create_namespaced_job_with_http_info(NS, typo)
    assert status == 201
    assert created.spec.suspend is True
    assert headers["Warning"] == (
        '299 - "spec.template.metadata.annotations[kueue.x-k8s.io/podset-required-topolgy]: '
        'unknown; did you mean kueue.x-k8s.io/podset-required-topology?"'
    )
    _, _, clean = batch.create_namespaced_job_with_http_info(NS, _job("clean"))
    assert "Warning" not in clean


def test_a_mistyped_prefix_and_a_job_template_key_come_back_as_warnings(
    webhook: client.ApiClient,
) -> None:
    """A key under kueue.k8s.io/ (not kueue.x-k8s.io/) and a Kueue key on a JobSet's Job
    template were ignored with no word: kubectl now prints both, and the jobs are created."""
    batch = client.BatchV1Api(webhook)
    typo = _job("prefix", annotations={"kueue.k8s.io/podset-required-topology": RACK})
    _, status, headers = batch.create_namespaced_job_with_http_info(NS, typo)
    assert status == 201
    assert headers["Warning"] == (
        '299 - "spec.template.metadata.annotations[kueue.k8s.io/podset-required-topology]: '
        'unknown; did you mean kueue.x-k8s.io/podset-required-topology?"'
    )
    extensions = client.ApiextensionsV1Api(webhook)
    try:
        extensions.create_custom_resource_definition(JOBSET_CRD)
    except client.ApiException as error:
        if error.status != 409:  # installed by another test already
            raise
    custom = client.CustomObjectsApi(webhook)
    pod_template = {"spec": {"containers": [{"name": "c", "image": "x"}]}}
    job_template = {
        "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": RACK}},
        "spec": {"parallelism": 2, "template": pod_template},
    }
    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js-high", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": job_template}]},
    }

    def create() -> Any:
        return custom.create_namespaced_custom_object_with_http_info(
            "jobset.x-k8s.io", "v1alpha2", NS, "jobsets", body
        )

    _, status, headers = eventually(create)  # until the new CRD serves
    assert status == 201
    assert headers["Warning"] == (
        '299 - "spec.replicatedJobs[0].template.metadata.annotations'
        "[kueue.x-k8s.io/podset-required-topology]: not read on a Job template; move it to "
        'spec.replicatedJobs[0].template.spec.template.metadata.annotations"'
    )


def test_level_outside_the_queues_topology_is_refused(webhook: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(webhook)
    group = ("topogate.dev", "v1alpha1")
    custom.create_cluster_custom_object(
        *group,
        "topologies",
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "Topology",
            "metadata": {"name": "wh-dc"},
            "spec": {
                "levels": [
                    {"nodeLabel": BLOCK},
                    {"nodeLabel": RACK},
                    {"nodeLabel": "kubernetes.io/hostname"},
                ]
            },
        },
    )
    custom.create_cluster_custom_object(
        *group,
        "resourceflavors",
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "wh-gpu"},
            "spec": {"nodeLabels": {"pool": "gpu"}, "topologyName": "wh-dc"},
        },
    )
    custom.create_cluster_custom_object(
        *group,
        "clusterqueues",
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "ClusterQueue",
            "metadata": {"name": "wh-cq"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "wh-gpu",
                                "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 64}],
                            }
                        ],
                    }
                ]
            },
        },
    )
    custom.create_namespaced_custom_object(
        *group,
        NS,
        "localqueues",
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "LocalQueue",
            "metadata": {"name": "training"},
            "spec": {"clusterQueue": "wh-cq"},
        },
    )
    batch = client.BatchV1Api(webhook)
    job = _job(
        "zone",
        queue="training",
        annotations={"kueue.x-k8s.io/podset-required-topology": "cloud.com/zone"},
    )

    def refused_by_the_queues_topology() -> bool:
        # The standalone webhook reads the queues as a snapshot at most 5 s old (no API call
        # per review): the queue made a moment ago is known within that time.
        try:
            batch.create_namespaced_job(NS, job, dry_run="All")
        except client.ApiException as error:
            return "not a level of topology" in str(error.body)
        return False

    eventually(refused_by_the_queues_topology, timeout=15)
    with pytest.raises(client.ApiException) as error:
        batch.create_namespaced_job(NS, job)
    assert (
        "spec.template.metadata.annotations[kueue.x-k8s.io/podset-required-topology]: 'cloud.com/zone' is "
        "not a level of topology 'wh-dc' used by queue 'training'"
    ) in str(error.value.body)
    job["spec"]["template"]["metadata"]["annotations"][
        "kueue.x-k8s.io/podset-required-topology"
    ] = RACK
    assert batch.create_namespaced_job(NS, job).spec.suspend is True


def test_flavor_with_a_bad_label_key_is_refused_by_the_webhook(webhook: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(webhook)
    with pytest.raises(client.ApiException) as error:
        custom.create_cluster_custom_object(
            "topogate.dev",
            "v1alpha1",
            "resourceflavors",
            {
                "apiVersion": "topogate.dev/v1alpha1",
                "kind": "ResourceFlavor",
                "metadata": {"name": "wh-bad"},
                "spec": {"nodeLabels": {"bad key!": "x"}},
            },
        )
    assert "ResourceFlavor wh-bad: spec.nodeLabels.bad key!" in str(error.value.body)


def test_pod_of_an_admitted_workload_comes_out_gated(webhook: client.ApiClient) -> None:
    core = client.CoreV1Api(webhook)
    pod = {
        "metadata": {
            "name": "worker-0",
            "labels": {"topogate.dev/podset": "main"},
            "annotations": {"topogate.dev/workload": "job-train"},
        },
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    created = core.create_namespaced_pod(NS, pod)
    assert [g.name for g in created.spec.scheduling_gates] == ["topogate.dev/topology"]
    conditions = eventually(lambda: core.read_namespaced_pod("worker-0", NS).status.conditions)
    assert any(c.type == "PodScheduled" and c.reason == "SchedulingGated" for c in conditions)
    plain = core.create_namespaced_pod(
        NS, {"metadata": {"name": "plain"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    )
    assert not plain.spec.scheduling_gates


def test_kube_system_stays_writable_while_the_webhook_is_down(webhook: client.ApiClient) -> None:
    webhook.webhook_server.stop()  # type: ignore[attr-defined]
    batch = client.BatchV1Api(webhook)
    # Protected namespaces never call the webhook, so nothing there depends on it.
    assert (
        batch.create_namespaced_job("kube-system", _job("system-job")).metadata.name == "system-job"
    )
    client.CoreV1Api(webhook).create_namespaced_config_map(
        "kube-system", {"metadata": {"name": "still-writable"}}
    )
    # Elsewhere a queued job is refused rather than started unsuspended (failurePolicy Fail).
    with pytest.raises(client.ApiException) as error:
        batch.create_namespaced_job(NS, _job("while-down"))
    assert error.value.status == 500 and "failed calling webhook" in str(error.value.body)
    assert not batch.create_namespaced_job(NS, _job("unqueued", queue=None)).spec.suspend


def test_only_the_api_server_gets_past_the_webhooks_handshake(
    webhook: client.ApiClient, control_plane: ControlPlane
) -> None:
    """The refusals and warnings above reached the API server, which presented its webhook
    client certificate (its admission configuration); anyone else, even with a certificate
    the API server itself trusts (the admin's), is refused at the TLS handshake."""
    import socket
    import ssl

    server = webhook.webhook_server  # type: ignore[attr-defined]
    d = control_plane.directory
    for chain in (None, (d / "admin.crt", d / "admin.key")):
        context = ssl.create_default_context(cafile=str(server.directory / "certs" / "ca.crt"))
        if chain is not None:
            context.load_cert_chain(*map(str, chain))
        with (
            pytest.raises((ssl.SSLError, ConnectionError)),
            socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            tls.recv(100)  # TLS 1.3: the refusal arrives with the first read
