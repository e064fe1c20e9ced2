"""The metadata quorum port's limits (issue 39): what a connection may make a voter buffer,
read and keep open before it has proved it knows the cluster secret. Policy and accounting
only; raftlog/node/bridge.py applies it to PySyncObj's connections and transport (this
module does not import pysyncobj).

PySyncObj frames are a 4-byte native signed length ('i') and a Fernet token (the pickled,
zlib-compressed message, AES-CBC + HMAC-SHA256, urlsafe base64). A frame is authenticated
when its token decrypts under the cluster secret. The rules:

* A connection that has not yet delivered one authenticated frame may announce at most
  `PREAUTH_MAX_FRAME_BYTES`; the voter reads only as many bytes as that frame needs, so it
  never buffers more than 4 + `PREAUTH_MAX_FRAME_BYTES` for it.
* After that, at most `MAX_FRAME_BYTES`: the largest frame PySyncObj sends us (the arithmetic
  is in `max_frame_bytes`).
* A negative length or one over the bound disconnects as soon as its 4 header bytes arrive.
* One connection's read event takes at most `READ_BUDGET_BYTES` from its socket (the rest
  waits for the next poll: PySyncObj's poller is level-triggered), so one sender cannot
  hold the tick thread.
* At most `MAX_UNKNOWN_CONNECTIONS` incoming connections may be unidentified (PySyncObj's
  "unknown connections": no node address received yet); a newer one is closed at once. One
  that has not delivered an authenticated frame within `PREAUTH_TIMEOUT_S` is closed.

Every refusal is counted by reason (`refusals()`, exported as
`raftlog_quorum_refused_connections_total`) and logged once per remote address.
Concurrency: `RefusalLog` is written by the tick thread and read by the trio thread (locked).
"""

from __future__ import annotations

import logging
import threading
from typing import Final

from raftlog.base.eventlog import log_event

__all__ = [
    "PREAUTH_MAX_FRAME_BYTES", "MAX_FRAME_BYTES", "READ_BUDGET_BYTES", "MAX_UNKNOWN_CONNECTIONS",
    "PREAUTH_TIMEOUT_S", "max_frame_bytes", "length_refusal", "preauth_bytes_wanted", "RefusalLog",
]

logger = logging.getLogger(__name__)

HEADER_BYTES: Final = 4

# The first frame each side receives is the other's 32-byte random key: 228 bytes on the wire
# (measured with PySyncObj 0.3.17: pickle 41 B, zlib 47 B, Fernet token 228 B); the node address
# that follows is 248 bytes. 1 KiB leaves room for longer addresses and nothing for a stranger.
PREAUTH_MAX_FRAME_BYTES: Final = 1024
READ_BUDGET_BYTES: Final = 256 * 1024
# Legitimately unidentified at once: one connection per dialing peer, for one round trip.
MAX_UNKNOWN_CONNECTIONS: Final = 16
PREAUTH_TIMEOUT_S: Final = 5.0
# Remote addresses remembered for "log once per address"; past it, refusals are only counted.
_LOGGED_ADDRESSES_MAX: Final = 4096


def max_frame_bytes(max_command_bytes: int, batch_bytes: int, dump_chunk_bytes: int) -> int:
    """The largest frame a voter sends another, from the largest command (`max_command_bytes`,
    bridge's `_MAX_COMMAND_BYTES_LIMIT`), PySyncObj's `appendEntriesBatchSizeBytes` and its
    dump transfer chunk (`logCompactionBatchSize`). Pure.

    * A log entry's data is one type byte plus pickle((func_id, (command,))); protocol 2
      writes bytes as latin-1 text in UTF-8, at most 2 bytes per byte, plus 36 bytes
      (measured): entry <= 2 * command + 64.
    * An append batch takes entries until their data reaches `batch_bytes`, the last one
      included: data <= batch_bytes + entry. (A single entry of `batch_bytes` or more would
      go in chunks of `batch_bytes`; the bridge sets batch_bytes above any entry.)
    * Pickling the message writes each entry's data again at <= 2 bytes per byte plus <= 32
      bytes of tuple and integers; every entry but a leader's no-op is >= 37 bytes, so <= 3
      bytes per byte; a dump chunk travels as bytes in a tuple: <= 2 per byte + 64. 4 KiB
      more for the message's other fields, the random key wrapped around it, and no-ops.
    * zlib (level 3) expands incompressible input by at most 5 bytes per 16 KiB block plus 11.
    * Fernet: 1 version + 8 timestamp + 16 IV + AES-CBC padded to 16 (+1..16) + 32 HMAC,
      then urlsafe base64: 4 bytes per 3.
    """
    entry = 2 * max_command_bytes + 64
    pickled = max(3 * (batch_bytes + entry), 2 * dump_chunk_bytes + 64) + 4096
    compressed = pickled + 5 * (pickled // 16384 + 1) + 11
    token = 1 + 8 + 16 + (compressed // 16 + 1) * 16 + 32
    return 4 * ((token + 2) // 3)


# The bridge's settings: commands up to 1 MiB, batches of max(256 KiB, 4 x command), PySyncObj's
# default 64 KiB dump chunks: 6 MiB + 64 of entries, 18 MiB + 4288 pickled, 24.0 MiB on the wire.
# (The worst append measured, tests/unit/raftlog/test_quorum_gate.py: 5.5 MiB; zlib takes back
# most of what pickling adds, which this bound does not count on.)
MAX_FRAME_BYTES: Final = max_frame_bytes(1024 * 1024, max(2**18, 4 * 1024 * 1024), 2**16)


def length_refusal(length: int, authenticated: bool, limit_bytes: int = MAX_FRAME_BYTES) -> str | None:
    """Why a frame announcing `length` bytes is refused (a reason for `RefusalLog`), or None."""
    if length < 0:
        return "negative_frame_length"
    if not authenticated and length > PREAUTH_MAX_FRAME_BYTES:
        return "preauth_frame_too_large"
    if length > limit_bytes:
        return "frame_too_large"
    return None


def preauth_bytes_wanted(buffered: int, length: int | None) -> int:
    """How many bytes to read next on a connection that has not authenticated: up to the
    header, then up to the end of the frame (`length`, once known), and none once the whole
    frame is buffered (it must be authenticated before anything more is read)."""
    if length is None or buffered < HEADER_BYTES:
        return HEADER_BYTES - buffered
    return HEADER_BYTES + length - buffered


class RefusalLog:
    """Refusals by reason; each remote address is logged once (then only counted)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._logged: set[str] = set()

    def refuse(self, address: str, reason: str) -> None:
        with self._lock:
            self._counts[reason] = self._counts.get(reason, 0) + 1
            first = address not in self._logged and len(self._logged) < _LOGGED_ADDRESSES_MAX
            if first:
                self._logged.add(address)
        if first:
            log_event(logger, "quorum_conn_refused", level=logging.WARNING, peer=address, reason=reason,
                      note="further refusals from this address are only counted")

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)
