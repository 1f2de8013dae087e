"""One webhook CA for all replicas: created once (the race has one winner, everyone adopts it),
rotated before it ends (the previous CA stays in the bundle), and serving certificates issued
from it, re-issued when a third of their life is left and reloaded by the server."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from topogate.webhooks.certs import issued_by, make_ca, validity_of
from topogate.webhooks.server import ServingCertificate
from topogate.webhooks.serving import CertificateKeeper, FileStore
from topogate.webhooks.sharedca import (
    CA_CERT,
    CA_KEY,
    PREVIOUS_CA,
    CAUnavailable,
    Stored,
    ensure_ca,
    needs_renewal,
)


def now() -> dt.datetime:
    """The clock at the call: certificates made in a test start five minutes before the real
    now, so a time taken when the module was collected (minutes earlier in a long suite) would
    be before their start and make them look not yet valid."""
    return dt.datetime.now(dt.UTC)


class FakeSecret:
    """The two Secret calls (and the update of a rotation) with the API server's semantics:
    create fails when it exists, replace fails when the version is stale."""

    def __init__(self) -> None:
        self.stored: Stored | None = None
        self.lock = threading.Lock()
        self.creates: list[bool] = []
        self.replaces: list[bool] = []

    def read(self) -> Stored | None:
        with self.lock:
            return self.stored

    def create(self, data: dict[str, bytes]) -> bool:
        with self.lock:
            won = self.stored is None
            if won:
                self.stored = Stored(dict(data), "1")
            self.creates.append(won)
            return won

    def replace(self, data: dict[str, bytes], version: str) -> bool:
        with self.lock:
            won = self.stored is not None and self.stored.version == version
            if won:
                self.stored = Stored(dict(data), str(int(version) + 1))
            self.replaces.append(won)
            return won


class BothMiss(FakeSecret):
    """Both replicas read before either creates."""

    def __init__(self, replicas: int) -> None:
        super().__init__()
        self.barrier = threading.Barrier(replicas)
        self.missed: set[int] = set()

    def read(self) -> Stored | None:
        me = threading.get_ident()
        if me not in self.missed:
            self.missed.add(me)
            self.barrier.wait(5)
            return None
        return super().read()


def test_two_replicas_race_one_create_wins_and_both_hold_the_same_ca() -> None:
    store = BothMiss(2)
    results: dict[str, bytes] = {}

    def replica(name: str) -> None:
        shared = ensure_ca(store, now())
        results[name] = shared.ca.cert_pem + shared.ca.key_pem + shared.bundle

    threads = [threading.Thread(target=replica, args=(n,)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(store.creates) == [False, True]
    assert store.stored is not None
    assert results["a"] == results["b"]
    assert results["a"].startswith(store.stored.data[CA_CERT] + store.stored.data[CA_KEY])


def test_a_ca_near_its_end_is_replaced_once_and_the_old_one_stays_trusted() -> None:
    store = FakeSecret()
    old = make_ca("old", validity=dt.timedelta(days=20))  # inside the 30-day window
    store.stored = Stored({CA_CERT: old.cert_pem, CA_KEY: old.key_pem}, "7")
    rotated = ensure_ca(store, now())
    assert rotated.ca.cert_pem != old.cert_pem
    assert validity_of(rotated.ca.cert_pem)[1] - now() > dt.timedelta(days=4 * 365)
    # The bundle: the new CA, then the old one while it is valid.
    certs = x509.load_pem_x509_certificates(rotated.bundle)
    assert [c.subject.rfc4514_string() for c in certs] == ["CN=topogate-webhook-ca", "CN=old"]
    assert store.stored.data[PREVIOUS_CA] == old.cert_pem and store.stored.version == "8"
    # The other replica adopts it; nobody rotates twice.
    assert ensure_ca(store, now()) == rotated
    assert store.replaces == [True]
    # Once the old CA has ended it leaves the bundle.
    later = ensure_ca(store, now() + dt.timedelta(days=21))
    assert later.bundle == rotated.ca.cert_pem


def test_a_lost_rotation_race_adopts_the_winners_ca() -> None:
    store = FakeSecret()
    old = make_ca("old", validity=dt.timedelta(days=20))
    store.stored = Stored({CA_CERT: old.cert_pem, CA_KEY: old.key_pem}, "1")
    winner = make_ca("winner")

    real_replace = store.replace

    def replace_after_the_winner(data: dict[str, bytes], version: str) -> bool:
        store.stored = Stored({CA_CERT: winner.cert_pem, CA_KEY: winner.key_pem}, "2")
        return real_replace(data, version)

    store.replace = replace_after_the_winner  # type: ignore[method-assign]
    assert ensure_ca(store, now()).ca == winner
    assert store.replaces == [False]


def test_a_secret_that_holds_no_ca_is_reported() -> None:
    store = FakeSecret()
    store.stored = Stored({"token": b"x"}, "1")
    with pytest.raises(CAUnavailable) as error:
        ensure_ca(store, now())
    assert str(error.value) == "the CA store holds no ca.crt and ca.key"


def test_renewal_windows() -> None:
    serving = make_ca("leaf", validity=dt.timedelta(days=30))
    start = validity_of(serving.cert_pem)[0]
    assert not needs_renewal(serving.cert_pem, start + dt.timedelta(days=19), 1 / 3)
    assert needs_renewal(serving.cert_pem, start + dt.timedelta(days=21), 1 / 3)
    assert needs_renewal(serving.cert_pem, start + dt.timedelta(days=1), dt.timedelta(days=30))
    assert needs_renewal(serving.cert_pem, start - dt.timedelta(days=1), 1 / 3)  # not yet valid


def test_a_serving_certificate_near_its_end_is_reissued_and_reloaded(tmp_path: Path) -> None:
    store = FakeSecret()
    clock = [now()]
    keeper = CertificateKeeper(
        store,
        tmp_path,
        ["topogate-webhook.topogate-system.svc"],
        ["127.0.0.1"],
        clock=lambda: clock[0],
        serving_validity=dt.timedelta(days=30),
    )
    bundle, issued = keeper.check()
    assert issued and (tmp_path / "ca.crt").read_bytes() == bundle
    certificate = ServingCertificate(tmp_path)
    first = (tmp_path / "tls.crt").read_bytes()
    assert issued_by(first, store.stored.data[CA_CERT])  # type: ignore[union-attr]
    names = x509.load_pem_x509_certificate(first).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert names.value.get_values_for_type(x509.DNSName) == ["topogate-webhook.topogate-system.svc"]
    assert keeper.check() == (bundle, False)  # not due: nothing written
    clock[0] = now() + dt.timedelta(days=21)  # less than a third of 30 days left
    assert keeper.check() == (bundle, True)
    renewed = (tmp_path / "tls.crt").read_bytes()
    assert renewed != first
    assert certificate.reload() is True
    assert _served_by(certificate.context, tmp_path) == renewed


def test_a_serving_certificate_from_a_replaced_ca_is_reissued(tmp_path: Path) -> None:
    store = FakeSecret()
    keeper = CertificateKeeper(store, tmp_path, [], ["127.0.0.1"])
    keeper.check()
    other = make_ca("rotated-by-another-replica")
    store.stored = Stored({CA_CERT: other.cert_pem, CA_KEY: other.key_pem}, "9")
    bundle, issued = keeper.check()
    assert issued and bundle == other.cert_pem
    assert issued_by((tmp_path / "tls.crt").read_bytes(), other.cert_pem)


def test_without_a_secret_the_ca_is_kept_in_the_directory(tmp_path: Path) -> None:
    first = CertificateKeeper(FileStore(tmp_path / "ca"), tmp_path, [], ["127.0.0.1"]).check()
    again = CertificateKeeper(FileStore(tmp_path / "ca"), tmp_path, [], ["127.0.0.1"]).check()
    assert first[0] == again[0]  # a restart keeps the CA it injected
    assert oct((tmp_path / "ca" / "ca.key").stat().st_mode & 0o777) == "0o600"


def _served_by(context: ssl.SSLContext, directory: Path) -> bytes:
    """The certificate the context presents, by a handshake over a socket pair."""
    client_context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    left, right = socket.socketpair()
    left.setblocking(False)
    right.setblocking(False)
    with (
        context.wrap_socket(right, server_side=True, do_handshake_on_connect=False) as server,
        client_context.wrap_socket(
            left, server_hostname="127.0.0.1", do_handshake_on_connect=False
        ) as client,
    ):
        pending = {server, client}
        for _ in range(100):
            for side in list(pending):
                try:
                    side.do_handshake()
                    pending.discard(side)
                except ssl.SSLWantReadError:
                    pass
            if not pending:
                break
        der = client.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).public_bytes(serialization.Encoding.PEM)


# --- On the real control plane: two servers, one Secret, one caBundle ------------------------


@pytest.mark.cluster
def test_two_servers_share_one_ca_secret_and_the_api_server_trusts_both(
    crds: Any, control_plane: Any, tmp_path: Path
) -> None:
    from kubernetes import client

    from tests.cluster import drop_webhooks, eventually, with_kube
    from topogate.kube.client import Kube
    from topogate.testing.controlplane import free_port
    from topogate.webhooks.serving import register, serving

    api: Any = crds
    core: Any = client.CoreV1Api(api)
    batch: Any = client.BatchV1Api(api)
    namespace, secret = "shared-ca-test", ("default", "topogate-test-webhook-ca")
    core.create_namespace({"metadata": {"name": namespace}})
    ports = [free_port(), free_port()]
    ready, stop = threading.Barrier(3), threading.Event()

    async def both() -> None:
        async def one(index: int) -> None:
            kube = await Kube.connect(str(control_plane.kubeconfig))
            try:
                async with serving(
                    "127.0.0.1",
                    ports[index],
                    tmp_path / f"replica-{index}",
                    dns_names=[],
                    ips=["127.0.0.1"],
                    kube=kube,
                    # Only the first registers (the URL); the second publishes nothing itself.
                    register_url=f"https://127.0.0.1:{ports[0]}" if index == 0 else None,
                    ca_secret=secret,
                ):
                    await asyncio.to_thread(ready.wait, 30)
                    await asyncio.to_thread(stop.wait)
            finally:
                await kube.close()

        await asyncio.gather(one(0), one(1))  # started together: they race for the Secret

    thread = threading.Thread(target=asyncio.run, args=(both(),), daemon=True)
    thread.start()
    try:
        ready.wait(30)
        bundles = [(tmp_path / f"replica-{i}" / "ca.crt").read_bytes() for i in (0, 1)]
        stored = core.read_namespaced_secret(secret[1], secret[0]).data
        assert bundles[0] == bundles[1] == base64.b64decode(stored["ca.crt"])
        admission: Any = client.AdmissionregistrationV1Api(api)
        hooks = admission.read_mutating_webhook_configuration("topogate").webhooks
        assert {base64.b64decode(h.client_config.ca_bundle) for h in hooks} == {bundles[0]}
        names = iter(range(1000))

        def suspended() -> bool:
            job = batch.create_namespaced_job(namespace, _job(f"probe-{next(names)}"))
            return bool(job.spec.suspend)

        eventually(suspended, timeout=30)  # the API server called replica 0
        # Point the configurations at replica 1 with the caBundle replica 0 injected: the API
        # server trusts replica 1's own serving certificate through it.
        with_kube(
            control_plane, lambda kube: register(kube, f"https://127.0.0.1:{ports[1]}", bundles[0])
        )
        eventually(suspended, timeout=30)
    finally:
        stop.set()
        thread.join(15)
        drop_webhooks(control_plane)
        core.delete_namespaced_secret(secret[1], secret[0])
        core.delete_namespace(namespace)


def _job(name: str) -> dict[str, Any]:
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
