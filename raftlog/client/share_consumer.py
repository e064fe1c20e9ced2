"""A share-group consumer (KIP-932, "queues"), blocking shell: many consumers read the same
partitions, each record handed to one of them at a time under a lock, and acknowledged
(ACCEPT), released for redelivery (RELEASE) or rejected (REJECT).

    with ShareConsumer("127.0.0.1:9093", "jobs") as c:          # implicit acknowledgement
        c.subscribe(["orders"])
        for r in c.poll(timeout_ms=1000):   # the previous poll's records are accepted now
            handle(r)                       # r.delivery_count: 1 on the first delivery

    c = ShareConsumer(..., acknowledgement_mode="explicit")
    for r in c.poll(): c.acknowledge(r, "accept" | "release" | "reject")
    c.commit_sync()                         # send the acknowledgements now (else: with the next poll)

What a member does is share_session.py's (shared with the trio shell, share_aio.py); this
shell runs its procedures on the caller's thread over a blocking Admin. Heartbeats happen
inside `poll`: poll at least every heartbeat interval, and well within the record lock
duration (30 s by default).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Sequence
from typing import Any

from raftlog.base.errors import RaftlogError
from raftlog.client.blocking import Admin
from raftlog.client.clock import SYSTEM_CLOCK, Clock
from raftlog.client.security import SecurityOption
from raftlog.client.share_session import (
    ACK_TYPES,
    EMPTY_POLL_WAIT_MS,
    MAX_POLL_RECORDS,
    Procedure,
    ShareAcks,
    ShareRecord,
    ShareSession,
)

__all__ = ["ShareConsumer", "ShareRecord", "ShareAcks", "ACK_TYPES"]


class ShareConsumer:
    """See the module docstring. Not thread-safe."""

    def __init__(self, bootstrap: str | Iterable[str], group_id: str, *, acknowledgement_mode: str = "implicit",
                 max_poll_records: int = MAX_POLL_RECORDS, auto_offset_reset: str = "latest", client_id: str = "",
                 max_partition_fetch_bytes: int = 1 << 20, request_timeout_ms: int = 30_000,
                 rng: random.Random | None = None, clock: Clock = SYSTEM_CLOCK, security: SecurityOption = None):
        self.session = ShareSession(group_id, acknowledgement_mode=acknowledgement_mode,
                                    max_poll_records=max_poll_records, auto_offset_reset=auto_offset_reset,
                                    client_id=client_id, max_partition_fetch_bytes=max_partition_fetch_bytes)
        self._clock = clock
        self._admin = Admin(bootstrap, request_timeout_ms=request_timeout_ms, rng=rng, clock=clock,
                            security=security)
        self._closed = False

    @property
    def assignment(self) -> list[tuple[str, int]]:
        return list(self.session.assignment)

    @property
    def acknowledge_errors(self) -> list:
        return self.session.acknowledge_errors

    def _drive(self, procedure: Procedure) -> Any:
        """Run a session procedure: each request it yields is sent and its answer (or error)
        given back."""
        try:
            effect = next(procedure)
            while True:
                try:
                    answer = self._admin.request(effect.request, route=effect.route)
                except RaftlogError as exc:
                    effect = procedure.throw(exc)
                else:
                    effect = procedure.send(answer)
        except StopIteration as stop:
            return stop.value

    def subscribe(self, topics: Sequence[str]) -> None:
        self.session.subscribe(topics)

    def acknowledge(self, record: ShareRecord, ack_type: str = "accept") -> None:
        """Mark `record` accepted, released or rejected; sent with the next poll or commit.
        Raises InvalidRequestError for a record this consumer does not hold."""
        self.session.acknowledge(record, ack_type)

    def commit_sync(self) -> dict[tuple[str, int], RaftlogError | None]:
        """Send every pending acknowledgement now; per partition None or its error."""
        return self._drive(self.session.commit())

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ShareRecord]:
        """Heartbeat when due, then fetch from the assigned partitions (with the pending
        acknowledgements) until records come or `timeout_ms` passes."""
        if self._closed:
            raise RuntimeError("this ShareConsumer is closed")
        limit = self.session.start_poll(max_records)
        deadline = self._clock.monotonic_ms() + timeout_ms
        while True:
            self._drive(self.session.heartbeat(self._clock.monotonic_ms()))
            got = self._drive(self.session.fetch_round(limit))
            left = deadline - self._clock.monotonic_ms()
            if got or left <= 0:
                return got
            time.sleep(min(EMPTY_POLL_WAIT_MS, left) / 1000)  # nothing yet: ask again shortly

    def close(self) -> None:
        """Send the acknowledgements, leave the group, close the connections."""
        if self._closed:
            return
        self._closed = True
        try:
            self._drive(self.session.close(self._clock.monotonic_ms()))
        except RaftlogError:
            pass  # the locks run out on the leaders; the coordinator's session expires the member
        finally:
            self._admin.close()

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
