"""The peer handshake without TLS: both ends prove they hold the cluster secret, keyed HMAC
over fresh nonces from both sides (sans-I/O; the peer listener and `PeerPool` carry it in two
native-protocol requests before any other op).

    dialer = PeerAuthDialer(peer_key(secret), node_id=2)
    challenge = acceptor.challenge(dialer.hello())      # op peer_auth_hello
    finish = dialer.finish(challenge)                   # raises if the listener lacks the key
    node_id = acceptor.verify(finish)                   # op peer_auth_finish; raises if we do

    hello     {"node_id": int, "nonce": 32 bytes}                   dialer -> listener
    challenge {"nonce": 32 bytes, "proof": HMAC(K, "listener" ...)} listener -> dialer
    finish    {"proof": HMAC(K, "dialer" ...)}                      dialer -> listener

Both proofs cover both nonces and the dialer's node id under a role label, so neither a
recorded proof (the other side's nonce is fresh), nor a reflected one (the role differs), nor
one for another node id verifies. K = HMAC-SHA256(cluster_secret, "raftlog peer authentication
v1"): a key of its own, not the PySyncObj password itself.

What it does not do: it authenticates the start of a plaintext connection; it does not
encrypt or protect what follows against someone on the path who can rewrite TCP. That is what
secure mode's mutual TLS is for; this keeps out every process without the secret (the attack
the issue describes: a stranger on the peer port fetching metadata or registering a broker).

Invariants: one handshake per object, in order; a failure raises SaslAuthenticationFailedError
(whose message holds no secret) and the object is dead. hmac.compare_digest compares proofs.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from typing import Any, Final

from raftlog.base.errors import IllegalSaslStateError, SaslAuthenticationFailedError

__all__ = ["NONCE_BYTES", "PeerAuthAcceptor", "PeerAuthDialer", "peer_key"]

NONCE_BYTES: Final = 32
_KEY_LABEL: Final = b"raftlog peer authentication v1"
_NODE_ID_MAX: Final = 2**31 - 1


def peer_key(cluster_secret: str | bytes) -> bytes:
    """The handshake key derived from the cluster secret."""
    raw = cluster_secret.encode() if isinstance(cluster_secret, str) else bytes(cluster_secret)
    if not raw:
        raise ValueError("the cluster secret is empty")
    return hmac.new(raw, _KEY_LABEL, hashlib.sha256).digest()


def _proof(key: bytes, role: bytes, dialer_nonce: bytes, listener_nonce: bytes, node_id: int) -> bytes:
    transcript = b"raftlog-peer-v1\0" + role + b"\0" + dialer_nonce + listener_nonce + node_id.to_bytes(8, "big")
    return hmac.new(key, transcript, hashlib.sha256).digest()


def _field(message: Mapping[str, Any], name: str, kind: type) -> Any:
    if not isinstance(message, Mapping):
        raise SaslAuthenticationFailedError("peer authentication failed: malformed handshake message")
    value = message.get(name)
    if type(value) is not kind:
        raise SaslAuthenticationFailedError(f"peer authentication failed: field {name!r} missing or malformed")
    return value


def _nonce(message: Mapping[str, Any]) -> bytes:
    value = _field(message, "nonce", bytes)
    if len(value) != NONCE_BYTES:
        raise SaslAuthenticationFailedError(f"peer authentication failed: a nonce is {NONCE_BYTES} bytes")
    return value


class PeerAuthDialer:
    """The connecting node's side."""

    def __init__(self, key: bytes, node_id: int, *, nonce: bytes | None = None) -> None:
        if type(node_id) is not int or not 0 <= node_id <= _NODE_ID_MAX:
            raise ValueError(f"bad node id {node_id!r}")
        self._key = key
        self.node_id = node_id
        self._nonce = secrets.token_bytes(NONCE_BYTES) if nonce is None else nonce
        self._state = "start"

    def __repr__(self) -> str:
        return f"PeerAuthDialer(node_id={self.node_id}, state={self._state!r})"

    def hello(self) -> dict[str, Any]:
        if self._state != "start":
            raise IllegalSaslStateError("peer hello already sent")
        self._state = "hello_sent"
        return {"node_id": self.node_id, "nonce": self._nonce}

    def finish(self, challenge: Mapping[str, Any]) -> dict[str, Any]:
        """Check the listener's proof; return our own. Raises SaslAuthenticationFailedError."""
        if self._state != "hello_sent":
            raise IllegalSaslStateError("no peer challenge expected now")
        self._state = "failed"
        listener_nonce = _nonce(challenge)
        expected = _proof(self._key, b"listener", self._nonce, listener_nonce, self.node_id)
        if not hmac.compare_digest(_field(challenge, "proof", bytes), expected):
            raise SaslAuthenticationFailedError(
                "peer authentication failed: the listener does not hold this cluster's secret"
            )
        self._state = "done"
        return {"proof": _proof(self._key, b"dialer", self._nonce, listener_nonce, self.node_id)}


class PeerAuthAcceptor:
    """The listening node's side, one per connection. `node_id` is set once verified."""

    def __init__(self, key: bytes, *, nonce: bytes | None = None) -> None:
        self._key = key
        self._nonce = secrets.token_bytes(NONCE_BYTES) if nonce is None else nonce
        self._dialer_nonce = b""
        self._claimed = -1
        self._state = "start"
        self.node_id: int | None = None

    def __repr__(self) -> str:
        return f"PeerAuthAcceptor(node_id={self.node_id}, state={self._state!r})"

    @property
    def done(self) -> bool:
        return self._state == "done"

    def challenge(self, hello: Mapping[str, Any]) -> dict[str, Any]:
        if self._state != "start":
            raise IllegalSaslStateError("peer hello already received on this connection")
        self._state = "failed"
        claimed = _field(hello, "node_id", int)
        if not 0 <= claimed <= _NODE_ID_MAX:
            raise SaslAuthenticationFailedError("peer authentication failed: bad node id")
        self._dialer_nonce = _nonce(hello)
        if hmac.compare_digest(self._dialer_nonce, self._nonce):
            raise SaslAuthenticationFailedError("peer authentication failed: reflected nonce")
        self._claimed = claimed
        self._state = "challenged"
        return {
            "nonce": self._nonce,
            "proof": _proof(self._key, b"listener", self._dialer_nonce, self._nonce, claimed),
        }

    def verify(self, finish: Mapping[str, Any]) -> int:
        """Check the dialer's proof; return its node id. Raises SaslAuthenticationFailedError."""
        if self._state != "challenged":
            raise IllegalSaslStateError("no peer proof expected now")
        self._state = "failed"
        expected = _proof(self._key, b"dialer", self._dialer_nonce, self._nonce, self._claimed)
        if not hmac.compare_digest(_field(finish, "proof", bytes), expected):
            raise SaslAuthenticationFailedError(
                "peer authentication failed: the dialer does not hold this cluster's secret"
            )
        self._state = "done"
        self.node_id = self._claimed
        return self._claimed
