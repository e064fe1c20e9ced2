"""What a secure local cluster needs, made once (`raftlog cluster up --secure`, scripts/quorum
--secure, the fault suite's `--secure`, tests): a cluster CA, a certificate per node, an admin
user, a /metrics token, and the client.properties that logs in as the admin.

    material = SecureMaterial.ensure(root, node_ids=[1, 2, 3], hosts=["127.0.0.1"])
    settings = material.node_settings(node_id)     # NodeConfig fields of a secure node
    material.client_properties                     # <root>/client.properties (0600)

Layout under the cluster's data dir (written on first run, reused after; private files 0600):

    client.properties          librdkafka/Kafka form: security.protocol=SASL_SSL,
                               sasl.mechanism=SCRAM-SHA-512, sasl.username=admin,
                               sasl.password=..., ssl.ca.location=<root>/tls/ca.pem
                               (`raftlog --command-config`, `kcat -F`, the Python clients)
    tls/ca.pem, tls/ca.key     the cluster CA (the key signs node certificates; keep it private)
    tls/node-<i>.pem, .key     node i's certificate: CN node-<i>, SANs for its hosts and localhost
    bootstrap_credentials      the admin's SCRAM credentials as salted keys (never the password):
                               the controller seeds them into an empty credential store
    http_token                 the bearer token /metrics wants

The admin's password exists only in client.properties (and, as SCRAM keys, in the metadata
log): losing that file means creating a new admin with another super user's login. The admin
is a super user (`super_users`), so ACLs never lock it out.

A secure node: SASL_SSL on its client and Kafka listeners (SCRAM-SHA-512/256; PLAIN, TLS
only), mutual TLS with node certificates on the peer listener, ACLs on, /metrics behind the
token.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from metadata.records import UserScramCredential
from metadata.security_ops import write_bootstrap_credentials
from raftlog.base.certs import PemPair, issue, new_ca, write_private_file, write_public_file
from raftlog.base.client_properties import ClientSecurity
from raftlog.base.errors import ConfigError, RaftlogError
from raftlog.base.sasl import SCRAM_MECHANISMS, scram_credential

__all__ = ["ADMIN_USER", "CLIENT_PROPERTIES", "SecureMaterial", "write_properties"]

ADMIN_USER: Final = "admin"
CLIENT_PROPERTIES: Final = "client.properties"
TLS_DIR: Final = "tls"
BOOTSTRAP_FILE: Final = "bootstrap_credentials"
HTTP_TOKEN_FILE: Final = "http_token"


def _escape(value: str) -> str:
    """A java.util.Properties value: backslash, leading blanks and line breaks escaped."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return "\\" + out if out[:1] in (" ", "\t", "\f") else out


def write_properties(path: Path, properties: dict[str, str], *, comment: str = "") -> None:
    """Write client properties in java.util.Properties form, readable by the owner only."""
    lines = [f"# {line}" for line in comment.splitlines()]
    lines += [f"{key}={_escape(value)}" for key, value in properties.items()]
    write_private_file(path, ("\n".join(lines) + "\n").encode())


@dataclass(frozen=True)
class SecureMaterial:
    """The files of one secure cluster under `root` (see the module docstring)."""

    root: Path

    @property
    def tls_dir(self) -> Path:
        return self.root / TLS_DIR

    @property
    def ca_file(self) -> Path:
        return self.tls_dir / "ca.pem"

    @property
    def ca_key_file(self) -> Path:
        return self.tls_dir / "ca.key"

    def cert_file(self, node_id: int) -> Path:
        return self.tls_dir / f"node-{node_id}.pem"

    def key_file(self, node_id: int) -> Path:
        return self.tls_dir / f"node-{node_id}.key"

    @property
    def bootstrap_file(self) -> Path:
        return self.root / BOOTSTRAP_FILE

    @property
    def client_properties(self) -> Path:
        return self.root / CLIENT_PROPERTIES

    @property
    def http_token_file(self) -> Path:
        return self.root / HTTP_TOKEN_FILE

    def http_token(self) -> str:
        return self.http_token_file.read_text().strip()

    def admin_security(self) -> ClientSecurity:
        """The admin's client settings (from client.properties). Raises ConfigError."""
        try:
            return ClientSecurity.from_file(self.client_properties)
        except RaftlogError as exc:
            raise ConfigError(f"{self.client_properties}: {exc.message}") from None

    @classmethod
    def ensure(cls, root: Path, node_ids: Iterable[int], hosts: Iterable[str],
               *, admin_password: str | None = None) -> tuple["SecureMaterial", bool]:
        """The material under `root`, made now where missing: the CA and admin on first run,
        a node certificate for each node that has none. Returns (material, created: the CA and
        admin are new). `admin_password` (tests) instead of a random one. Raises ConfigError
        when the CA exists but the admin's file is gone (its password cannot be recovered)."""
        material = cls(Path(root))
        material.tls_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        created = not material.ca_file.exists()
        if created:
            ca = new_ca(f"raftlog cluster {material.root.name}")
            write_private_file(material.ca_key_file, ca.key)
            write_public_file(material.ca_file, ca.cert)
            material._make_admin(admin_password or secrets.token_urlsafe(24))
            write_private_file(material.http_token_file, (secrets.token_urlsafe(24) + "\n").encode())
        elif not material.client_properties.exists():
            raise ConfigError(
                f"{material.client_properties} is gone; the admin's password existed only there. Log in as "
                "another super user and set a new one (raftlog users add admin), then write the file again"
            )
        ca = PemPair(material.ca_key_file.read_bytes(), material.ca_file.read_bytes())
        hosts = sorted(set(hosts))
        for node_id in node_ids:
            if not material.cert_file(node_id).exists():
                node = issue(ca, f"node-{node_id}", kind="node", hosts=hosts)
                write_private_file(material.key_file(node_id), node.key)
                write_public_file(material.cert_file(node_id), node.cert)
        return material, created

    def _make_admin(self, password: str) -> None:
        credentials = [UserScramCredential.of(ADMIN_USER, scram_credential(m, password)) for m in SCRAM_MECHANISMS]
        write_bootstrap_credentials(self.bootstrap_file, credentials)
        security = ClientSecurity(protocol="SASL_SSL", mechanism="SCRAM-SHA-512", username=ADMIN_USER,
                                  password=password, ca_location=str(self.ca_file.resolve()))
        write_properties(self.client_properties, security.to_properties(), comment=(
            "raftlog cluster admin (a super user). Works as is with:\n"
            f"  raftlog --command-config {self.client_properties.resolve()} ...\n"
            f"  kcat -F {self.client_properties.resolve()} -b <kafka listener> -L\n"
            "Keep it private: the password is nowhere else."
        ))  # fmt: skip

    def node_settings(self, node_id: int) -> dict[str, Any]:
        """The NodeConfig fields of node `node_id` in the secure cluster."""
        return {
            "security_protocol": "SASL_SSL",
            "peer_tls": True,
            "tls_cert_file": self.cert_file(node_id).resolve(),
            "tls_key_file": self.key_file(node_id).resolve(),
            "tls_ca_file": self.ca_file.resolve(),
            "super_users": (f"User:{ADMIN_USER}",),
            "http_token": self.http_token(),
            "bootstrap_credentials_file": self.bootstrap_file.resolve(),
        }
