"""One webhook CA for all replicas, kept in a store they share (a Secret; in the standalone mode
the certificate directory), and the decisions about renewing it and the serving certificates.

Every replica may race to create the CA: the store's create fails for all but one (409), and
the others read the winner's. A CA close to its end is replaced the same way (an update that
names the version it replaces, so exactly one replica rotates); the previous CA stays in the
bundle while it is still valid, so the API server keeps trusting the serving certificates that
replicas issued from it until they re-issue theirs from the new one.

Pure: the store is a seam; the caller makes its blocking calls off the event loop.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Protocol

from .certs import KeyPair, make_ca, validity_of

CA_CERT, CA_KEY, PREVIOUS_CA = "ca.crt", "ca.key", "previous-ca.crt"
CA_VALIDITY = dt.timedelta(days=5 * 365)
CA_RENEW_BEFORE = dt.timedelta(days=30)
SERVING_VALIDITY = dt.timedelta(days=365)
SERVING_RENEW_FRACTION = 1 / 3  # re-issue when less than a third of the lifetime is left
ATTEMPTS = 5  # reads and writes lost to other replicas before giving up for this round


@dataclass(frozen=True, slots=True)
class Stored:
    """The store's data and the version an update must name."""

    data: dict[str, bytes]
    version: str


class CAStore(Protocol):
    """The calls made to the shared store: read, create (False: it exists, 409) and replace
    (False: someone else replaced it first, 409)."""

    def read(self) -> Stored | None: ...

    def create(self, data: dict[str, bytes]) -> bool: ...

    def replace(self, data: dict[str, bytes], version: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class SharedCA:
    """The CA serving certificates are issued from, and the bundle clients should trust."""

    ca: KeyPair
    bundle: bytes


class CAUnavailable(RuntimeError):
    """The store kept changing under this replica, or holds something that is not a CA."""


def needs_renewal(cert_pem: bytes, now: dt.datetime, before: dt.timedelta | float) -> bool:
    """True when ``cert_pem`` ends within ``before`` (a duration, or a fraction of its
    lifetime), or is not valid yet."""
    start, end = validity_of(cert_pem)
    window = before if isinstance(before, dt.timedelta) else (end - start) * before
    return now < start or end - now <= window


def _shared(data: dict[str, bytes], now: dt.datetime) -> SharedCA:
    bundle = data[CA_CERT]
    previous = data.get(PREVIOUS_CA)
    if previous and validity_of(previous)[1] > now:
        bundle = bundle.rstrip(b"\n") + b"\n" + previous
    return SharedCA(KeyPair(data[CA_CERT], data[CA_KEY]), bundle)


def _fresh(previous: bytes | None, validity: dt.timedelta) -> dict[str, bytes]:
    ca = make_ca("topogate-webhook-ca", validity=validity)
    data = {CA_CERT: ca.cert_pem, CA_KEY: ca.key_pem}
    if previous:
        data[PREVIOUS_CA] = previous
    return data


def ensure_ca(
    store: CAStore,
    now: dt.datetime,
    *,
    renew_before: dt.timedelta = CA_RENEW_BEFORE,
    validity: dt.timedelta = CA_VALIDITY,
) -> SharedCA:
    """The shared CA: the stored one, or one this replica created or rotated and won the race
    for. Every replica that calls this at about the same time gets the same bytes."""
    for _ in range(ATTEMPTS):
        stored = store.read()
        if stored is None:
            data = _fresh(None, validity)
            if store.create(data):
                return _shared(data, now)
            continue  # another replica created it first: adopt theirs
        if CA_CERT not in stored.data or CA_KEY not in stored.data:
            raise CAUnavailable(f"the CA store holds no {CA_CERT} and {CA_KEY}")
        if not needs_renewal(stored.data[CA_CERT], now, renew_before):
            return _shared(stored.data, now)
        data = _fresh(stored.data[CA_CERT], validity)
        if store.replace(data, stored.version):
            return _shared(data, now)
        # another replica rotated it first: read theirs
    raise CAUnavailable(f"the CA store changed {ATTEMPTS} times while reading it")
