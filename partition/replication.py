"""Replication links between brokers: fetch sessions and the peer ops that carry the
partition Raft groups' messages (DESIGN §4 "Replication", PROTOCOL.md "Peer ops").

The cores exchange one-way messages (partition/raft.py). This module moves them:

* Fetch requests (follower -> leader) and fetch responses (leader -> follower) ride on
  `replica_fetch`: ONE session per leader broker covers every partition this broker follows
  from it. The follower sends its pending FetchRequests; the leader hands each to the
  partition's core and answers with whatever FetchResponses are queued for that follower
  broker (its "outbox"), waiting (long poll, `max_wait_ms`) only while the outbox is empty.
  The cores park caught-up fetches and answer them the moment data arrives or the high
  watermark moves, so the session returns as soon as ANY partition has something: no
  partition waits for another's long poll. The follower keeps at most
  MAX_FETCH_RPCS_PER_LEADER requests in flight: a new FetchRequest (e.g. right after a flush,
  carrying the durable offset that moves the high watermark) goes out at once in a new
  request instead of waiting for the outstanding long poll; with nothing to send and fetches
  unanswered, one request stays parked at the leader as the return path.
* A `replica_fetch` the peer pool could not send because the connection was refused
  (nothing listens at the leader broker's address: its process died) calls
  `on_unreachable(broker_id)`; the replica manager tells that broker's followers here
  (raft.py `leader_unreachable`), which run for election at once, staggered, instead of
  after an election timeout that slows down with the node's load.
* Every other Raft message (votes, begin/end epoch, timeout-now) rides on `raft`, a one-way
  batch answered at once; replies travel back the same way, on the other broker's link.
* Quiescent partitions (partition/raft.py "Quiescence"): a held fetch's `FetchHeld` and its
  eventual answer travel in the outbox like any fetch response. While any partition's fetch
  is held at a leader broker, the session keeps one `replica_fetch` parked there (the return
  path; an empty long poll every `session_max_wait_ms` when nothing happens), and the links
  watch each other broker for the replica manager (`watch`, from its tick loop): a
  follower's link to a leader with held fetches and no answered `replica_fetch` for
  `silence_ms` is reported silent (its followers run: `leader_unreachable`), a follower
  broker that sent no `replica_fetch` for `silence_ms` is reported silent to the leaders
  here (`follower_silent`) and heard again at its next one (`follower_heard`), and a failed
  `replica_fetch` reports the link broken (`on_broken`: quiescent followers of that leader
  fetch at once, since their held fetches may have died with its process).
* Silence is judged per broker, not per link direction or per group (issue 46; multi-Raft
  systems coalesce heartbeats the same way): anything heard from a broker (an answered
  `replica_fetch`, a `replica_fetch` it sent, a `raft` batch) keeps all its groups quiet
  (`heard_at`). And a silence is only blamed on the other broker while this node's own
  event loop kept up: `watch` called more than STALL_S after it was due (a starved loop,
  e.g. 10,000 groups electing on a loaded machine) may not have read what the sockets hold,
  so every silence counts again from that call (`stalls`). At 10,000 replicas per node a
  starved loop's silences started elections of healthy groups, hundreds of leader changes
  a minute for ten minutes after a kill. A broker that is really gone is still found at
  once: connection refused (`on_unreachable`), or the controller fencing it (the replica
  manager's `_on_fenced`).

Records are never decoded, and not copied on the way (issue 19): a follower asks for them as
an attachment (`attach: true`, PROTOCOL.md "Attachments"). The leader's replica puts a file
slice of its log into the answer where the peer links are plain TCP (`file_slices`; the
slice's range was CRC-checked once, or is the leader's own append still in its cached tail,
partition/log.py "Integrity" and `read_slice`, and it is "intact" only while no cut of the
log began since: partition/replica.py), the log's bytes over TLS; the answer's CBOR holds
each response's range (`records_at`, `records_bytes`) and the listener sends the slices with
os.sendfile after the frame. The follower's peer pool reads the
attachment into one buffer; each response's records are a view of it. The follower reads the
batch headers and checks the CRCs (once: the log and the producer state reuse that walk,
batch.CheckedBatches) to build the (base_offset, last_offset, epoch) summary the core needs,
drops a leading batch that starts before the fetch offset, and refuses (drops; the fetch is
retried) a response whose batch straddles the fetch offset or fails its CRC. A dropped message
is always safe: Raft retries. An answer that does not decode (a range outside its attachment,
a bad field) is dropped whole and its connection closed (`replica_fetch_bad_response`).

Peer ops (fields; every message names its partition with `topic` and `partition`):

`replica_fetch` {broker_id: int (the follower), max_wait_ms: int <= 10000, max_bytes: int,
    attach: bool (absent: false), fetches: [{topic, partition, epoch, fetch_offset,
    last_fetched_epoch, flushed_offset, fetch_id, log_start_offset (absent: 0), quiescent:
    true (absent: false; hold it)}]}
    -> {responses: [{topic, partition, epoch, leader_id: int|null, fetch_id, error: str|null
    ("FENCED_LEADER_EPOCH" | "NOT_LEADER" | "OFFSET_OUT_OF_RANGE"), high_watermark,
    fetch_offset, diverging_epoch: int|null, diverging_end_offset, read_offset: int|null,
    records: bytes|null (whole RecordBatch v2 batches; without `attach`), records_at,
    records_bytes (with `attach`, where there are records: their range in the attachment),
    log_start_offset (the leader's; the follower raises its own to it, up to its high
    watermark: DeleteRecords)} | {topic, partition, epoch, fetch_id, held: true} (FetchHeld:
    that fetch is held)], attachment_bytes (with `attach`)}
    Answers queued for the follower broker, at least one if any, then more while under
    `max_bytes`; an empty list after `max_wait_ms`. A fetch for a partition this broker does
    not host is dropped (the follower's core re-sends after its fetch timeout).
`raft` {broker_id: int (the sender), messages: [{type, topic, partition, epoch, ...}]} -> {}
    (answered once queued to each replica, not handled: see Replica.deliver_soon)
    type "vote_request" {last_epoch, log_end_offset, pre_vote, unclean?: true (absent =
    false)}; "vote_response" {granted,
    pre_vote, leader_id: int|null}; "begin_epoch" {}; "end_epoch" {}; "timeout_now" {}.
    `sender` of each message is `broker_id`. Messages for unknown partitions are dropped.
`transfer_leadership` {topic, partition, target} -> {} (served by partition/manager.py):
    the controller asks the current leader to hand over to `target`; NOT_LEADER otherwise.

Limits: per remote broker, at most one queued FetchRequest per partition (newest wins), at
most MAX_QUEUED_MESSAGES other messages (oldest dropped), at most one queued FetchResponse or
FetchHeld per partition (newest wins), MAX_FETCH_RPCS_PER_LEADER requests in flight, `held`
keys at most one per partition.

Concurrency: trio-thread only.

Size: about 860 lines; the leader side (`_handle_replica_fetch` to `_answer`, ~100
lines) is the seam to cut along.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, Final

import trio

from partition.batch import CheckedBatches, iter_headers
from partition.errors import CorruptRecordError
from partition.membership import memberships_in
from partition.segment import pread_exact
from partition.throttle import Throttle, charge_learner_answer, charge_learning, hold_learner_fetch, pace_learner_fetch
from partition.raft import (
    BeginQuorumEpoch,
    EndQuorumEpoch,
    FetchHeld,
    FetchRequest,
    FetchResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from raftlog.base.errors import InvalidRequestError, PeerUnavailableError, RaftlogError
from raftlog.base.eventlog import log_event
from raftlog.base.peer import PeerPool
from raftlog.base.protocol import Attached, Later, Request, field, inline_handler

__all__ = [
    "ReplicationLinks",
    "encode_message",
    "decode_message",
    "encode_fetch_request",
    "decode_fetch_request",
    "encode_fetch_response",
    "decode_fetch_response",
    "encode_fetch_held",
    "decode_fetch_held",
    "MAX_FETCH_RPCS_PER_LEADER",
]

logger = logging.getLogger(__name__)

MAX_FETCH_RPCS_PER_LEADER: Final = 3
MAX_QUEUED_MESSAGES: Final = 4096
MAX_MESSAGES_PER_CALL: Final = 512
SESSION_MAX_WAIT_MS: Final = 500
SESSION_MAX_BYTES: Final = 32 << 20
MAX_WAIT_MS_LIMIT: Final = 10_000
AWAIT_ANSWER_S: Final = 3.0  # keep a poll parked for a fetch sent this recently
DEFAULT_SILENCE_MS: Final = 1_250  # `watch`: a link this long without a replica_fetch is silent
STALL_S: Final = 0.5  # `watch` this late: our own loop was starved, no link is blamed for it
FAILURE_BACKOFF_S: Final = 0.1
RAFT_CALL_TIMEOUT_S: Final = 2.0
INLINE_BUDGET_S: Final = 0.002  # a replica_fetch's fetches delivered in the reader, at most this long

ReplicaLookup = Callable[[str, int], Any]  # -> partition.replica.Replica | None

# ------------------------------------------------------------------------------- codecs


def encode_fetch_request(topic: str, partition: int, m: FetchRequest) -> dict[str, Any]:
    d = {"topic": topic, "partition": partition, "epoch": m.epoch,
         "fetch_offset": m.fetch_offset, "last_fetched_epoch": m.last_fetched_epoch,
         "flushed_offset": m.flushed_offset, "fetch_id": m.fetch_id,
         "log_start_offset": m.log_start_offset}
    if m.quiescent:
        d["quiescent"] = True  # absent = false: an older leader never holds it
    return d


def decode_fetch_request(d: Mapping[str, Any], sender: int, where: str) -> tuple[str, int, FetchRequest]:
    return (
        field(d, "topic", str, where=where),
        field(d, "partition", int, min_value=0, where=where),
        FetchRequest(
            sender, field(d, "epoch", int, where=where), field(d, "fetch_offset", int, where=where),
            field(d, "last_fetched_epoch", int, where=where),
            field(d, "flushed_offset", int, where=where), field(d, "fetch_id", int, where=where),
            field(d, "log_start_offset", int, default=0, min_value=0, where=where),
            field(d, "quiescent", bool, default=False, where=where),
        ),
    )  # fmt: skip


def encode_fetch_held(topic: str, partition: int, m: FetchHeld) -> dict[str, Any]:
    return {"topic": topic, "partition": partition, "epoch": m.epoch, "fetch_id": m.fetch_id,
            "held": True}


def decode_fetch_held(d: Mapping[str, Any], sender: int, where: str) -> tuple[str, int, FetchHeld]:
    return (
        field(d, "topic", str, where=where),
        field(d, "partition", int, min_value=0, where=where),
        FetchHeld(sender, field(d, "epoch", int, where=where), field(d, "fetch_id", int, where=where)),
    )  # fmt: skip


def encode_fetch_response(
    topic: str, partition: int, m: FetchResponse, *, records_at: int | None = None
) -> dict[str, Any]:
    """The response's CBOR map: its records inline (`records`, bytes), or with `records_at`
    their range in the answer's attachment (`records_at`, `records_bytes`: m.records' length)."""
    d = {"topic": topic, "partition": partition, "epoch": m.epoch, "leader_id": m.leader_id,
         "fetch_id": m.fetch_id, "error": m.error, "high_watermark": m.high_watermark,
         "fetch_offset": m.fetch_offset, "diverging_epoch": m.diverging_epoch,
         "diverging_end_offset": m.diverging_end_offset, "read_offset": m.read_offset,
         "log_start_offset": m.log_start_offset}
    records = m.records
    if records_at is not None:
        d["records_at"] = records_at
        d["records_bytes"] = len(records)
    else:
        if records is not None and type(records) is not bytes:
            records = bytes(records)
        d["records"] = records
    return d


def decode_fetch_response(
    d: Mapping[str, Any], sender: int, where: str, attachment: memoryview | None = None
) -> tuple[str, int, FetchResponse | None]:
    """The response with its `batches` summary filled from the record headers and its
    records a batch.CheckedBatches (a view of `attachment`, the answer's, when it names a
    range there); None when it must be dropped (a CRC failure, a batch straddling the fetch
    offset). Raises InvalidRequestError naming the bad field (a range outside the
    attachment among them)."""
    topic = field(d, "topic", str, where=where)
    partition = field(d, "partition", int, min_value=0, where=where)
    fetch_offset = field(d, "fetch_offset", int, where=where)
    if "records_at" in d:
        at = field(d, "records_at", int, min_value=0, where=where)
        size = field(d, "records_bytes", int, min_value=0, where=where)
        total = 0 if attachment is None else len(attachment)
        if at + size > total:
            raise InvalidRequestError(
                f"records [{at}, {at + size}) outside the attachment of {total} bytes",
                field=f"{where}.records_at")
        records: Any = attachment[at : at + size] if size else None  # type: ignore[index]
    else:
        records = field(d, "records", bytes, nullable=True, where=where)
    m = FetchResponse(
        sender, field(d, "epoch", int, where=where),
        field(d, "leader_id", int, nullable=True, where=where),
        field(d, "fetch_id", int, where=where), field(d, "error", str, nullable=True, where=where),
        field(d, "high_watermark", int, where=where), fetch_offset,
        field(d, "diverging_epoch", int, nullable=True, where=where),
        field(d, "diverging_end_offset", int, where=where),
        field(d, "read_offset", int, nullable=True, where=where), None, (),
        field(d, "log_start_offset", int, default=-1, where=where),
    )  # fmt: skip
    if not records:
        return topic, partition, m
    summary = []
    checked = []
    skip = 0
    try:
        for pos, h in iter_headers(records, verify=True):
            if h.base_offset < fetch_offset:
                if h.last_offset >= fetch_offset or summary:
                    log_event(logger, "replica_fetch_straddle", level=logging.WARNING,
                              topic=topic, partition=partition, fetch_offset=fetch_offset,
                              base_offset=h.base_offset)
                    return topic, partition, None
                skip = pos + h.size
                continue
            summary.append((h.base_offset, h.last_offset, h.partition_leader_epoch))
            checked.append((pos - skip, h))
    except CorruptRecordError as exc:
        log_event(logger, "replica_fetch_corrupt", level=logging.WARNING, topic=topic,
                  partition=partition, fetch_offset=fetch_offset, reason=str(exc))
        return topic, partition, None
    if not summary:
        return topic, partition, m
    if skip:
        records = memoryview(records)[skip:]
    try:
        memberships = memberships_in(records, checked)  # control batches only: rare
    except CorruptRecordError as exc:
        log_event(logger, "replica_fetch_corrupt", level=logging.WARNING, topic=topic,
                  partition=partition, fetch_offset=fetch_offset, reason=str(exc))
        return topic, partition, None
    return topic, partition, m.with_records(CheckedBatches(records, checked), tuple(summary),
                                            memberships)


_TYPES: Final = {
    VoteRequest: "vote_request", VoteResponse: "vote_response",
    BeginQuorumEpoch: "begin_epoch", EndQuorumEpoch: "end_epoch", TimeoutNow: "timeout_now",
}  # fmt: skip


def encode_message(topic: str, partition: int, m: Any) -> dict[str, Any]:
    """A non-fetch Raft message as a `raft` op entry."""
    d: dict[str, Any] = {"type": _TYPES[type(m)], "topic": topic, "partition": partition,
                         "epoch": m.epoch}
    if type(m) is VoteRequest:
        d.update(last_epoch=m.last_epoch, log_end_offset=m.log_end_offset, pre_vote=m.pre_vote)
        if m.unclean:
            d["unclean"] = True  # absent = false: older brokers read it as an ordinary request
    elif type(m) is VoteResponse:
        d.update(granted=m.granted, pre_vote=m.pre_vote, leader_id=m.leader_id)
    return d


def decode_message(d: Mapping[str, Any], sender: int, where: str) -> tuple[str, int, Any]:
    """Raises InvalidRequestError naming the bad field."""
    kind = field(d, "type", str, where=where)
    topic = field(d, "topic", str, where=where)
    partition = field(d, "partition", int, min_value=0, where=where)
    epoch = field(d, "epoch", int, min_value=0, where=where)
    if kind == "vote_request":
        m: Any = VoteRequest(sender, epoch, field(d, "last_epoch", int, where=where),
                             field(d, "log_end_offset", int, where=where),
                             field(d, "pre_vote", bool, where=where),
                             field(d, "unclean", bool, default=False, where=where))
    elif kind == "vote_response":
        m = VoteResponse(sender, epoch, field(d, "granted", bool, where=where),
                         field(d, "pre_vote", bool, where=where),
                         field(d, "leader_id", int, nullable=True, where=where))
    elif kind == "begin_epoch":
        m = BeginQuorumEpoch(sender, epoch)
    elif kind == "end_epoch":
        m = EndQuorumEpoch(sender, epoch)
    elif kind == "timeout_now":
        m = TimeoutNow(sender, epoch)
    else:
        raise InvalidRequestError(f"unknown raft message type {kind!r:.40}", field=f"{where}.type")
    return topic, partition, m


def _release(records: Any) -> None:
    """Close a file slice (partition/replica.py) an answer no longer sends."""
    if records is not None and not isinstance(records, (bytes, bytearray, memoryview)):
        records.close()


def _take(link: _Link, max_bytes: int) -> tuple[list[tuple[tuple[str, int], FetchResponse]],
                                                  list[dict[str, Any]]]:
    """Take the link's queued answers in readiness order: (the FetchResponses, at least one
    if any, then more while under `max_bytes`; the FetchHeld entries met on the way, encoded:
    they carry no records, inline either way)."""
    taken: list[tuple[tuple[str, int], FetchResponse]] = []
    held = []
    size = 0
    outbox = link.outbox
    while outbox and (not taken or size < max_bytes):
        key = next(iter(outbox))
        m = outbox.pop(key)
        if type(m) is FetchHeld:
            held.append(encode_fetch_held(key[0], key[1], m))
            continue
        records = m.records
        if records is not None and taken and size + len(records) > max_bytes:
            outbox[key] = m  # the next request takes it
            break
        taken.append((key, m))
        size += 64 + (len(records) if records is not None else 0)
    return taken, held


async def _inline(taken: list[tuple[tuple[str, int], FetchResponse]]) -> list[dict[str, Any]]:
    """The responses with their records inline (a follower that did not ask for an
    attachment): a file slice is read in a worker thread and used only if still intact."""
    out = []
    try:
        for (topic, partition), m in taken:
            records = m.records
            if records is not None and not isinstance(records, (bytes, bytearray, memoryview)):
                data = await trio.to_thread.run_sync(pread_exact, records.fd, records.length,
                                                     records.offset)
                if not records.intact() or len(data) != records.length:
                    continue  # the log was cut meanwhile: dropped, the fetch comes again
                m = m.with_records(data, m.batches)
            out.append(encode_fetch_response(topic, partition, m))
    finally:
        for _, m in taken:
            _release(m.records)
    return out


# -------------------------------------------------------------------------------- links


class _Link:
    """Everything this broker exchanges with one other broker."""

    def __init__(self, broker_id: int):
        self.broker_id = broker_id
        # follower side: to send
        self.fetches: dict[tuple[str, int], FetchRequest] = {}
        self.messages: deque[tuple[str, int, Any]] = deque()
        self.awaiting: dict[tuple[str, int], float] = {}  # fetch sent, answer not seen
        self.in_flight = 0  # fetch calls
        self.callers = 0  # ReplicationLinks._caller loops
        self.idle: trio.Event | None = None  # set by _kick: the idle caller has work
        self.raft_sending = False
        self.held: set[tuple[str, int]] = set()  # our fetches this leader broker holds
        self.held_checked_at = trio.current_time()
        self.last_ok = trio.current_time()  # our last replica_fetch it answered
        self.leader_silent = False  # reported by `watch` (until it answers again)
        # leader side: answers waiting for this follower broker's next replica_fetch
        self.outbox: dict[tuple[str, int], FetchResponse | FetchHeld] = {}
        self.outbox_event = trio.Event()
        self.failures = 0
        self.last_request_at: float | None = None  # its last replica_fetch here
        self.follower_silent = False  # reported by `watch` (until it fetches again)
        self.follower_heard = False  # it fetched again: `watch` reports it
        self.heard_at: float | None = None  # anything from this broker last arrived (module docstring)


class ReplicationLinks:
    """The Transport of every local Replica, and the `replica_fetch` / `raft` peer ops."""

    def __init__(
        self,
        node_id: int,
        peers: PeerPool,
        peer_address: Callable[[int], str | None],
        lookup: ReplicaLookup,
        *,
        session_max_wait_ms: int = SESSION_MAX_WAIT_MS,
        session_max_bytes: int = SESSION_MAX_BYTES,
        silence_ms: int = DEFAULT_SILENCE_MS,
        on_unreachable: Callable[[int], Awaitable[None]] | None = None,
        on_broken: Callable[[int], Awaitable[None]] | None = None,
        on_news: Callable[[], None] | None = None,
        throttle: Throttle | None = None,  # follower.replication.throttled.rate (throttle.py)
        leader_throttle: Throttle | None = None,  # leader.replication.throttled.rate
    ):
        if silence_ms < 2 * session_max_wait_ms:
            raise ValueError("silence_ms must be at least twice session_max_wait_ms: an idle "
                             "session's long poll would look like silence")
        self.node_id = node_id
        # Leaders answer with file slices of their logs (sent with os.sendfile) where the
        # peer connections are plain TCP; over TLS the bytes must pass through the stream, so
        # the replicas read them (partition/replica.py `_send`).
        self.file_slices = not peers.tls
        self.on_unreachable = on_unreachable
        self.on_broken = on_broken
        self.on_news = on_news  # a follower broker heard again: `watch` has news at once
        self.silence_s = silence_ms / 1000
        self.peers = peers
        self.peer_address = peer_address
        self.lookup = lookup
        self.session_max_wait_ms = session_max_wait_ms
        self.session_max_bytes = session_max_bytes
        self._links: dict[int, _Link] = {}
        self._nursery: trio.Nursery | None = None
        self.peer_handlers = {"replica_fetch": self._handle_replica_fetch, "raft": self._handle_raft}
        self.dropped_messages = 0
        self.throttle = throttle
        self.leader_throttle = leader_throttle
        self._recount_from = float("-inf")  # `watch`: silences count from here (a stall's end)
        self.stalls = 0  # `watch` calls that came more than STALL_S late

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None  # closing: what is sent from now on is dropped

    def status(self) -> dict[str, Any]:
        return {
            str(b): {"in_flight": link.in_flight, "queued_fetches": len(link.fetches),
                     "queued_messages": len(link.messages), "outbox": len(link.outbox),
                     "held": len(link.held), "leader_silent": link.leader_silent,
                     "follower_silent": link.follower_silent}
            for b, link in sorted(self._links.items())
        }

    def watch(self, now: float, *, due: float | None = None) -> tuple[list[int], list[int], list[int]]:
        """The links' news since the last call, for the replica manager's tick loop (module
        docstring): (leader brokers gone silent on fetches they hold, follower brokers gone
        silent, follower brokers heard again). Each silence is reported once, until the link
        is heard from again. `due`: when the caller's timer meant to call; more than STALL_S
        later, this node's loop was starved and every silence counts again from `now`."""
        if due is not None and now - due > STALL_S:
            self._recount_from = now
            self.stalls += 1
        leaders: list[int] = []
        silent: list[int] = []
        heard: list[int] = []
        limit = self.silence_s
        for b, link in self._links.items():
            if link.held and not link.leader_silent and now - self._leader_heard(link) > limit:
                link.leader_silent = True
                leaders.append(b)
            if (link.last_request_at is not None and not link.follower_silent
                    and now - self._follower_heard(link) > limit):
                link.follower_silent = True
                silent.append(b)
                # Nobody collects these now: close their file slices (a broker that never
                # returns would keep a descriptor per partition). Raft asks again if it does.
                for m in link.outbox.values():
                    if type(m) is FetchResponse:
                        _release(m.records)
                link.outbox.clear()
            if link.follower_heard:
                link.follower_heard = False
                heard.append(b)
        return leaders, silent, heard

    def next_news_at(self, now: float) -> float:
        """The earliest time `watch` could report a silence it would not report now, at most
        one silence limit from `now` (a silence that begins later is reported no earlier than
        that). A follower broker heard again is news at once: `on_news` says so."""
        limit = self.silence_s
        at = now + limit
        for link in self._links.values():
            if link.held and not link.leader_silent:
                at = min(at, self._leader_heard(link) + limit)
            if link.last_request_at is not None and not link.follower_silent:
                at = min(at, self._follower_heard(link) + limit)
        return at

    def _leader_heard(self, link: _Link) -> float:
        """When a leader broker last counted as heard: its last answer to us, anything else
        from it, or the end of our own last stall (module docstring)."""
        heard = link.last_ok if link.heard_at is None else max(link.last_ok, link.heard_at)
        return max(heard, self._recount_from)

    def _follower_heard(self, link: _Link) -> float:
        """When a follower broker last counted as heard (as `_leader_heard`): its last
        replica_fetch here, anything else from it, or the end of our own last stall."""
        assert link.last_request_at is not None
        heard = link.last_request_at if link.heard_at is None else max(link.last_request_at, link.heard_at)
        return max(heard, self._recount_from)

    def answering(self, broker_id: int) -> bool:
        """Whether broker `broker_id` answered one of our `replica_fetch` calls, or sent us
        anything, within the last half `silence_ms`: its process runs and reaches us (raft.py
        `leader_alive`). A stopped or cut-off leader broker stops answering well within an
        election timeout, so its followers still run on time."""
        link = self._links.get(broker_id)
        if link is None or link.failures != 0:
            return False
        heard = link.last_ok if link.heard_at is None else max(link.last_ok, link.heard_at)
        return trio.current_time() - heard <= self.silence_s / 2

    def silent_followers(self) -> list[int]:
        """Follower brokers reported silent and not heard from since."""
        return [b for b, link in self._links.items() if link.follower_silent]

    def _link(self, broker_id: int) -> _Link:
        link = self._links.get(broker_id)
        if link is None:
            link = self._links[broker_id] = _Link(broker_id)
        return link

    # ---------------------------------------------------------------- Transport

    def send(self, replica: Any, to: int, message: Any) -> None:
        """Queue `message` from `replica` (topic, partition) to broker `to`. Never blocks."""
        link = self._link(to)
        key = (replica.topic, replica.partition)
        kind = type(message)
        if kind is FetchResponse or kind is FetchHeld:
            old = link.outbox.pop(key, None)  # keep insertion order = readiness order
            if old is not None and type(old) is FetchResponse:
                _release(old.records)
            link.outbox[key] = message
            link.outbox_event.set()
            return
        if kind is FetchRequest:
            if not pace_learner_fetch(self._nursery, self.throttle, replica, to, message,
                                      partial(self._release_fetch, replica, link, key)):
                self._queue_fetch(link, key, message)
            return
        if len(link.messages) >= MAX_QUEUED_MESSAGES:
            link.messages.popleft()
            self.dropped_messages += 1
        link.messages.append((replica.topic, replica.partition, message))
        self._kick(link)

    def _release_fetch(self, replica: Any, link: _Link, key: tuple[str, int], message: FetchRequest) -> None:
        """A learner's fetch the throttle held back leaves now: its timeout starts now."""
        replica.core.fetch_left(message.fetch_id)
        self._queue_fetch(link, key, message)

    def _queue_fetch(self, link: _Link, key: tuple[str, int], message: FetchRequest) -> None:
        link.fetches[key] = message
        link.held.discard(key)
        self._kick(link)

    # ---------------------------------------------------------------- follower side

    def _kick(self, link: _Link) -> None:
        """Something may be due on the link: the raft sender runs, and a fetch call goes out
        from the link's idle caller, or from a new one while fewer than
        MAX_FETCH_RPCS_PER_LEADER exist. Never blocks."""
        nursery = self._nursery
        if nursery is None:
            return  # not running yet: the next send after `run` starts them
        if link.messages and not link.raft_sending:
            link.raft_sending = True
            nursery.start_soon(self._raft_sender, link)
        if link.idle is not None:
            link.idle.set()
        elif link.callers < MAX_FETCH_RPCS_PER_LEADER and self._call_due(link):
            link.callers += 1
            nursery.start_soon(self._caller, link)

    def _call_due(self, link: _Link) -> bool:
        return bool((link.fetches and link.in_flight < MAX_FETCH_RPCS_PER_LEADER)
                    or (link.in_flight == 0 and (link.awaiting or link.held)))

    async def _caller(self, link: _Link) -> None:
        """A loop of `replica_fetch` calls to one leader broker: the link's calls run in at
        most MAX_FETCH_RPCS_PER_LEADER of these, each making the next call itself once its
        answer is handled (no task per call, no hop through another task). One with nothing
        to do waits for `_kick` as the link's idle caller, or ends when another waits."""
        try:
            while True:
                fetches = self._next_call(link)
                if fetches is not None:
                    await self._fetch_call(link, fetches)
                    continue
                if link.idle is not None:
                    return
                link.idle = idle = trio.Event()
                try:
                    await idle.wait()
                finally:
                    link.idle = None
        finally:
            link.callers -= 1

    def _next_call(self, link: _Link) -> dict[tuple[str, int], FetchRequest] | None:
        """The fetches of the link's next call (taken from the queue; {} for the return path
        of answers, and the link's pulse), or None when none is due."""
        now = trio.current_time()
        if link.awaiting:
            for key in [k for k, t in link.awaiting.items() if now - t > AWAIT_ANSWER_S]:
                del link.awaiting[key]
        if link.fetches and link.in_flight < MAX_FETCH_RPCS_PER_LEADER:
            fetches, link.fetches = link.fetches, {}
            for key in fetches:
                link.awaiting[key] = now
            link.in_flight += 1
            return fetches
        if link.in_flight == 0 and (link.awaiting or self._still_held(link)):
            link.in_flight += 1  # the return path for answers (and the link's pulse)
            return {}
        return None

    def _still_held(self, link: _Link) -> bool:
        """Whether any replica here still waits on a fetch this leader broker holds. Every
        AWAIT_ANSWER_S it forgets keys whose replica stopped waiting (closed, moved on,
        another role) without saying so: until then they cost only this long poll."""
        now = trio.current_time()
        if link.held and now - link.held_checked_at > AWAIT_ANSWER_S:
            link.held_checked_at = now
            for key in [k for k in link.held if not self._quiescent_on(k, link.broker_id)]:
                link.held.discard(key)
        return bool(link.held)

    def _quiescent_on(self, key: tuple[str, int], broker_id: int) -> bool:
        replica = self.lookup(*key)
        return replica is not None and replica.quiescent_on(broker_id)

    async def _fetch_call(self, link: _Link, fetches: dict[tuple[str, int], FetchRequest]) -> None:
        failed = False
        try:
            address = self.peer_address(link.broker_id)
            if address is None:
                failed = True
                return
            fields = {
                "broker_id": self.node_id,
                "max_wait_ms": self.session_max_wait_ms,
                "max_bytes": self.session_max_bytes,
                "attach": True,
                "fetches": [encode_fetch_request(t, p, m) for (t, p), m in fetches.items()],
            }
            try:
                result, attachment = await self.peers.call_attached(
                    address, "replica_fetch", fields,
                    timeout_s=self.session_max_wait_ms / 1000 + RAFT_CALL_TIMEOUT_S,
                )  # fmt: skip
            except RaftlogError as exc:
                failed = True
                link.failures += 1
                if link.failures == 1 or not isinstance(exc, PeerUnavailableError):
                    log_event(logger, "replica_fetch_failed", level=logging.DEBUG,
                              broker_id=link.broker_id, reason=str(exc))
                if isinstance(exc, PeerUnavailableError) and exc.details.get("refused") \
                        and self.on_unreachable is not None:
                    await self.on_unreachable(link.broker_id)  # its followers need not wait a timeout
                if link.held and self.on_broken is not None:
                    await self.on_broken(link.broker_id)  # held fetches may have died with it
                return
            link.failures = 0
            link.last_ok = link.heard_at = trio.current_time()
            link.leader_silent = False
            decoded = self._decode_answer(result, attachment, link.broker_id)
            if decoded is None:
                failed = True
                self.peers.close_connection(address, "bad replica_fetch answer")
                return
            for topic, partition, m in decoded:
                if type(m) is FetchHeld:
                    link.held.add((topic, partition))
                else:
                    link.held.discard((topic, partition))
                sent = link.awaiting.get((topic, partition))
                if sent is not None:
                    del link.awaiting[(topic, partition)]
                if m is None:
                    continue
                replica = self.lookup(topic, partition)
                if replica is not None:
                    charge_learning(self.throttle, replica, m)
                    await replica.deliver(m)
        finally:
            if failed:
                await trio.sleep(FAILURE_BACKOFF_S)
            link.in_flight -= 1

    @staticmethod
    def _decode_answer(result: Mapping[str, Any], attachment: memoryview, broker_id: int
                       ) -> list[tuple[str, int, FetchResponse | FetchHeld | None]] | None:
        """Every response of a `replica_fetch` answer, decoded before any is used; None
        (logged) when any of them does not decode: then none is used."""
        view = attachment if attachment else None
        decoded: list[tuple[str, int, FetchResponse | FetchHeld | None]] = []
        try:
            responses = field(result, "responses", list, items=dict)
            for i, d in enumerate(responses):
                if d.get("held") is True:
                    decoded.append(decode_fetch_held(d, broker_id, f"responses[{i}]"))
                else:
                    decoded.append(decode_fetch_response(d, broker_id, f"responses[{i}]", view))
        except InvalidRequestError as exc:
            log_event(logger, "replica_fetch_bad_response", level=logging.WARNING,
                      broker_id=broker_id, reason=exc.message)
            return None
        return decoded

    async def _raft_sender(self, link: _Link) -> None:
        try:
            while link.messages:
                batch = []
                while link.messages and len(batch) < MAX_MESSAGES_PER_CALL:
                    batch.append(link.messages.popleft())
                address = self.peer_address(link.broker_id)
                if address is None:
                    self.dropped_messages += len(batch)
                    continue
                fields = {"broker_id": self.node_id,
                          "messages": [encode_message(t, p, m) for t, p, m in batch]}
                try:
                    await self.peers.call(address, "raft", fields, timeout_s=RAFT_CALL_TIMEOUT_S)
                except RaftlogError as exc:
                    self.dropped_messages += len(batch)
                    log_event(logger, "raft_send_failed", level=logging.DEBUG,
                              broker_id=link.broker_id, reason=str(exc))
                    await trio.sleep(FAILURE_BACKOFF_S)
        finally:
            link.raft_sending = False
            if link.messages:
                self._kick(link)  # queued while this one was finishing

    # ---------------------------------------------------------------- leader side

    @inline_handler
    async def _handle_replica_fetch(self, request: Request) -> Attached | Later:
        """Run in the listener's reader (protocol.inline_handler): the fetches go to their
        cores at once, and an outbox with answers is answered at once; the long poll (an
        empty outbox) and a follower that takes no attachment (its file slices are read in
        a worker thread) are answered from a request task (`Later`). A core that waits for
        the disk (a cold read for a follower catching up, a quorum-state fsync) holds up the
        follower broker's other requests on this connection: past INLINE_BUDGET_S the rest
        of the fetches go to the cores from the request task too."""
        started = trio.current_time()
        sender = field(request, "broker_id", int)
        max_wait_ms = field(request, "max_wait_ms", int, min_value=0, max_value=MAX_WAIT_MS_LIMIT)
        max_bytes = field(request, "max_bytes", int, min_value=1)
        attach = field(request, "attach", bool, default=False)
        fetches = field(request, "fetches", list, items=dict)
        decoded = [decode_fetch_request(d, sender, f"fetches[{i}]") for i, d in enumerate(fetches)]
        link = self._link(sender)
        link.last_request_at = link.heard_at = trio.current_time()
        if link.follower_silent:
            link.follower_silent = False
            link.follower_heard = True
            if self.on_news is not None:
                self.on_news()
        for i, (topic, partition, m) in enumerate(decoded):
            if trio.current_time() - started > INLINE_BUDGET_S:
                return Later(partial(self._wait_and_answer, link, max_wait_ms, max_bytes, attach,
                                     decoded[i:]))
            replica = self.lookup(topic, partition)
            if replica is not None and not hold_learner_fetch(self._nursery, self.leader_throttle, replica, sender, m):
                await replica.deliver(m)
        if attach and (link.outbox or max_wait_ms == 0):
            return self._answer(link, max_bytes)
        return Later(partial(self._wait_and_answer, link, max_wait_ms, max_bytes, attach))

    async def _wait_and_answer(self, link: _Link, max_wait_ms: int, max_bytes: int,
                               attach: bool, undelivered: list[tuple[str, int, Any]] = ()
                               ) -> dict[str, Any] | Attached:
        """The rest of a `replica_fetch` in its request task: deliver what the reader left
        undelivered, wait up to `max_wait_ms` for an answer in the follower broker's outbox
        (the long poll), then answer with what is there (an empty list after the wait)."""
        for topic, partition, m in undelivered:
            replica = self.lookup(topic, partition)
            if replica is not None and not hold_learner_fetch(self._nursery, self.leader_throttle, replica,
                                                              link.broker_id, m):
                await replica.deliver(m)
        with trio.move_on_after(max_wait_ms / 1000):
            while not link.outbox:
                if link.outbox_event.is_set():
                    link.outbox_event = trio.Event()
                await link.outbox_event.wait()
        if not attach:
            taken, held = _take(link, max_bytes)
            self._charge(link, taken)
            return {"responses": held + await _inline(taken)}
        return self._answer(link, max_bytes)

    def _charge(self, link: _Link, taken: list[tuple[tuple[str, int], FetchResponse]]) -> None:
        """The leader-side throttle counts the records leaving for learners."""
        if self.leader_throttle is None or not self.leader_throttle.rate_bytes_per_s:
            return
        for (topic, partition), m in taken:
            replica = self.lookup(topic, partition)
            if replica is not None:
                charge_learner_answer(self.leader_throttle, replica, link.broker_id, m)

    def _answer(self, link: _Link, max_bytes: int) -> Attached:
        """The answers queued for the link's follower broker (at least one if any, then more
        while under `max_bytes`), their records as the attachment."""
        taken, out = _take(link, max_bytes)
        self._charge(link, taken)
        parts = []
        at = 0
        for (topic, partition), m in taken:
            if m.records is not None and len(m.records):
                out.append(encode_fetch_response(topic, partition, m, records_at=at))
                parts.append(m.records)
                at += len(m.records)
            else:
                out.append(encode_fetch_response(topic, partition, m))
        return Attached({"responses": out}, parts)

    async def _handle_raft(self, request: Request) -> dict[str, Any]:
        sender = field(request, "broker_id", int)
        messages = field(request, "messages", list, items=dict)
        if len(messages) > MAX_MESSAGES_PER_CALL:
            raise InvalidRequestError(f"more than {MAX_MESSAGES_PER_CALL} messages", field="messages")
        decoded = [decode_message(d, sender, f"messages[{i}]") for i, d in enumerate(messages)]
        self._link(sender).heard_at = trio.current_time()  # its process runs and reaches us
        for topic, partition, m in decoded:
            replica = self.lookup(topic, partition)
            if replica is not None:
                # Not in line: a vote waits for its fsync, and one batch carries hundreds.
                replica.deliver_soon(m)
        return {}
