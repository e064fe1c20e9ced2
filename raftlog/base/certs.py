"""Certificates for a secure cluster, made with `cryptography`: a cluster CA, one certificate per
node (SANs for the hosts it is reached at), and client certificates for mTLS principals.

    ca = new_ca("raftlog cluster abc")                     # PemPair(key, cert)
    node = issue(ca, "node-1", kind="node", hosts=["127.0.0.1", "broker1.example"])
    user = issue(ca, "alice", kind="user")
    write_private_file(path, node.key)                     # mode 0600, never wider

Rules:
* Keys are EC P-256 (fast handshakes, small certs); signatures SHA-256.
* The CA is a CA (BasicConstraints ca=True, path length 0, keyCertSign); issued
  certificates are not.
* A node certificate is for both ends of a TLS connection (serverAuth and clientAuth): nodes
  dial each other with it. Its subject is CN=node-<id>, OU=tls.NODE_UNIT; its SANs hold every
  host given (IP addresses as IP SANs, names as DNS SANs) and "localhost".
* A user certificate (clientAuth only) has CN=<user>, OU=tls.USER_UNIT: its principal is
  User:<user>.
* Private keys are PEM PKCS#8, unencrypted (the file mode protects them, as Kafka's PEM
  keystores without a password do); `write_private_file` writes a new 0600 file and renames it
  over the old one, so the result is 0600 whatever the old file's mode was.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from typing import Final, Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from raftlog.base.tls import NODE_UNIT, USER_UNIT

__all__ = ["PemPair", "issue", "new_ca", "write_private_file", "write_public_file"]

DEFAULT_CA_DAYS: Final = 3650
DEFAULT_CERT_DAYS: Final = 825  # the longest leaf validity browsers' rules accept


@dataclass(frozen=True)
class PemPair:
    """A private key and its certificate, both PEM. repr() hides the key."""

    key: bytes
    cert: bytes

    def __repr__(self) -> str:
        return f"PemPair(key=<hidden>, cert={len(self.cert)} bytes)"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def new_ca(common_name: str, *, valid_days: int = DEFAULT_CA_DAYS) -> PemPair:
    """A self-signed CA for one cluster."""
    key = _new_key()
    name = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "raftlog"),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ])  # fmt: skip
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return PemPair(_key_pem(key), cert.public_bytes(serialization.Encoding.PEM))


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return x509.DNSName(host)


def issue(
    ca: PemPair,
    common_name: str,
    *,
    kind: Literal["node", "user"],
    hosts: list[str] | tuple[str, ...] = (),
    valid_days: int = DEFAULT_CERT_DAYS,
) -> PemPair:
    """A certificate signed by `ca`: for a node (server and client auth, SANs for `hosts` and
    localhost) or a user (client auth). Raises ValueError for a bad CA or name."""
    if not common_name or len(common_name) > 64:
        raise ValueError("a common name is 1..64 characters")
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an EC key made by new_ca")
    key = _new_key()
    unit = NODE_UNIT if kind == "node" else USER_UNIT
    subject = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "raftlog"),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ])  # fmt: skip
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if kind == "node":
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=False, crl_sign=False, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if kind == "node":
        names: list[x509.GeneralName] = []
        for host in [*hosts, "localhost"]:
            san = _san(host)
            if san not in names:
                names.append(san)
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return PemPair(_key_pem(key), cert.public_bytes(serialization.Encoding.PEM))


def write_private_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to a file only its owner can read (0600), atomically (temp file + rename).
    Never leaves the secret readable by others, even for a moment."""
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_public_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Write a certificate file, atomically: 0600 like every file raftlog makes (not secret,
    but other local users need no copy; hand the CA certificate to clients deliberately)."""
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
