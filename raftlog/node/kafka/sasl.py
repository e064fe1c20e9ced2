"""SaslHandshake (key 17) and SaslAuthenticate (key 36): Kafka's login, over the same
per-connection session as the native listener's (raftlog/node/auth.py `SaslSession`: SCRAM-
SHA-256/512, PLAIN only over TLS, the failed-login throttle, the replay window).

Flow (KIP-152): ApiVersions (optional), SaslHandshake v1 naming the mechanism (answered with
the enabled ones, UNSUPPORTED_SASL_MECHANISM if it is not), then SaslAuthenticate rounds
carrying the mechanism's messages until the session is complete. SaslHandshake v0 is listed
in ApiVersions (librdkafka will not log in otherwise) but a v0 request, which Kafka follows
with raw tokens outside the protocol's framing, is answered UNSUPPORTED_VERSION and closed. The listener runs nothing
else until then: any other request closes the connection (Kafka: IllegalSaslState). A failed
login is answered SASL_AUTHENTICATION_FAILED ("invalid credentials": never which part was
wrong), after the throttle's delay, and the connection is closed after that answer, as
Kafka does.

On a listener without SASL (PLAINTEXT, SSL), or after the login, both answer
ILLEGAL_SASL_STATE and the connection is closed: the client expects another listener. With
`connections_max_reauth_ms` (KIP-368) SaslAuthenticate v1+ reports the session's lifetime in
`session_lifetime_ms`, and a logged-in connection may log in again with both (the same
principal), which renews it; a session past its lifetime is closed at its next request.
"""

from __future__ import annotations

from typing import Final

from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from raftlog.base.errors import RaftlogError, UnsupportedSaslMechanismError
from raftlog.base.protocol import Request
from raftlog.node.auth import SaslSession, Session
from raftlog.node.kafka import errors
from raftlog.node.kafka.context import Call, KafkaContext, Reply

__all__ = ["HANDLERS", "SASL_HANDSHAKE_KEY", "SASL_AUTHENTICATE_KEY", "AUTH_KEYS"]

SASL_HANDSHAKE_KEY: Final = 17
SASL_AUTHENTICATE_KEY: Final = 36
AUTH_KEYS: Final = frozenset({SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY})


def _expects_login(session: Session | None) -> bool:
    """A SASL session not logged in yet, or one with a lifetime (KIP-368: it may log in again
    on the same connection)."""
    return isinstance(session, SaslSession) and (not session.complete or session.reauth_ms > 0)


async def handle_sasl_handshake(ctx: KafkaContext, call: Call) -> Reply:
    state = call.connection
    session = state.session
    if not _expects_login(session):
        state.close_reason = "sasl_not_expected"
        return SaslHandshakeResponse(error_code=errors.KAFKA_ERROR_CODES["ILLEGAL_SASL_STATE"], mechanisms=[])
    if call.version == 0:  # the raw-token flow that follows v0 is not served
        state.close_reason = "sasl_handshake_v0"
        return SaslHandshakeResponse(error_code=errors.UNSUPPORTED_VERSION, mechanisms=[])
    try:
        answer = await session.handle(Request(0, "sasl_handshake", {"mechanism": call.request.mechanism}))
    except UnsupportedSaslMechanismError as exc:
        # Kafka leaves the connection open for another handshake; our session is spent after
        # a refusal, so the client reconnects (librdkafka and the Java client do either way).
        state.close_reason = "sasl_mechanism_unsupported"
        return SaslHandshakeResponse(error_code=errors.KAFKA_ERROR_CODES[exc.code],
                                     mechanisms=list(exc.details.get("enabled", [])))
    except RaftlogError as exc:
        state.close_reason = "sasl_handshake_refused"
        return SaslHandshakeResponse(error_code=errors.kafka_error_code(exc.code), mechanisms=[])
    return SaslHandshakeResponse(error_code=errors.NONE, mechanisms=list(answer.get("mechanisms", [])))


async def handle_sasl_authenticate(ctx: KafkaContext, call: Call) -> Reply:
    state = call.connection
    session = state.session
    R = SaslAuthenticateResponse
    if not _expects_login(session):
        state.close_reason = "sasl_not_expected"
        return R(error_code=errors.KAFKA_ERROR_CODES["ILLEGAL_SASL_STATE"],
                 error_message="this connection does not expect SaslAuthenticate", auth_bytes=b"",
                 session_lifetime_ms=0)
    assert isinstance(session, SaslSession)
    auth_bytes = call.request.auth_bytes
    try:
        answer = await session.handle(Request(0, "sasl_authenticate", {"auth_bytes": bytes(auth_bytes or b"")}))
    except RaftlogError as exc:
        state.close_reason = "sasl_authentication_failed"  # counted by the listener (code 58)
        return R(error_code=errors.kafka_error_code(exc.code), error_message=exc.message, auth_bytes=b"",
                 session_lifetime_ms=0)
    return R(error_code=errors.NONE, error_message=None, auth_bytes=answer.get("auth_bytes", b""),
             session_lifetime_ms=answer.get("session_lifetime_ms", 0))


HANDLERS: Final = {SASL_HANDSHAKE_KEY: handle_sasl_handshake, SASL_AUTHENTICATE_KEY: handle_sasl_authenticate}
