"""Kubeflow's v1 training-operator (github.com/kubeflow/training-operator, built by
hack/controlplane/build.sh) in the local control plane, running PyTorchJobs only: its CRD and
validating webhook from the same release, as :meth:`ControlPlane.start_training_operator`
starts it.

The operator manages its webhook certificate with a rotator that (1) reads a CA and serving
certificate from the Secret ``training-operator-webhook-cert`` in ``MY_POD_NAMESPACE``, keeping
them when they are valid for ``training-operator.<namespace>.svc``, (2) waits until a file
``/tmp/k8s-webhook-server/serving-certs/tls.crt`` exists (in a cluster, the mounted Secret),
and (3) writes the CA into the ValidatingWebhookConfiguration
``validator.training-operator.kubeflow.org``; only then does it start its controllers. Here
the Secret is written beforehand with a CA of our own (RSA, PKCS#1: the rotator parses no
other key) and a serving certificate also valid for 127.0.0.1, the webhook server reads them
from the operator's own TMPDIR, and the configuration points at 127.0.0.1.

The rotator's path is a constant of its source (no flag, not under TMPDIR), and it looks for
the file once, when it starts: the file is written there only for that moment, one plane of
the machine at a time (a lock), and removed once the operator's log says the rotator found it,
so nothing is left behind in /tmp. A file that was there already is not ours: left as it is.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import fcntl
import ipaddress
import os
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

if TYPE_CHECKING:
    from topogate.testing.controlplane import ControlPlane

NAME = "training-operator"
NAMESPACE = "default"  # MY_POD_NAMESPACE: where its certificate Secret lives
SECRET = "training-operator-webhook-cert"
CONFIGURATION = "validator.training-operator.kubeflow.org"  # the name its rotator injects into
CA_NAME = "training-operator-ca"  # the rotator checks the CA certificate for this DNS name
# The rotator's own check for the mounted certificate (a fixed path in its source).
ROTATOR_CERT = Path("/tmp/k8s-webhook-server/serving-certs/tls.crt")
# What the rotator logs once it found it (open-policy-agent/cert-controller).
ROTATOR_SATISFIED = b"certs are ready in "
_PYTORCHJOBS = "/apis/kubeflow.org/v1"


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,  # PKCS#1: "RSA PRIVATE KEY"
        serialization.NoEncryption(),
    )


def certificates() -> dict[str, bytes]:
    """ca.crt, ca.key, tls.crt and tls.key as the rotator keeps them in its Secret; valid a
    year (it renews what expires within 90 days)."""
    now = dt.datetime.now(dt.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(CA_NAME)]), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    names: list[x509.GeneralName] = [
        x509.DNSName(f"{NAME}.{NAMESPACE}.svc"),
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    serving = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{NAME}.svc")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return {
        "ca.crt": ca.public_bytes(serialization.Encoding.PEM),
        "ca.key": _pem_key(ca_key),
        "tls.crt": serving.public_bytes(serialization.Encoding.PEM),
        "tls.key": _pem_key(key),
    }


def _configuration(manifest: Path, port: int, ca_pem: bytes) -> dict[str, Any]:
    """The release's ValidatingWebhookConfiguration, PyTorchJob's webhook only (the other
    kinds' schemes are not enabled), its Service reference turned into a loopback URL."""
    [doc] = [
        d
        for d in yaml.safe_load_all(manifest.read_text())
        if (d or {}).get("kind") == "ValidatingWebhookConfiguration"
    ]
    hooks = [h for h in doc["webhooks"] if "pytorchjobs" in h["rules"][0]["resources"]]
    for hook in hooks:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {
            "url": f"https://127.0.0.1:{port}{path}",
            "caBundle": base64.b64encode(ca_pem).decode(),
        }
    return {
        "apiVersion": doc["apiVersion"],
        "kind": doc["kind"],
        "metadata": {"name": CONFIGURATION},
        "webhooks": hooks,
    }


def start(plane: ControlPlane, bin_dir: Path) -> None:
    """Install the CRD, the certificate Secret and the webhook configuration, start the
    operator (PyTorchJob only) on loopback ports, and wait until its webhook refuses a bad
    PyTorchJob (its controllers start once the rotator is satisfied, before readiness)."""
    # Imported here: controlplane imports this module.
    from topogate.testing.controlplane import ControlPlaneError, free_port

    if not (bin_dir / NAME).is_file():
        raise ControlPlaneError(
            f"{bin_dir / NAME} is missing: run hack/controlplane/build.sh and point "
            f"$TOPOGATE_CONTROLPLANE_BIN at the bin directory it prints"
        )
    crd = yaml.safe_load((bin_dir / "training-operator-crd.yaml").read_text())
    plane._apply("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    plane._wait_for(
        lambda: plane._crd_established("pytorchjobs.kubeflow.org"),
        "the PyTorchJob CRD Established",
        30,
    )
    directory = plane.directory / NAME
    certs_dir = directory / "k8s-webhook-server" / "serving-certs"
    certs_dir.mkdir(parents=True, exist_ok=True)
    made = certificates()
    for name in ("tls.crt", "tls.key"):
        (certs_dir / name).write_bytes(made[name])
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NAMESPACE},
        "data": {k: base64.b64encode(v).decode() for k, v in made.items()},
    }
    plane._apply(f"/api/v1/namespaces/{NAMESPACE}/secrets", secret)
    port, probe = free_port(), free_port()
    plane._apply(
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        _configuration(bin_dir / "training-operator-webhooks.yaml", port, made["ca.crt"]),
    )
    with _rotator_file(made["tls.crt"], plane):
        _spawn(plane, bin_dir, port, probe, directory)


