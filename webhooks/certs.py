"""A small certificate authority with ``cryptography``: serving and client certificates.

The webhook server uses it to make its own CA and a serving certificate (DNS and IP SANs) when
none is mounted; the test control plane uses it for the API server's serving certificate and
the admin client certificate.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, cert_path: Path, key_path: Path) -> None:
        """Write both files, the key readable by the owner only, each replaced atomically."""
        for path, data, mode in (
            (cert_path, self.cert_pem, 0o644),
            (key_path, self.key_pem, 0o600),
        ):
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(path.name + ".tmp")
            partial.write_bytes(data)
            partial.chmod(mode)
            partial.replace(path)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    parts += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    return x509.Name(parts)


def validity_of(cert_pem: bytes) -> tuple[dt.datetime, dt.datetime]:
    """(not before, not after) of a PEM certificate, in UTC."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    return cert.not_valid_before_utc, cert.not_valid_after_utc


def issued_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    """True when ``ca_pem`` signed ``cert_pem``."""
    try:
        x509.load_pem_x509_certificate(cert_pem).verify_directly_issued_by(
            x509.load_pem_x509_certificate(ca_pem)
        )
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def make_ca(common_name: str = "topogate-ca", validity: dt.timedelta = _VALIDITY) -> KeyPair:
    key = _key()
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem(key))


def issue(
    ca: KeyPair,
    common_name: str,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    organizations: Sequence[str] = (),
    client: bool = False,
    validity: dt.timedelta = _VALIDITY,
) -> KeyPair:
    """A leaf certificate signed by ``ca``: serving (with SANs) or, with ``client``, a client one.
    It never outlives the CA (a chain is only as valid as its shortest link).

    Clients authenticate to the API server as user ``common_name`` in groups ``organizations``.
    """
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC key")
    key = _key()
    now = dt.datetime.now(dt.UTC)
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organizations))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(min(now + validity, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem(key))
