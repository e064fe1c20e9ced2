"""The client properties file: Kafka's and librdkafka's keys, one file for every client.

    security = ClientSecurity.from_file("data/client.properties")   # or .from_properties(dict)
    security.ssl_context()     # None for PLAINTEXT / SASL_PLAINTEXT
    security.sasl_client()     # a fresh ScramClient / PlainClient per connection, or None

The same file works for `raftlog --command-config FILE` (Kafka's CLI convention), the Python
clients (they take the same keys as a dict), and `kcat -F FILE` (librdkafka reads it as is):

    security.protocol=SASL_SSL                  PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    sasl.mechanism=SCRAM-SHA-512                SCRAM-SHA-512 | SCRAM-SHA-256 | PLAIN
    sasl.username=admin
    sasl.password=...
    ssl.ca.location=/path/ca.pem                the CA to check servers against (else the system's)
    ssl.certificate.location=/path/user.pem     mTLS: our certificate ...
    ssl.key.location=/path/user.key             ... and its key (both or neither)
    ssl.key.password=...                        if the key is encrypted
    ssl.endpoint.identification.algorithm=https https (default: check the server's name) | none

Also read, for Java clients' files: `sasl.mechanisms` (librdkafka's plural), `sasl.jaas.config`
(username="..." password="..." of a PlainLoginModule/ScramLoginModule line), and
`ssl.truststore.location` with `ssl.truststore.type=PEM`.

Rules:
* The file is java.util.Properties syntax (`key=value`, `key: value`, `key value`, `#`/`!`
  comments, backslash escapes and line continuations), at most MAX_FILE_BYTES.
* A `sasl.*` or `ssl.*` key we do not know is an error naming the key: a typo must not
  quietly weaken security. Other keys (client.id, bootstrap.servers, ...) are kept in `other`.
* PLAIN is refused over SASL_PLAINTEXT (it would send the password in clear); SASL needs a
  mechanism, username and password.
* Errors (InvalidConfigError, with the key in `key`) never include a value; repr() hides the
  password and the key password.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from raftlog.base.errors import InvalidConfigError
from raftlog.base.sasl import MECHANISMS, PlainClient, ScramClient
from raftlog.base.tls import client_context

__all__ = [
    "MAX_FILE_BYTES",
    "PROTOCOLS",
    "ClientSecurity",
    "load_properties",
    "parse_properties",
]

MAX_FILE_BYTES: Final = 64 * 1024
PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

# The sasl.*/ssl.* keys we read; values are the ClientSecurity field they feed (None: read but
# not used: harmless librdkafka/Java tuning we accept so a shared file loads).
_SECURITY_KEYS: Final[Mapping[str, str | None]] = {
    "security.protocol": "protocol",
    "sasl.mechanism": "mechanism",
    "sasl.mechanisms": "mechanism",
    "sasl.username": "username",
    "sasl.password": "password",
    "sasl.jaas.config": None,  # parsed into username/password below
    "ssl.ca.location": "ca_location",
    "ssl.truststore.location": None,
    "ssl.truststore.type": None,
    "ssl.certificate.location": "certificate_location",
    "ssl.key.location": "key_location",
    "ssl.key.password": "key_password",
    "ssl.endpoint.identification.algorithm": None,
    "ssl.enabled.protocols": None,
    "ssl.protocol": None,
}
_JAAS_VALUE = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _fail(key: str, why: str) -> InvalidConfigError:
    return InvalidConfigError(f"client properties: {key}: {why}", key=key)


# --- the file format --------------------------------------------------------------------------


def _unescape(text: str, line_no: int) -> str:
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        i += 1
        if i >= len(text):
            break
        c = text[i]
        if c == "u":
            digits = text[i + 1 : i + 5]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise InvalidConfigError(f"client properties: line {line_no}: malformed \\u escape", key="")
            out.append(chr(int(digits, 16)))
            i += 5
            continue
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(c, c))
        i += 1
    return "".join(out)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    lines: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip(" \t\f")
        if not pending:
            start = number
            if not line or line[0] in "#!":
                continue
        # an odd number of trailing backslashes continues the line
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        lines.append((start, pending + line))
        pending = ""
    if pending:
        lines.append((start, pending))
    return lines


def parse_properties(text: str) -> dict[str, str]:
    """java.util.Properties.load's syntax. Later keys win, as in Java."""
    out: dict[str, str] = {}
    for line_no, line in _logical_lines(text):
        i = 0
        while i < len(line):
            c = line[i]
            if c == "\\":
                i += 2
                continue
            if c in "=: \t\f":
                break
            i += 1
        key_raw, rest = line[:i], line[i:]
        rest = rest.lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        key = _unescape(key_raw, line_no)
        if not key:
            raise InvalidConfigError(f"client properties: line {line_no}: no key", key="")
        out[key] = _unescape(rest, line_no)
    return out


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read and parse a properties file. Raises InvalidConfigError (unreadable, too big,
    not UTF-8, bad syntax)."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InvalidConfigError(f"client properties: cannot read {name}: {exc.strerror}", key="") from None
    if len(data) > MAX_FILE_BYTES:
        raise InvalidConfigError(f"client properties: {name} is over {MAX_FILE_BYTES} bytes", key="")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidConfigError(f"client properties: {name} is not UTF-8", key="") from None
    return parse_properties(text)


