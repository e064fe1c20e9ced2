"""How a client connection authenticates: the `security` option every client takes, and the
native protocol's SASL exchange at the start of a connection (sans-I/O; the shells
network_blocking.py and network_aio.py run it after TCP connect and the TLS handshake).

    security = client_security({"security.protocol": "SASL_SSL", ...})   # or a path, or None
    login = NativeLogin(security.sasl_client())
    frame = login.first_request()             # send it
    while (frame := login.on_response(msg)) is not None: ...   # send each, read the answer
    login.principal                           # "User:alice": who the node says we are

The keys are Kafka's and librdkafka's (raftlog/base/client_properties.py): `security.protocol`,
`sasl.mechanism`, `sasl.username`, `sasl.password`, `ssl.ca.location`,
`ssl.certificate.location`/`ssl.key.location` (mTLS), so one client.properties serves the
raftlog CLI (`--command-config`), these clients and `kcat -F`.

Failures (all definite, `RejectedError`s): the node's SASL_AUTHENTICATION_FAILED,
UNSUPPORTED_SASL_MECHANISM or ILLEGAL_SASL_STATE (a SASL client at a listener without SASL);
a server whose SCRAM signature is wrong (SaslAuthenticationFailedError: not our cluster);
a TLS handshake the certificates refuse (`SslAuthenticationFailedError`). A shell reports
them to the core with `on_input(..., refused=[(broker_id, error)])`, which fails what waits
on that broker with the error instead of retrying until the deadline.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from typing import Any, Final

from raftlog.base.client_properties import ClientSecurity
from raftlog.base.errors import (
    IllegalSaslStateError,
    InvalidConfigError,
    RaftlogError,
    SaslAuthenticationFailedError,
    error_from_wire,
)
from raftlog.base.sasl import PlainClient, ScramClient
from raftlog.client.errors import SslAuthenticationFailedError
from raftlog.client.request import PROTOCOL_VERSION

__all__ = ["NativeLogin", "SecurityOption", "client_security", "tls_failure"]

SecurityOption = ClientSecurity | Mapping[str, str] | str | os.PathLike | None

# Request ids of the login exchange: the connection carries nothing else until it is done, so
# they cannot clash with the core's ids (which are only ever in flight afterwards).
_HANDSHAKE_ID: Final = 1
_AUTHENTICATE_IDS: Final = (2, 3)


def client_security(value: Any) -> ClientSecurity | None:
    """The `security` option of every client: None or a PLAINTEXT setting (no security), a
    ClientSecurity, a mapping of Kafka/librdkafka keys, or the path of a properties file.
    Raises InvalidConfigError naming the key at fault (a value is never shown)."""
    if value is None:
        return None
    if isinstance(value, ClientSecurity):
        security = value
    elif isinstance(value, Mapping):
        security = ClientSecurity.from_properties(value)
    elif isinstance(value, (str, os.PathLike)):
        security = ClientSecurity.from_file(value)
    else:
        raise InvalidConfigError(
            "security: give a dict of client properties, a properties file path or a ClientSecurity",
            key="security",
        )
    return None if security.protocol == "PLAINTEXT" else security


def tls_failure(exc: BaseException) -> RaftlogError | None:
    """The definite error for a TLS handshake that failed because of certificates or protocol
    (a wrong CA, a name mismatch, a plaintext server, a refused client certificate), or None
    when it is a plain network failure (reset, EOF, timeout: retried as a lost connection)."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ssl.SSLError):
        cause = cause.__cause__ or cause.__context__
    if cause is None or isinstance(cause, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)):
        return None
    if isinstance(cause, ssl.SSLCertVerificationError):
        reason = cause.verify_message or cause.reason or "certificate verify failed"
    else:
        reason = cause.reason or type(cause).__name__
    return SslAuthenticationFailedError(f"TLS handshake failed: {str(reason)[:200]}")


class NativeLogin:
    """The client side of the native `sasl_handshake` + `sasl_authenticate` rounds on one
    connection (PROTOCOL.md "Client listener"). One request at a time: `first_request()`,
    then `on_response(answer)` returns the next request, or None once authenticated.
    Raises a RaftlogError (the node's refusal, or a server that failed to prove it knows the
    credential); the connection is then useless (the node closes it)."""

    def __init__(self, client: ScramClient | PlainClient) -> None:
        self._client = client
        self._step = 0  # 0 handshake, 1 first authenticate, 2 final authenticate, 3 done
        self.principal: str | None = None

    def __repr__(self) -> str:
        return f"NativeLogin({self._client!r}, step={self._step})"

    @property
    def done(self) -> bool:
        return self._step == 3

    def first_request(self) -> dict[str, Any]:
        if self._step != 0:
            raise IllegalSaslStateError("the login already started")
        return {"v": PROTOCOL_VERSION, "id": _HANDSHAKE_ID, "op": "sasl_handshake",
                "mechanism": self._client.mechanism}

    def _authenticate(self, auth_bytes: bytes) -> dict[str, Any]:
        return {"v": PROTOCOL_VERSION, "id": _AUTHENTICATE_IDS[self._step - 1], "op": "sasl_authenticate",
                "auth_bytes": auth_bytes}

    def on_response(self, msg: Any) -> dict[str, Any] | None:
        """The node's answer to the last request: the next request, or None when done."""
        if not isinstance(msg, Mapping):
            raise SaslAuthenticationFailedError("authentication failed: the node sent a non-map answer")
        if msg.get("error") is not None:
            self._step = 4
            raise error_from_wire(msg["error"])
        expected = _HANDSHAKE_ID if self._step == 0 else _AUTHENTICATE_IDS[min(self._step, 2) - 1]
        if msg.get("id") != expected or self._step > 2:
            self._step = 4
            raise IllegalSaslStateError("authentication failed: an answer out of order")
        client = self._client
        if self._step == 0:
            self._step = 1
            return self._authenticate(client.first_message())
        auth_bytes = msg.get("auth_bytes", b"")
        if not isinstance(auth_bytes, bytes):
            raise SaslAuthenticationFailedError("authentication failed: malformed answer")
        complete = msg.get("complete") is True
        if self._step == 1:
            if isinstance(client, PlainClient):
                return self._finish(complete, msg)
            self._step = 2
            return self._authenticate(client.final_message(auth_bytes))
        assert isinstance(client, ScramClient)
        client.verify_server_final(auth_bytes)  # the node proves it holds our credential
        return self._finish(complete, msg)

    def _finish(self, complete: bool, msg: Mapping[str, Any]) -> None:
        if not complete:
            self._step = 4
            raise SaslAuthenticationFailedError("authentication failed: the node did not complete the login")
        principal = msg.get("principal")
        self.principal = principal if isinstance(principal, str) else None
        self._step = 3
        return None
