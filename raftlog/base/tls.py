"""TLS contexts for every listener and dialer, and who a certificate says its holder is
(stdlib `ssl`; trio's SSLStream wraps streams with these contexts).

    server_context(cert_file=..., key_file=..., ca_file=..., client_auth="required")
    client_context(ca_file=..., cert_file=None, key_file=None, check_hostname=True)
    principal_of_certificate(ssl_object.getpeercert()) -> "User:<CN>" | None
    node_id_of_certificate(cert) -> int | None     (the peer listener's membership proof)

Rules:
* TLS 1.2 at least; the stdlib's default ciphers (no hand-picked suites).
* A client certificate is checked against `ca_file` (the cluster CA): `client_auth`
  "required" refuses a handshake without one (the peer listener in secure mode), "optional"
  takes one if offered (client listeners: mTLS is an alternative to SASL), "none" never asks.
* The principal of a client certificate is "User:" + its subject's common name (Kafka's
  `ssl.principal.mapping.rules` reduced to `RULE:^CN=(.*?),.*$/$1/`).
* Node certificates (certs.py) carry the organizational unit NODE_UNIT and CN "node-<id>";
  only those prove membership on the peer listener, so a user certificate from the same CA
  opens no peer door.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any, Final, Literal

__all__ = [
    "NODE_UNIT",
    "USER_UNIT",
    "client_context",
    "common_name",
    "node_id_of_certificate",
    "principal_of_certificate",
    "server_context",
]

NODE_UNIT: Final = "raftlog-node"
USER_UNIT: Final = "raftlog-user"

ClientAuth = Literal["none", "optional", "required"]


def server_context(
    *, cert_file: str, key_file: str, ca_file: str | None = None, client_auth: ClientAuth = "none",
    key_password: str | None = None,
) -> ssl.SSLContext:
    """The context of a TLS listener. Raises OSError/ssl.SSLError for unreadable or bad files."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file, password=key_password)
    if client_auth != "none":
        if ca_file is None:
            raise ValueError("client certificates need a CA file to check them against")
        context.load_verify_locations(cafile=ca_file)
        context.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
    return context


def client_context(
    *,
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    key_password: str | None = None,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """The context of a TLS dialer: verifies the server against `ca_file` (the system's CAs
    when None) and, with `check_hostname`, its name or IP against the certificate's SANs;
    presents `cert_file`/`key_file` when given (mTLS)."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = check_hostname
    if cert_file is not None:
        context.load_cert_chain(cert_file, key_file, password=key_password)
    return context


def _subject(cert: Mapping[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    if not cert:
        return out
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            out.setdefault(key, value)
    return out


def common_name(cert: Mapping[str, Any] | None) -> str | None:
    return _subject(cert).get("commonName")


def principal_of_certificate(cert: Mapping[str, Any] | None) -> str | None:
    """"User:<CN>" for a verified peer certificate (`SSLObject.getpeercert()`), else None."""
    name = common_name(cert)
    return None if not name else "User:" + name


def node_id_of_certificate(cert: Mapping[str, Any] | None) -> int | None:
    """The node id a verified node certificate names, or None if it is not a node's."""
    subject = _subject(cert)
    name = subject.get("commonName", "")
    if subject.get("organizationalUnitName") != NODE_UNIT or not name.startswith("node-"):
        return None
    digits = name[len("node-") :]
    if not digits.isdigit() or len(digits) > 10:
        return None
    return int(digits)
