"""The ``share`` workload's client and generator: a share group (KIP-932, "queues for Kafka")
read by every client process with raftlog's own `ShareConsumer` (native protocol, explicit
acknowledgement), written by the same processes' acks=all producers.

(Issue 43 calls this workload ``queue``; that name was taken by the FIFO workload, so it is
``share`` here.)

Ops (checked by `share_checker`): ``send`` as the native client's (unique ints); ``share``:
one step of a member, which the client picks — while it holds nothing it polls (completion
value ``{"deliveries": [[key, offset, value, delivery_count], ...]}``, the records now held,
``"gaps": [[key, offset], ...]`` for offsets acquired without their record, and
``"unanswered": [key, ...]`` for partitions where a share_fetch attempt got no answer: it may
have acquired records the member never saw, each one delivery of its limit used up);
while it holds records it acknowledges each (`ack_type_for`: a few "poison" values REJECTed,
a few RELEASEd on every delivery until `max.delivery.attempts` archives them, some RELEASEd on
their first delivery, the rest ACCEPTed) and sends the acknowledgements at once
(``commit_sync``): ``{"acks": [[key, offset, value, delivery_count, type, result], ...]}``,
`result` None when the leader applied it durably, else the error's code (or ``"unknown"``).
A step that raises ends ``info``: its client is retired, and what it held comes back to the
others once the locks (`SHARE_LOCK_DURATION_MS`) run out — the crash of a member.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final

from raftlog.base.errors import RaftlogError
from raftlog.client.core import Call
from raftlog.client.share_consumer import ShareConsumer, ShareRecord

from . import generator as g
from .client import Client, ClientOptions, _decode, error_code
from .history import Op, key_of

__all__ = ["ShareClient", "share_ops", "ack_type_for", "SHARE_GROUP", "SHARE_LOCK_DURATION_MS",
           "SHARE_DELIVERY_LIMIT", "SHARE_SETTINGS"]

log = logging.getLogger(__name__)

SHARE_GROUP: Final = "jepsen-share"
# Short locks, so a crashed member's records come back within a run (Kafka's default is 30 s).
SHARE_LOCK_DURATION_MS: Final = 5_000
SHARE_DELIVERY_LIMIT: Final = 5  # group.share.delivery.count.limit (Kafka's default)
SHARE_SETTINGS: Final = {"group_share_record_lock_duration_ms": SHARE_LOCK_DURATION_MS,
                         "group_share_delivery_count_limit": SHARE_DELIVERY_LIMIT}
MAX_POLL_RECORDS: Final = 20


def ack_type_for(value: int, delivery_count: int) -> str:
    """What the workload does with a record: REJECT poison values, RELEASE "flaky" values on
    every delivery (archived at the limit), RELEASE some on their first delivery, else ACCEPT."""
    if value % 23 == 0:
        return "reject"
    if value % 31 == 1:
        return "release"
    if value % 5 == 2 and delivery_count == 1:
        return "release"
    return "accept"


class ShareClient(Client):
    """One history process: the native producer of `Client` and a share-group member."""

    def __init__(self, bootstrap: Sequence[str], *, options: ClientOptions | None = None, topic: str = "jepsen"):
        super().__init__(bootstrap, options=options)
        self.topic = topic
        self._share: ShareConsumer | None = None
        self._held: list[ShareRecord] = []
        self._fetches: list[Call] = []  # this poll's share_fetch calls (`_watch_fetches`)

    def _member(self) -> ShareConsumer:
        if self._share is None:
            o = self.options
            self._share = ShareConsumer(self.bootstrap, SHARE_GROUP, acknowledgement_mode="explicit",
                                        auto_offset_reset="earliest", max_poll_records=MAX_POLL_RECORDS,
                                        request_timeout_ms=o.request_timeout_ms, security=o.security)
            self._share.subscribe([self.topic])
            self._watch_fetches(self._share)
        return self._share

    def _watch_fetches(self, share: ShareConsumer) -> None:
        """Keep the member's share_fetch calls: a call whose attempt got no answer (a request
        timeout, a broken connection) is `maybe_applied` even when a retry then succeeded, and
        that lost attempt may have acquired records (their delivery counts went up unseen)."""
        core = share._admin._core  # noqa: SLF001 - the history needs what the client retried
        submit = core.submit

        def submit_watched(request: dict, now_ms: int, **kw: Any) -> Call:
            call = submit(request, now_ms, **kw)
            if request.get("op") == "share_fetch":
                self._fetches.append(call)
            return call

        core.submit = submit_watched  # type: ignore[method-assign]

    def close_sync(self) -> None:
        share, self._share = self._share, None
        if share is not None:
            # A retired member dies holding its records (nothing acknowledged, nothing
            # released): they come back to the others when their locks run out.
            share._admin.close()  # noqa: SLF001 - the crash of a member, on purpose
        super().close_sync()

    def invoke_sync(self, op: Op) -> tuple[str, Any, str | None, dict[str, Any]]:
        if op.f != "share":
            return super().invoke_sync(op)
        try:
            if self._held:
                return self._ack()
            return self._poll_share(int(op.get("poll_ms", 200)))
        except (RaftlogError, RuntimeError) as exc:
            log.debug("share step failed: %r", exc)
            return "info", None, error_code(exc), {}

    def _facts(self) -> dict[str, Any]:
        share = self._share
        return {} if share is None else {"member_id": share.session.member_id}

    def _poll_share(self, poll_ms: int) -> tuple[str, Any, str | None, dict[str, Any]]:
        self._fetches = []
        records = self._member().poll(timeout_ms=poll_ms)
        unanswered = sorted({key_of(c.request["topic"], c.request["partition"]) for c in self._fetches
                             if c.maybe_applied})
        self._held = list(records)
        out = [[key_of(r.topic, r.partition), r.offset, _decode(r.value), r.delivery_count] for r in records]
        # Acquired offsets whose records the answer did not carry: the session archives them
        # (GAP) with the next acknowledgement. Over a written record that is a loss.
        gaps = sorted([key_of(*tp), off] for tp, pending in self._member().session.acks.pending.items()
                      for off, kind in pending.items() if kind == 0)
        return "ok", {"deliveries": out, **({"gaps": gaps} if gaps else {}),
                      **({"unanswered": unanswered} if unanswered else {})}, None, self._facts()

    def _ack(self) -> tuple[str, Any, str | None, dict[str, Any]]:
        share = self._member()
        held, self._held = self._held, []
        types, not_held = {}, set()
        for r in held:
            value = _decode(r.value)
            types[(r.partition, r.offset)] = t = ack_type_for(value if isinstance(value, int) else 0, r.delivery_count)
            try:
                share.acknowledge(r, t)
            except RaftlogError:  # its partition left this member's assignment: nothing sent
                not_held.add((r.partition, r.offset))
        try:
            results = share.commit_sync()
        except RaftlogError as exc:  # not per partition: whether any applied is unknown
            log.debug("commit_sync raised %r", exc)
            results = None
        acks = []
        for r in held:
            if (r.partition, r.offset) in not_held:
                result: str | None = "not-held"
            elif results is None:
                result = "unknown"
            else:
                err = results.get((r.topic, r.partition), "unknown")
                result = None if err is None else (err if isinstance(err, str) else error_code(err))
            acks.append([key_of(r.topic, r.partition), r.offset, _decode(r.value), r.delivery_count,
                         types[(r.partition, r.offset)], result])
        return "ok", {"acks": acks}, None, self._facts()


def share_ops(keys: Sequence[str], *, rate: float, first_value: int = 0, poll_ms: int = 200,
              value_stride: int = 1_000_000_000) -> g.Generator:
    """Sends of unique ints (three streams with disjoint values) and share steps, 1:1, at `rate`."""
    step = {"f": "share", "value": None, "poll_ms": poll_ms}
    return g.rate(rate, g.mix(*(g.sends(keys, first_value=first_value + k * value_stride) for k in range(3)),
                              *(g.repeat(step) for _ in range(3))))


def share_drain(drain_ns: int, *, poll_ms: int = 200) -> g.Generator:
    """The final phase's reads: every client process takes share steps for `drain_ns`."""
    return g.clients(g.time_limit(drain_ns, g.repeat({"f": "share", "value": None, "poll_ms": poll_ms})))
