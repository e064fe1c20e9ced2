"""Errors raised by the client library itself (never sent on the wire).

    raftlog.base.errors.RaftlogError
     ├── RejectedError
     │    ├── BufferFullError           BUFFER_FULL         send() found buffer_bytes used up (after max_block_ms)
     │    ├── DeliveryTimedOutError     DELIVERY_TIMED_OUT  a batch never left the client before delivery_timeout_ms
     │    ├── ClientClosedError         CLIENT_CLOSED       the producer/consumer/admin was closed
     │    ├── NoBrokerAvailableError    BROKER_NOT_AVAILABLE no broker could be reached before the deadline
     │    ├── TransactionStateError     INVALID_TXN_STATE   a transactional producer's call out of order
     │    │                                  (send outside a transaction, commit of one that must abort)
     │    └── SslAuthenticationFailedError SSL_AUTHENTICATION_FAILED the TLS handshake failed on certificates
     │                                  (wrong CA, name mismatch, client certificate refused, not a TLS port)
     └── UnknownOutcomeError
          └── ConnectionLostError       NETWORK_EXCEPTION   the connection closed with the request in flight

Server errors come from `raftlog.base.errors` (`error_from_wire`). A definite failure
(`RejectedError`) is kept apart from an unknown outcome (`UnknownOutcomeError`): when a produce batch
gives up after any attempt whose outcome was unknown, its future fails with an
`UnknownOutcomeError` (`RequestTimedOutError`, or the unknown error itself), never with a
definite error.
"""

from __future__ import annotations

from raftlog.base.errors import InvalidTxnStateError, RaftlogError, RejectedError, UnknownOutcomeError

__all__ = [
    "RaftlogError",
    "BufferFullError",
    "DeliveryTimedOutError",
    "ClientClosedError",
    "NoBrokerAvailableError",
    "ConnectionLostError",
    "SslAuthenticationFailedError",
    "TransactionStateError",
]


class BufferFullError(RejectedError):
    code = "BUFFER_FULL"


class DeliveryTimedOutError(RejectedError):
    """The batch was never sent, so it was definitely not written."""

    code = "DELIVERY_TIMED_OUT"


class ClientClosedError(RejectedError):
    code = "CLIENT_CLOSED"


class NoBrokerAvailableError(RejectedError):
    code = "BROKER_NOT_AVAILABLE"
    retriable = True


class TransactionStateError(InvalidTxnStateError):
    """A transactional producer's call out of order (Kafka's IllegalStateException /
    KafkaException): nothing was sent."""


class SslAuthenticationFailedError(RejectedError):
    """The TLS handshake failed on certificates or protocol (Kafka's SslAuthenticationException):
    retrying with the same settings cannot succeed, so it is not retriable."""

    code = "SSL_AUTHENTICATION_FAILED"


class ConnectionLostError(UnknownOutcomeError):
    code = "NETWORK_EXCEPTION"
    retriable = True
