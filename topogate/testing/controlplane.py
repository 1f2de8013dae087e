"""A local Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-scheduler and
kube-controller-manager running the Job, StatefulSet and garbage-collector controllers; on
request also JobSet's and LeaderWorkerSet's own controllers and webhooks (``start_jobset``,
``start_lws``), KubeRay's operator (``start_kuberay``), Kubeflow's MPI operator
(``start_mpi_operator``), and Kubeflow Trainer v2's controller manager (``start_trainer``).

Started envtest-style from binaries built by ``hack/controlplane/build.sh``: client
certificates for authentication, RBAC authorization, and the ServiceAccount and
TaintNodesByCondition admission plugins off (no service-account controller runs, no kubelet
lifts the not-ready taint). The Job controller creates a Job's pods as in a cluster, and the
garbage collector deletes what an owner reference ties to a deleted object. The webhook
admission plugins stay on, so the API server calls topogate's webhooks exactly as in a cluster,
presenting a client certificate (its admission configuration) that they can require.

    python -m topogate.testing.controlplane start --dir DIR [--jobset] [--lws] [--workloads]
        [--training-operator] [--kuberay] [--mpi-operator] [--trainer]
    python -m topogate.testing.controlplane stop --dir DIR
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from topogate.webhooks.certs import issue, make_ca

BIN_ENV = "TOPOGATE_CONTROLPLANE_BIN"
_STATE = "controlplane.json"
JOBSET = "jobset-controller"
_JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2"
LWS = "lws-controller"
_LWS = "/apis/leaderworkerset.x-k8s.io/v1"
KUBERAY = "kuberay-operator"
TRAINER = "trainer-controller-manager"
_TRAINER = "/apis/trainer.kubeflow.org/v1alpha1"
# Workload-Aware Scheduling in Kubernetes 1.36 (alpha): Workload and PodGroup objects, and
# kube-scheduler's gang and topology plugins.
WORKLOAD_GATES = "GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true"
WORKLOAD_API = "scheduling.k8s.io/v1alpha2"


class ControlPlaneError(RuntimeError):
    """The control plane could not be started; the message names the log to read."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def binaries() -> Path:
    """Where the binaries are: $TOPOGATE_CONTROLPLANE_BIN, or what build.sh prints (cached)."""
    if os.environ.get(BIN_ENV):
        return Path(os.environ[BIN_ENV])
    # topogate/testing/controlplane.py -> the repository (an editable install; a wheel has no hack/)
    script = Path(__file__).resolve().parents[2] / "hack" / "controlplane" / "build.sh"
    if not script.exists():
        raise ControlPlaneError(f"set {BIN_ENV} to the directory of kube-apiserver, etc.")
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ControlPlaneError(f"{script} failed:\n{done.stderr[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


# The certificate kube-apiserver presents to every webhook ("*": the tests' webhooks listen on
# 127.0.0.1 at ports chosen later; kube-apiserver picks a kubeconfig user by the webhook's
# host:port, then "*"). topogate's webhooks trust it with --webhook-client-ca.
WEBHOOK_CLIENT_CA = "webhook-client-ca.crt"
ADMISSION_CONFIG = """apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: ValidatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: {kubeconfig}
  - name: MutatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: {kubeconfig}
"""
WEBHOOK_KUBECONFIG = """apiVersion: v1
kind: Config
users:
  - name: "*"
    user:
      client-certificate: {cert}
      client-key: {key}
"""


def webhook_client_ca(kubeconfig: Path) -> Path | None:
    """The CA of the certificate the control plane whose admin kubeconfig this is presents to
    webhooks, or None (a cluster not started here)."""
    path = kubeconfig.parent / WEBHOOK_CLIENT_CA
    return path if path.exists() else None


# ServiceAccounts' requests only, metadata level (no bodies): small, and all an RBAC test needs.
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
  - level: None
"""


@dataclass
class ControlPlane:
    directory: Path
    api_port: int = 0
    pids: dict[str, int] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    argv: dict[str, list[str]] = field(default_factory=dict)
    bin_dir: Path | None = None
    # Kubernetes' own gangs (1.36 alpha): the feature gates on every component and the
    # scheduling.k8s.io/v1alpha2 API served. Off by default: a plane that serves PodGroups
    # turns `serve --native-gangs=auto` on, which only the native-gang tests want.
    workloads: bool = False

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "admin.kubeconfig"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    # --- start ---------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        directory: Path,
        bin_dir: Path | None = None,
        scheduler: bool = True,
        jobset: bool = False,
        lws: bool = False,
        workloads: bool = False,
        training_operator: bool = False,
        kuberay: bool = False,
        mpi_operator: bool = False,
        trainer: bool = False,
    ) -> ControlPlane:
        directory.mkdir(parents=True, exist_ok=True)
        bin_dir = bin_dir or binaries()
        plane = cls(directory, bin_dir=bin_dir, workloads=workloads)
        try:
            plane._start(bin_dir, scheduler)
            if jobset:
                plane.start_jobset()
            if lws:
                plane.start_lws()
            if training_operator:
                plane.start_training_operator()
            if kuberay:
                plane.start_kuberay()
            if mpi_operator:
                plane.start_mpi_operator()
            if trainer:
                plane.start_trainer()
        except BaseException:
            plane.stop()
            raise
        return plane

    def _spawn(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.argv[name] = list(argv)
        log = open(self.directory / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        process = subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=None if env is None else {**os.environ, **env},
        )
        log.close()
        self.processes.append(process)
        self.pids[name] = process.pid
        self._save()

    def _wait(self, name: str, url: str, context: ssl.SSLContext | None, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise ControlPlaneError(
                        f"{name} exited with {process.returncode}; see {self.directory}/*.log"
                    )
            try:
                with urllib.request.urlopen(url, timeout=2, context=context) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        raise ControlPlaneError(
            f"{name} not ready after {timeout:.0f} s; see {self.directory}/{name}.log"
        )

    def _start(self, bin_dir: Path, scheduler: bool) -> None:
        self._write_certificates()
        etcd_port = self._start_etcd(bin_dir)
        self._start_apiserver(bin_dir, etcd_port)
        self._write_kubeconfig()
        if scheduler:
            self._start_scheduler(bin_dir)
            self._start_controller_manager(bin_dir)

    def _write_certificates(self) -> None:
        """The CAs, then the API server's serving, admin client and service-account pairs."""
        d = self.directory
        serving_ca, client_ca = make_ca("topogate-test-serving"), make_ca("topogate-test-clients")
        serving_ca.write(d / "serving-ca.crt", d / "serving-ca.key")
        client_ca.write(d / "client-ca.crt", d / "client-ca.key")
        issue(serving_ca, "localhost", dns_names=["localhost"], ip_addresses=["127.0.0.1"]).write(
            d / "apiserver.crt", d / "apiserver.key"
        )
        admin = issue(client_ca, "admin", organizations=["system:masters"], client=True)
        admin.write(d / "admin.crt", d / "admin.key")
        issue(serving_ca, "service-accounts").write(d / "sa.crt", d / "sa.key")
        # Its own CA: a webhook trusting it trusts kube-apiserver alone, not every client the
        # API server itself accepts.
        webhook_ca = make_ca("topogate-test-webhook-clients")
        webhook_ca.write(d / WEBHOOK_CLIENT_CA, d / "webhook-client-ca.key")
        issue(webhook_ca, "kube-apiserver", client=True).write(
            d / "webhook-client.crt", d / "webhook-client.key"
        )
        kubeconfig = WEBHOOK_KUBECONFIG.format(
            cert=d / "webhook-client.crt", key=d / "webhook-client.key"
        )
        (d / "webhook-client.kubeconfig").write_text(kubeconfig)
        admission = ADMISSION_CONFIG.format(kubeconfig=d / "webhook-client.kubeconfig")
        (d / "admission-config.yaml").write_text(admission)

    def _start_etcd(self, bin_dir: Path) -> int:
        """Start etcd and wait until it is healthy; returns its client port."""
        etcd_port, peer_port = free_port(), free_port()
        self._spawn(
            "etcd",
            [
                str(bin_dir / "etcd"),
                "--name=node0",
                f"--data-dir={self.directory / 'etcd-data'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=node0=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait("etcd", f"http://127.0.0.1:{etcd_port}/health", None, 60)
        return etcd_port

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: every request of a ServiceAccount (the tests that run
        `serve` under config/'s RBAC read what it was refused here), one JSON per line."""
        return self.directory / "audit.log"

    def _start_apiserver(self, bin_dir: Path, etcd_port: int) -> None:
        """Start kube-apiserver on a free port and wait until it is ready."""
        d = self.directory
        self.api_port = free_port()
        (d / "audit-policy.yaml").write_text(AUDIT_POLICY)
        self._spawn(
            "kube-apiserver",
            [
                str(bin_dir / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                f"--secure-port={self.api_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--tls-cert-file={d / 'apiserver.crt'}",
                f"--tls-private-key-file={d / 'apiserver.key'}",
                f"--client-ca-file={d / 'client-ca.crt'}",
                "--authorization-mode=RBAC",
                f"--service-account-issuer=https://127.0.0.1:{self.api_port}/",
                f"--service-account-key-file={d / 'sa.crt'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                f"--admission-control-config-file={d / 'admission-config.yaml'}",
                "--endpoint-reconciler-type=none",
                f"--audit-policy-file={d / 'audit-policy.yaml'}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                *self._gates(),
                *([f"--runtime-config={WORKLOAD_API}=true"] if self.workloads else []),
            ],
        )
        # /readyz needs an authenticated client: the admin certificate.
        self._wait("kube-apiserver", f"{self.url}/readyz", self._admin_context(), 120)

    def _gates(self) -> list[str]:
        """The feature-gate flag of every component (nothing when ``workloads`` is off)."""
        return [f"--feature-gates={WORKLOAD_GATES}"] if self.workloads else []

    def _start_scheduler(self, bin_dir: Path) -> None:
        self._spawn(
            "kube-scheduler",
            [
                str(bin_dir / "kube-scheduler"),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                *self._gates(),
            ],
        )

    def _start_controller_manager(self, bin_dir: Path) -> None:
        """Only the Job, StatefulSet (LeaderWorkerSet's groups are StatefulSets) and
        garbage-collector controllers: what the tests need from a cluster."""
        self._spawn(
            "kube-controller-manager",
            [
                str(bin_dir / "kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--controllers=job-controller,statefulset-controller,garbage-collector-controller",
                "--authentication-skip-lookup=true",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                # Fast enough for tests; the defaults are tuned for big clusters.
                "--concurrent-job-syncs=10",
                *self._gates(),
            ],
        )

    def _write_kubeconfig(self) -> None:
        d = self.directory
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority": str(d / "serving-ca.crt"),
                    },
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(d / "admin.crt"),
                        "client-key": str(d / "admin.key"),
                    },
                }
            ],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
            "current-context": "local",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))

    # --- JobSet ------------------------------------------------------------------------

    def start_jobset(self, bin_dir: Path | None = None) -> None:
        """JobSet's own controller (sigs.k8s.io/jobset, built by build.sh) with the CRD and
        webhooks of the same release: it creates a JobSet's child Jobs (kube-controller-manager
        their pods) and defaults and validates JobSets, as installed in a cluster. Its cert
        rotation is off (it issues for an in-cluster Service name and stores a Secret); the
        webhooks are served on 127.0.0.1 with a certificate made here and registered by URL.
        Does nothing if it runs already."""
        if JOBSET in self.pids:
            return
        bin_dir = bin_dir or self.bin_dir or binaries()
        self._apply(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            yaml.safe_load((bin_dir / "jobset-crd.yaml").read_text()),
        )
        self._wait_for(self._jobset_crd_established, "the JobSet CRD Established", 30)
        port, ca_pem = self._start_jobset_controller(bin_dir)
        self._register_jobset_webhooks(bin_dir / "jobset-webhooks.yaml", port, ca_pem)
        # The API server learns of new webhook configurations through an informer: wait
        # until a JobSet comes back defaulted by JobSet's webhook (a dry run, nothing made).
        self._wait_for(self._jobset_defaulted, "JobSet's defaulting webhook answering", 30)

    def _start_jobset_controller(self, bin_dir: Path) -> tuple[int, bytes]:
        """Start it on loopback ports; returns its webhook port and the CA of its certificate."""
        return self._start_controller(JOBSET, "config.jobset.x-k8s.io/v1alpha1", bin_dir)

    def _start_controller(self, name: str, config_version: str, bin_dir: Path) -> tuple[int, bytes]:
        """A controller-runtime controller with a Configuration file (JobSet's and
        LeaderWorkerSet's have the same fields), started on loopback ports: returns its webhook
        port and the CA of its certificate."""
        d = self.directory / name.removesuffix("-controller")
        d.mkdir(exist_ok=True)
        ca = make_ca(f"topogate-test-{name}-webhook")
        serving = issue(ca, "localhost", dns_names=["localhost"], ip_addresses=["127.0.0.1"])
        serving.write(d / "tls.crt", d / "tls.key")  # controller-runtime's default names
        webhook_port, probe_port = free_port(), free_port()
        config = {
            "apiVersion": config_version,
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(d)},
            "metrics": {"bindAddress": "0"},  # "0": no metrics server
            "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        }
        (d / "config.yaml").write_text(yaml.safe_dump(config))
        self._spawn(
            name,
            [
                str(bin_dir / name),
                f"--config={d / 'config.yaml'}",
                f"--kubeconfig={self.kubeconfig}",
                "--zap-log-level=info",
            ],
        )
        # Ready once its webhook server listens with the certificate.
        self._wait(name, f"http://127.0.0.1:{probe_port}/readyz", None, 60)
        return webhook_port, ca.cert_pem

    def _register_jobset_webhooks(self, manifest: Path, port: int, ca_pem: bytes) -> None:
        """JobSet's webhook configurations as its release renders them (names prefixed
        `jobset-` as its install does), each Service reference turned into a loopback URL."""
        self._register_webhooks("jobset", manifest, port, ca_pem)

    def _register_webhooks(self, prefix: str, manifest: Path, port: int, ca_pem: bytes) -> None:
        bundle = base64.b64encode(ca_pem).decode()
        for doc in yaml.safe_load_all(manifest.read_text()):
            kind = str((doc or {}).get("kind", ""))
            if not kind.endswith("WebhookConfiguration"):
                continue  # the Service in front of the webhooks: nothing to route here
            doc["metadata"] = {"name": f"{prefix}-{doc['metadata']['name']}"}
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{port}{path}",
                    "caBundle": bundle,
                }
            self._apply(f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s", doc)

    def _jobset_crd_established(self) -> bool:
        crd = self.request(
            "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io"
        )
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    def _jobset_defaulted(self) -> bool:
        probe = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "topogate-probe"},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "probe",
                        "template": {
                            "spec": {
                                "template": {
                                    "spec": {"containers": [{"name": "probe", "image": "probe"}]}
                                }
                            }
                        },
                    }
                ]
            },
        }
        made = self.request("POST", f"{_JOBSETS}/namespaces/default/jobsets?dryRun=All", probe)
        template = made["spec"]["replicatedJobs"][0]["template"]["spec"]
        # Both set by JobSet's webhook only (the CRD defaults neither).
        return (
            bool(made["spec"].get("successPolicy")) and template.get("completionMode") == "Indexed"
        )

    # --- LeaderWorkerSet ----------------------------------------------------------------

    def start_lws(self, bin_dir: Path | None = None) -> None:
        """LeaderWorkerSet's own controller (sigs.k8s.io/lws, built by build.sh) with the CRD
        and webhooks of the same release, as JobSet's (:meth:`start_jobset`): it makes a
        leader StatefulSet per LeaderWorkerSet and a worker StatefulSet per leader pod
        (kube-controller-manager their pods), and its webhooks default LeaderWorkerSets and
        label their pods. Does nothing if it runs already."""
        if LWS in self.pids:
            return
        bin_dir = bin_dir or self.bin_dir or binaries()
        self.install_lws_crds(bin_dir)
        port, ca_pem = self._start_controller(LWS, "config.lws.x-k8s.io/v1alpha1", bin_dir)
        self._register_webhooks("lws", bin_dir / "lws-webhooks.yaml", port, ca_pem)
        self._wait_for(self._lws_defaulted, "LeaderWorkerSet's defaulting webhook answering", 30)

    def install_lws_crds(self, bin_dir: Path | None = None) -> None:
        """LeaderWorkerSet's CRDs of the release (its own, and DisaggregatedSet's, which its
        controller also watches), created or left as they are, and Established."""
        bin_dir = bin_dir or self.bin_dir or binaries()
        for crd in yaml.safe_load_all((bin_dir / "lws-crd.yaml").read_text()):
            if crd:
                self._apply("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        self._wait_for(
            lambda: self._crd_established("leaderworkersets.leaderworkerset.x-k8s.io"),
            "the LeaderWorkerSet CRD Established",
            30,
        )

    def _crd_established(self, name: str) -> bool:
        crd = self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    def _lws_defaulted(self) -> bool:
        probe = {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "topogate-probe"},
            "spec": {
                "leaderWorkerTemplate": {
                    "workerTemplate": {
                        "spec": {"containers": [{"name": "probe", "image": "probe"}]}
                    }
                }
            },
        }
        made = self.request("POST", f"{_LWS}/namespaces/default/leaderworkersets?dryRun=All", probe)
        # Set by LeaderWorkerSet's webhook only (the CRD does not default it).
        return bool((made["spec"].get("networkConfig") or {}).get("subdomainPolicy"))

    # --- Kubeflow's training-operator ---------------------------------------------------

    def start_training_operator(self, bin_dir: Path | None = None) -> None:
        """Kubeflow's v1 training-operator (PyTorchJobs only) with its CRD and validating
        webhook (:mod:`topogate.testing.trainingoperator`): it makes a PyTorchJob's pods and
        Services while the job is not suspended, and deletes them when it is suspended. Does
        nothing if it runs already."""
        from topogate.testing import trainingoperator

        if trainingoperator.NAME in self.pids:
            return
        trainingoperator.start(self, bin_dir or self.bin_dir or binaries())

    # --- KubeRay -----------------------------------------------------------------------------

    def start_kuberay(self, bin_dir: Path | None = None) -> None:
        """KubeRay's operator (github.com/ray-project/kuberay/ray-operator, built by build.sh)
        with the CRDs of the same release: it makes a RayCluster's head and worker pods
        (kube-scheduler binds them; no kubelet runs them, so no cluster gets Ready) and a
        RayJob's RayCluster. Its optional webhook is left off, as its default install does.
        Does nothing if it runs already."""
        if KUBERAY in self.pids:
            return
        bin_dir = bin_dir or self.bin_dir or binaries()
        self.install_kuberay_crds(bin_dir)
        probe_port = free_port()
        self._spawn(
            KUBERAY,
            [
                str(bin_dir / KUBERAY),
                f"--kubeconfig={self.kubeconfig}",
                "--metrics-addr=0",
                f"--health-probe-bind-address=127.0.0.1:{probe_port}",
                "--enable-leader-election=false",
                "--log-stdout-encoder=console",
            ],
        )
        self._wait(KUBERAY, f"http://127.0.0.1:{probe_port}/readyz", None, 60)

    def install_kuberay_crds(self, bin_dir: Path | None = None) -> None:
        """KubeRay's CRDs of the release (RayCluster, RayJob, and RayService and RayCronJob,
        which its operator also watches), created or left as they are, and Established."""
        bin_dir = bin_dir or self.bin_dir or binaries()
        for crd in yaml.safe_load_all((bin_dir / "kuberay-crd.yaml").read_text()):
            if crd:
                self._apply("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        names = [f"{plural}.ray.io" for plural in ("rayclusters", "rayjobs", "rayservices")]
        self._wait_for(
            lambda: all(self._crd_established(name) for name in names),
            "the ray.io CRDs Established",
            30,
        )

    # --- Kubeflow's MPI operator -------------------------------------------------------------

    def start_mpi_operator(self, bin_dir: Path | None = None) -> None:
        """Kubeflow's MPI operator (MPIJob kubeflow.org/v2beta1) with the CRD of its release
        (:mod:`topogate.testing.mpioperator`): it makes an MPIJob's launcher Job and worker
        pods while the job is not suspended, and deletes the workers (suspending the
        launcher) when it is suspended. Does nothing if it runs already."""
        from topogate.testing import mpioperator

        if mpioperator.NAME in self.pids:
            return
        mpioperator.start(self, bin_dir or self.bin_dir or binaries())

    # --- Kubeflow Trainer v2 ----------------------------------------------------------------

    def start_trainer(self, bin_dir: Path | None = None) -> None:
        """Kubeflow Trainer's controller manager (github.com/kubeflow/trainer/v2, built by
        build.sh) with the CRDs and webhooks of the same release, on JobSet's controller: it
        makes a TrainJob's JobSet from its runtime. Its cert management is off (it issues for
        an in-cluster Service and injects into named configurations); its webhook server reads
        a certificate made here from controller-runtime's default directory under its TMPDIR,
        and the webhooks are registered by loopback URL. Does nothing if it runs already."""
        if TRAINER in self.pids:
            return
        bin_dir = bin_dir or self.bin_dir or binaries()
        self.start_jobset(bin_dir)
        self.install_trainer_crds(bin_dir)
        d = self.directory / "trainer"
        certs = d / "tmp" / "k8s-webhook-server" / "serving-certs"
        certs.mkdir(parents=True, exist_ok=True)
        ca = make_ca(f"topogate-test-{TRAINER}-webhook")
        serving = issue(ca, "localhost", dns_names=["localhost"], ip_addresses=["127.0.0.1"])
        serving.write(certs / "tls.crt", certs / "tls.key")
        webhook_port, probe_port = free_port(), free_port()
        config = {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "certManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": webhook_port},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        }
        (d / "config.yaml").write_text(yaml.safe_dump(config))
        self._spawn(
            TRAINER,
            [
                str(bin_dir / TRAINER),
                f"--config={d / 'config.yaml'}",
                f"--kubeconfig={self.kubeconfig}",
                "--zap-log-level=info",
            ],
            env={"TMPDIR": str(d / "tmp")},
        )
        self._wait(TRAINER, f"http://127.0.0.1:{probe_port}/readyz", None, 90)
        self._register_webhooks(
            "trainer", bin_dir / "trainer-webhooks.yaml", webhook_port, ca.cert_pem
        )
        self._wait_for(self._trainer_validating, "the trainer's TrainJob webhook answering", 30)

    def install_trainer_crds(self, bin_dir: Path | None = None) -> None:
        """Kubeflow Trainer's CRDs of the release (TrainJob, TrainingRuntime,
        ClusterTrainingRuntime), created or left as they are, and Established."""
        bin_dir = bin_dir or self.bin_dir or binaries()
        for crd in yaml.safe_load_all((bin_dir / "trainer-crd.yaml").read_text()):
            if crd:
                self._apply("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        plurals = ("trainjobs", "trainingruntimes", "clustertrainingruntimes")
        self._wait_for(
            lambda: all(self._crd_established(f"{p}.trainer.kubeflow.org") for p in plurals),
            "the trainer.kubeflow.org CRDs Established",
            30,
        )

    def _trainer_validating(self) -> bool:
        """A dry-run TrainJob naming no existing runtime is refused by the trainer's webhook
        (until its configuration is seen, the API server lets it through)."""
        probe = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "topogate-probe"},
            "spec": {"runtimeRef": {"name": "topogate-probe-missing"}},
        }
        try:
            self.request("POST", f"{_TRAINER}/namespaces/default/trainjobs?dryRun=All", probe)
        except urllib.error.HTTPError as error:
            return "denied the request" in error.read().decode(errors="replace")
        return False

    # --- requests as the admin -----------------------------------------------------------

    def _admin_context(self) -> ssl.SSLContext:
        d = self.directory
        context = ssl.create_default_context(cafile=str(d / "serving-ca.crt"))
        context.load_cert_chain(str(d / "admin.crt"), str(d / "admin.key"))
        return context

    def metrics_text(self) -> str:
        """The API server's Prometheus metrics, as text (benchmarks count requests with it)."""
        with urllib.request.urlopen(
            self.url + "/metrics", timeout=30, context=self._admin_context()
        ) as answer:
            return str(answer.read().decode())

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One JSON request to the API server as the admin; an error status raises HTTPError."""
        request = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30, context=self._admin_context()) as answer:
            return json.loads(answer.read() or b"null")

    def _apply(self, collection: str, obj: dict[str, Any]) -> None:
        """Create ``obj`` in ``collection``, or replace the object of its name there."""
        try:
            self.request("POST", collection, obj)
            return
        except urllib.error.HTTPError as error:
            if error.code != 409:
                raise
        path = f"{collection}/{obj['metadata']['name']}"
        version = self.request("GET", path)["metadata"]["resourceVersion"]
        self.request(
            "PUT", path, {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}
        )

    def _wait_for(self, check: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except (urllib.error.URLError, OSError, KeyError) as error:
                last = error
            time.sleep(0.25)
        raise ControlPlaneError(f"no {what} after {timeout:.0f} s ({last}); see {self.directory}")

    # --- faults --------------------------------------------------------------------------

    def restart_apiserver(self, down: float = 0.0, *, kill: bool = False) -> float:
        """Stop kube-apiserver (SIGTERM, or SIGKILL with ``kill``), stay down ``down`` seconds,
        start it again on the same port and etcd; returns when it is ready (the seconds it
        was unreachable). For the resilience tests: clients see refused connections, broken
        watches and, after it, 410s."""
        name = "kube-apiserver"
        started = time.monotonic()
        pid = self.pids.pop(name)
        stopped = [p for p in self.processes if p.pid == pid]
        self.processes = [p for p in self.processes if p.pid != pid]
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        _terminate(pid, 10.0)
        for process in stopped:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
        time.sleep(down)
        self._spawn(name, self.argv[name])
        self._wait(name, f"{self.url}/readyz", self._admin_context(), 120)
        return time.monotonic() - started

    # --- state and stop ------------------------------------------------------------------

    def _save(self) -> None:
        state = {"api_port": self.api_port, "pids": self.pids}
        (self.directory / _STATE).write_text(json.dumps(state))

    @classmethod
    def attach(cls, directory: Path) -> ControlPlane:
        state = json.loads((directory / _STATE).read_text())
        return cls(directory, state["api_port"], {k: int(v) for k, v in state["pids"].items()})

    def stop(self, grace: float = 10.0) -> None:
        """Stop every process this control plane started, newest first; never raises."""
        for name in reversed(list(self.pids)):
            _terminate(self.pids[name], grace)
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=1)
        self.pids.clear()
        if self.directory.exists():
            self._save()


def _terminate(pid: int, grace: float) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return
        except ChildProcessError:
            # Not our child (stopped from another process): poll until it is gone.
            pass
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m topogate.testing.controlplane",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("--dir", type=Path, required=True, help="state, certificates and logs")
    parser.add_argument(
        "--no-scheduler", action="store_true", help="without kube-scheduler and controller-manager"
    )
    parser.add_argument(
        "--jobset", action="store_true", help="with JobSet's controller, CRD and webhooks"
    )
    parser.add_argument(
        "--lws", action="store_true", help="with LeaderWorkerSet's controller, CRD and webhooks"
    )
    parser.add_argument("--kuberay", action="store_true", help="with KubeRay's operator and CRDs")
    parser.add_argument(
        "--training-operator",
        action="store_true",
        help="with Kubeflow's training-operator (PyTorchJob), its CRD and webhook",
    )
    parser.add_argument(
        "--mpi-operator", action="store_true", help="with Kubeflow's MPI operator and MPIJob CRD"
    )
    parser.add_argument(
        "--trainer",
        action="store_true",
        help="with Kubeflow Trainer v2's controller manager (TrainJob), CRDs and webhooks",
    )
    parser.add_argument(
        "--workloads",
        action="store_true",
        help=f"Kubernetes' own gangs: {WORKLOAD_GATES} and {WORKLOAD_API} served",
    )
    args = parser.parse_args(argv)
    if args.action == "start":
        try:
            plane = ControlPlane.start(
                args.dir,
                scheduler=not args.no_scheduler,
                jobset=args.jobset,
                lws=args.lws,
                workloads=args.workloads,
                training_operator=args.training_operator,
                kuberay=args.kuberay,
                mpi_operator=args.mpi_operator,
                trainer=args.trainer,
            )
        except ControlPlaneError as error:
            print(f"controlplane: {error}", file=sys.stderr)
            return 1
        print(plane.kubeconfig)
        return 0
    if (args.dir / _STATE).exists():
        ControlPlane.attach(args.dir).stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
