"""Errors raised by the client library itself (never sent on the wire).

    raftlog.errors.RaftlogError
     ├── Rejected
     │    ├── BufferFull           BUFFER_FULL         send() found buffer_bytes used up (after max_block_ms)
     │    ├── DeliveryTimedOut     DELIVERY_TIMED_OUT  a batch never left the client before delivery_timeout_ms
     │    ├── ClientClosed         CLIENT_CLOSED       the producer/consumer/admin was closed
     │    └── NoBrokerAvailable    BROKER_NOT_AVAILABLE no broker could be reached before the deadline
     └── UnknownOutcome
          └── ConnectionLost       NETWORK_EXCEPTION   the connection closed with the request in flight

Server errors come from `raftlog.errors` (`error_from_wire`). A definite failure
(`Rejected`) is kept apart from an unknown outcome (`UnknownOutcome`): when a produce batch
gives up after any attempt whose outcome was unknown, its future fails with
`RequestTimedOut` (an `UnknownOutcome`), never with a definite error.
"""

from __future__ import annotations

from raftlog.errors import RaftlogError, Rejected, UnknownOutcome

__all__ = [
    "RaftlogError",
    "BufferFull",
    "DeliveryTimedOut",
    "ClientClosed",
    "NoBrokerAvailable",
    "ConnectionLost",
]


class BufferFull(Rejected):
    code = "BUFFER_FULL"


class DeliveryTimedOut(Rejected):
    """The batch was never sent, so it was definitely not written."""

    code = "DELIVERY_TIMED_OUT"


class ClientClosed(Rejected):
    code = "CLIENT_CLOSED"


class NoBrokerAvailable(Rejected):
    code = "BROKER_NOT_AVAILABLE"
    retriable = True


class ConnectionLost(UnknownOutcome):
    code = "NETWORK_EXCEPTION"
    retriable = True