def _spawn(plane: ControlPlane, bin_dir: Path, port: int, probe: int, directory: Path) -> None:
    """Start the operator and wait until its rotator found the file and its webhook answers."""
    log = plane.directory / f"{NAME}.log"
    plane._spawn(
        NAME,
        [
            str(bin_dir / NAME),
            f"--kubeconfig={plane.kubeconfig}",
            "--enable-scheme=pytorchjob",
            f"--webhook-server-port={port}",
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{probe}",
            "--zap-log-level=info",
        ],
        env={"MY_POD_NAMESPACE": NAMESPACE, "TMPDIR": str(directory)},
    )
    plane._wait(NAME, f"http://127.0.0.1:{probe}/readyz", None, 90)
    plane._wait_for(lambda: ROTATOR_SATISFIED in log.read_bytes(), "its rotator's certs ready", 60)
    plane._wait_for(lambda: _refused_by_its_webhook(plane), "PyTorchJob's webhook answering", 30)


@contextlib.contextmanager
def _rotator_file(cert: bytes, plane: ControlPlane, timeout: float = 240.0) -> Iterator[None]:
    """The rotator's file, there while the block runs; one plane of the machine at a time (a
    lock on the file's top directory, /tmp: another plane holds it until its operator is ready,
    3 minutes at the most, and the kernel releases it with a process that dies). Removed
    after, with the directories made for it, unless it was there before."""
    from topogate.testing.controlplane import ControlPlaneError

    top = ROTATOR_CERT.parents[2]  # /tmp
    lock = os.open(top, os.O_RDONLY)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ControlPlaneError(
                        f"{NAME}: another plane held the lock on {top} for {timeout:.0f} s "
                        f"(starting its training-operator); see {plane.directory}"
                    ) from None
                time.sleep(0.2)
        made = [d for d in (ROTATOR_CERT.parents[1], ROTATOR_CERT.parent) if not d.exists()]
        ours = not ROTATOR_CERT.exists()
        if ours:
            ROTATOR_CERT.parent.mkdir(parents=True, exist_ok=True)
            ROTATOR_CERT.write_bytes(cert)
        try:
            yield
        finally:
            if ours:
                ROTATOR_CERT.unlink(missing_ok=True)
                for directory in reversed(made):
                    with contextlib.suppress(OSError):  # not empty: someone else's now
                        directory.rmdir()
    finally:
        os.close(lock)  # releases the lock


def _refused_by_its_webhook(plane: ControlPlane) -> bool:
    """A PyTorchJob with two masters, in a dry run: the CRD takes it, the operator's webhook
    refuses it ("must be 1")."""
    container = {"name": "pytorch", "image": "probe"}
    probe = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "topogate-probe"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 2, "template": {"spec": {"containers": [container]}}}
            }
        },
    }
    try:
        plane.request("POST", f"{_PYTORCHJOBS}/namespaces/default/pytorchjobs?dryRun=All", probe)
    except urllib.error.HTTPError as error:
        return error.code in (400, 403, 422) and b"must be 1" in error.read()
    return False