# --- what the keys mean -----------------------------------------------------------------------


@dataclass(frozen=True)
class ClientSecurity:
    """How a client connects: TLS or not, SASL or not, and with what. Immutable."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True
    other: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise _fail("security.protocol", f"must be one of {', '.join(PROTOCOLS)}")
        if self.sasl:
            if self.mechanism is None:
                raise _fail("sasl.mechanism", f"{self.protocol} needs one of {', '.join(MECHANISMS)}")
            if self.mechanism not in MECHANISMS:
                raise _fail("sasl.mechanism", f"must be one of {', '.join(MECHANISMS)}")
            if not self.username:
                raise _fail("sasl.username", f"{self.protocol} needs a username")
            if not self.password:
                raise _fail("sasl.password", f"{self.protocol} needs a password")
            if self.mechanism == "PLAIN" and not self.tls:
                raise _fail(
                    "sasl.mechanism", "PLAIN sends the password in clear: use it with SASL_SSL only"
                )
        if (self.certificate_location is None) != (self.key_location is None):
            raise _fail("ssl.key.location", "a client certificate and its key come together")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __repr__(self) -> str:
        parts = [f"protocol={self.protocol!r}"]
        if self.sasl:
            parts += [f"mechanism={self.mechanism!r}", f"username={self.username!r}", "password=<hidden>"]
        if self.tls:
            parts.append(f"ca_location={self.ca_location!r}")
            if self.certificate_location:
                parts.append(f"certificate_location={self.certificate_location!r}")
        return f"ClientSecurity({', '.join(parts)})"

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> "ClientSecurity":
        """Raises InvalidConfigError naming the key at fault."""
        values: dict[str, Any] = {}
        other: dict[str, str] = {}
        for key, value in props.items():
            if not isinstance(key, str):
                raise _fail(str(key), "keys are strings")
            if not isinstance(value, str):
                raise _fail(key, "values are strings")
            if key in _SECURITY_KEYS or key.startswith(("sasl.", "ssl.")):
                if key not in _SECURITY_KEYS:
                    raise _fail(key, "unknown security key (a typo would weaken security, so it is an error)")
            else:
                other[key] = value
        for key, name in _SECURITY_KEYS.items():
            if name is not None and key in props:
                values[name] = props[key]
        if "protocol" in values:
            values["protocol"] = values["protocol"].upper()
        if "mechanism" in values:
            values["mechanism"] = values["mechanism"].upper()
        jaas = props.get("sasl.jaas.config")
        if jaas is not None:
            found = dict(_JAAS_VALUE.findall(jaas))
            values.setdefault("username", found.get("username"))
            values.setdefault("password", found.get("password"))
        if "ssl.truststore.location" in props:
            if props.get("ssl.truststore.type", "").upper() != "PEM":
                raise _fail("ssl.truststore.type", "only PEM trust stores are read (set ssl.truststore.type=PEM)")
            values.setdefault("ca_location", props["ssl.truststore.location"])
        algorithm = props.get("ssl.endpoint.identification.algorithm", "https").lower()
        if algorithm not in ("https", "none", ""):
            raise _fail("ssl.endpoint.identification.algorithm", "must be https or none")
        values["check_hostname"] = algorithm == "https"
        return cls(**values, other=other)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> "ClientSecurity":
        return cls.from_properties(load_properties(path))

    def to_properties(self) -> dict[str, str]:
        """The librdkafka/Kafka keys for this configuration (what client.properties holds)."""
        out = {"security.protocol": self.protocol}
        if self.sasl:
            assert self.mechanism and self.username and self.password
            out.update({"sasl.mechanism": self.mechanism, "sasl.username": self.username, "sasl.password": self.password})
        for key, value in (
            ("ssl.ca.location", self.ca_location),
            ("ssl.certificate.location", self.certificate_location),
            ("ssl.key.location", self.key_location),
            ("ssl.key.password", self.key_password),
        ):
            if value is not None:
                out[key] = value
        if self.tls and not self.check_hostname:
            out["ssl.endpoint.identification.algorithm"] = "none"
        return out

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for SSL/SASL_SSL (None otherwise). Raises InvalidConfigError for
        unreadable or invalid CA, certificate or key files."""
        if not self.tls:
            return None
        try:
            return client_context(
                ca_file=self.ca_location,
                cert_file=self.certificate_location,
                key_file=self.key_location,
                key_password=self.key_password,
                check_hostname=self.check_hostname,
            )
        except (OSError, ssl.SSLError) as exc:
            reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or type(exc).__name__
            raise _fail("ssl.ca.location", f"cannot load the TLS files: {reason}") from None

    def sasl_client(self) -> ScramClient | PlainClient | None:
        """A new client-side exchange (one per connection), or None without SASL."""
        if not self.sasl:
            return None
        assert self.mechanism and self.username and self.password
        if self.mechanism == "PLAIN":
            return PlainClient(self.username, self.password)
        return ScramClient(self.mechanism, self.username, self.password)
