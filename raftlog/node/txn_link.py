"""The links between the transaction coordinator and the partitions (issue 42), in both
directions, across nodes (a NodeService with peer ops only):

* markers (coordinator -> partition leaders; Kafka's WriteTxnMarkers): `write_markers` is the
  coordinator's `write_markers` (groupcoord/txn_service.py). Each partition of the prepared
  transaction gets its COMMIT/ABORT marker on its leader: through the local partition port
  when the image names this node, else with the peer op `write_txn_markers` to the leader's
  peer listener. It returns once every partition acknowledged (the marker committed there);
  otherwise it raises and the coordinator calls it again later (MARKER_RETRY_S): partitions
  already marked for that transaction are not marked again. "That transaction" is the key
  (transactional id, producer id, epoch, outcome, coordinator epoch, partitions): a
  Transactions V1 producer commits many transactions with one producer id and epoch, and a
  marker task that failed part-way under one load of the coordinator's partition (its
  transaction then finished by another node) must not count a partition as marked for a later
  transaction (the fault suite lost a committed write that way: no COMMIT marker was written
  and the producer's next ABORT marker took its records). A partition that no longer exists
  is done (Kafka drops markers for deleted partitions); one without a leader is retried.
* verification (partition leader -> coordinator; KIP-890 part 1): `verify_txn` is the
  partition port's `txn_verifier`: before the first transactional batch of a producer in a
  partition, the transactional id's coordinator is asked (AddPartitionsToTxn with
  verify_only, locally or with the peer op `verify_txn`) whether that partition is in the
  ongoing transaction of that producer id and epoch; its error is the produce's, PRODUCER_FENCED
  answered INVALID_PRODUCER_EPOCH as Kafka's broker does. Transactions V2 (KIP-890 part 2,
  Produce v12+): the same call without verify_only adds the partition to the transaction
  (starting one if none is ongoing); CONCURRENT_TRANSACTIONS (another add, or the previous
  transaction's markers, being written) is retried with backoff for IMPLICIT_ADD_RETRY_S.
  The answer vouches for the producer's last marker in the partition as it was when the
  question that got it was sent (Kafka's verification guard, taken again by each retry): a
  marker landing while the add waits out the previous transaction's markers is that
  transaction's. A marker landing while the answered question was in flight is this
  transaction's end at Transactions V1 (one epoch for every transaction: the guard refuses the
  batch); at V2 it may be the previous transaction's (sent just before its marker, answered
  after it), so the add is asked once more from there: the batch's epoch names its transaction,
  and the coordinator says whether that one is still ongoing.

Limits: peer calls under PEER_TIMEOUT_S; at most MAX_TRACKED transactions' progress kept
(more: the progress of the oldest is forgotten and its markers are written again, harmlessly:
a second marker for a closed transaction changes nothing in the log's state).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

import trio

from groupcoord.txn_coordinator import Markers
from groupcoord.txn_port import AddPartitionsToTxn, TxnPartitionsAdded
from metadata.image import MetadataImage
from partition.port import TxnMarker
from raftlog.base.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    NotLeaderError,
    PeerUnavailableError,
    ProducerFencedError,
    RaftlogError,
    UnknownTopicOrPartitionError,
    as_wire_error,
    error_from_wire,
)
from raftlog.base.eventlog import log_event
from raftlog.base.protocol import Request, field
from raftlog.base.topics import TRANSACTION_STATE_TOPIC, partition_for_transactional_id
from raftlog.node.native_txn import add_partitions_answer, add_partitions_request

__all__ = ["TxnLink"]

logger = logging.getLogger(__name__)

PEER_TIMEOUT_S: Final = 10.0
MARKER_TIMEOUT_S: Final = 10.0
MAX_TRACKED: Final = 10_000
MAX_MARKER_PARTITIONS: Final = 10_000
IMPLICIT_ADD_RETRY_S: Final = 5.0       # an implicit add retries CONCURRENT_TRANSACTIONS this long
IMPLICIT_ADD_BACKOFF_S: Final = 0.005
IMPLICIT_ADD_MAX_BACKOFF_S: Final = 0.2

Handler = Callable[[Request], Awaitable[Mapping[str, Any] | None]]


# Verification errors a Produce answers as NOT_ENOUGH_REPLICAS (retried without a metadata
# refresh), as Kafka's ReplicaManager translates them.
_UNVERIFIED: Final = (ConcurrentTransactionsError, CoordinatorLoadInProgressError, CoordinatorNotAvailableError,
                      NotCoordinatorError, PeerUnavailableError)


def _unverified(exc: RaftlogError) -> NotEnoughReplicasError:
    return NotEnoughReplicasError(
        f"Unable to verify the partition has been added to the transaction. Underlying error: {exc.code}")


class _Metadata(Protocol):
    @property
    def image(self) -> MetadataImage: ...

    def peer_address(self, broker_id: int) -> str | None: ...


class _Peers(Protocol):
    async def call(self, address: str, op: str, fields: Mapping[str, Any], timeout_s: float) -> dict[str, Any]: ...


class _MarkerPort(Protocol):
    async def write_txn_marker(self, marker: TxnMarker, deadline: float) -> None: ...


class _TxnAdder(Protocol):
    """What the link calls of the transaction port (groupcoord/txn_port.py), unguarded."""

    async def add_partitions_to_txn(self, request: AddPartitionsToTxn) -> TxnPartitionsAdded: ...


class TxnLink:
    """See the module docstring."""

    name = "txn_link"

    def __init__(self, node_id: int, metadata: _Metadata, peers: _Peers, port: _MarkerPort,
                 txn: _TxnAdder, txn_partitions: int) -> None:
        self.node_id = node_id
        self.metadata = metadata
        self.peers = peers
        self.port = port
        self._txn = txn
        self._txn_partitions = txn_partitions
        self._done: OrderedDict[tuple[Any, ...], set[tuple[str, int]]] = OrderedDict()
        self.client_handlers: Mapping[str, Handler] = {}
        self.peer_handlers: Mapping[str, Handler] = {
            "write_txn_markers": self._peer_write_markers,
            "verify_txn": self._peer_verify,
        }

    # ------------------------------------------------------------------ NodeService

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()

    def on_image(self, image: MetadataImage) -> None:
        """Nothing to keep: every call reads the image it needs."""

    def health(self) -> dict[str, Any]:
        return {"ok": True, "markers_in_progress": len(self._done)}

    async def drain(self) -> None:
        """Nothing to hand over."""

    # ------------------------------------------------------------------ markers

    async def write_markers(self, markers: Markers) -> None:
        """Every partition of `markers` marked and committed, or raises the first failure
        (the coordinator retries; module docstring)."""
        key = (markers.transactional_id, markers.producer_id, markers.producer_epoch, markers.commit,
               markers.coordinator_epoch, markers.partitions)
        done = self._done.setdefault(key, set())
        self._done.move_to_end(key)
        while len(self._done) > MAX_TRACKED:
            self._done.popitem(last=False)
        image = self.metadata.image
        by_leader: dict[int, list[tuple[str, int]]] = {}
        failures: list[RaftlogError] = []
        for topic, partition in sorted(markers.partitions - done):
            state = image.partition(topic, partition)
            if state is None:
                done.add((topic, partition))  # deleted: nothing to mark (Kafka drops it too)
                continue
            if state.leader < 0:
                failures.append(NotLeaderError(f"{topic}-{partition} has no leader now"))
                continue
            by_leader.setdefault(state.leader, []).append((topic, partition))

        async def one_leader(leader: int, parts: list[tuple[str, int]]) -> None:
            try:
                if leader == self.node_id:
                    failed = await self._mark_local(markers, parts)
                else:
                    failed = await self._mark_remote(leader, markers, parts)
            except RaftlogError as exc:
                failures.append(exc)
                return
            for part in parts:
                if part in failed:
                    failures.append(failed[part])
                else:
                    done.add(part)

        async with trio.open_nursery() as nursery:
            for leader, parts in by_leader.items():
                nursery.start_soon(one_leader, leader, parts)
        if failures:
            raise failures[0]
        self._done.pop(key, None)

    async def _mark_local(self, markers: Markers, parts: list[tuple[str, int]]) -> dict[tuple[str, int], RaftlogError]:
        failed: dict[tuple[str, int], RaftlogError] = {}
        deadline = trio.current_time() + MARKER_TIMEOUT_S

        async def one(topic: str, partition: int) -> None:
            try:
                await self.port.write_txn_marker(TxnMarker(topic, partition, markers.producer_id,
                                                           markers.producer_epoch, markers.commit,
                                                           markers.coordinator_epoch), deadline)
            except UnknownTopicOrPartitionError:
                return  # deleted meanwhile: done
            except RaftlogError as exc:
                failed[(topic, partition)] = exc

        async with trio.open_nursery() as nursery:
            for topic, partition in parts:
                nursery.start_soon(one, topic, partition)
        return failed

    async def _mark_remote(self, leader: int, markers: Markers,
                           parts: list[tuple[str, int]]) -> dict[tuple[str, int], RaftlogError]:
        address = self.metadata.peer_address(leader)
        if address is None:
            raise CoordinatorNotAvailableError(f"no address for broker {leader}")
        answer = await self.peers.call(address, "write_txn_markers", {
            "producer_id": markers.producer_id, "producer_epoch": markers.producer_epoch,
            "commit": markers.commit, "coordinator_epoch": markers.coordinator_epoch,
            "partitions": [{"topic": t, "partition": p} for t, p in parts],
        }, timeout_s=PEER_TIMEOUT_S)
        failed = {}
        for r in answer.get("results") or ():
            if r.get("error"):
                failed[(r["topic"], r["partition"])] = error_from_wire(r["error"])
        return failed

    async def _peer_write_markers(self, request: Request) -> dict[str, Any]:
        raw = field(request, "partitions", list, items=dict)
        if len(raw) > MAX_MARKER_PARTITIONS:
            raise UnknownTopicOrPartitionError(f"at most {MAX_MARKER_PARTITIONS} partitions a call")
        markers = Markers("", field(request, "producer_id", int), field(request, "producer_epoch", int),
                          field(request, "commit", bool), frozenset(),
                          field(request, "coordinator_epoch", int, default=0, min_value=0))
        parts = [(field(d, "topic", str), field(d, "partition", int, min_value=0)) for d in raw]
        failed = await self._mark_local(markers, parts)
        results = []
        for t, p in parts:
            exc = failed.get((t, p))
            wire = None if exc is None else as_wire_error(exc)
            results.append({"topic": t, "partition": p, "error": None if wire is None else wire.to_wire()})
        return {"results": results}

    # ------------------------------------------------------------------ verification

    async def verify_txn(self, transactional_id: str, topic: str, partition: int,
                         producer_id: int, producer_epoch: int, marker_offset: Callable[[], int] | None = None,
                         *, add: bool = False) -> int:
        """KIP-890 part 1, or with `add` part 2 (module docstring). Returns what
        `marker_offset()` (the producer's last marker offset in the partition; none: -1) was
        when the question the answer holds for was sent. Raises the coordinator's
        error; one that only says "not now" (a step in flight, no coordinator reachable) as
        NOT_ENOUGH_REPLICAS, as Kafka's ReplicaManager does: clients without transactions v2
        retry a Produce on that but fail the transaction on CONCURRENT_TRANSACTIONS (librdkafka's
        0103_transactions); PRODUCER_FENCED as INVALID_PRODUCER_EPOCH, which a fenced producer's
        Produce expects (Kafka's AddPartitionsToTxnManager; librdkafka then raises its fatal
        fenced error)."""
        request = AddPartitionsToTxn(transactional_id, producer_id, producer_epoch, [(topic, partition)],
                                     verify_only=not add)
        deadline = trio.current_time() + IMPLICIT_ADD_RETRY_S
        backoff_s = IMPLICIT_ADD_BACKOFF_S
        mark = marker_offset or (lambda: -1)
        asked_again = False
        while True:
            try:
                verified_at = mark()
                await self._verify(request)
                if not add or asked_again or mark() == verified_at:
                    return verified_at
                asked_again = True  # a marker landed meanwhile (module docstring): ask from here
                continue
            except ProducerFencedError as exc:
                raise InvalidProducerEpochError(str(exc)) from None
            except ConcurrentTransactionsError as exc:
                # Another partition's add (or the previous transaction's markers) is being
                # written: the implicit add waits for it, briefly, rather than failing the produce.
                if not add or trio.current_time() + backoff_s > deadline:
                    raise _unverified(exc) from exc
            except _UNVERIFIED as exc:
                raise _unverified(exc) from exc
            await trio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, IMPLICIT_ADD_MAX_BACKOFF_S)

    async def _verify(self, request: AddPartitionsToTxn) -> None:
        p = partition_for_transactional_id(request.transactional_id, self._txn_partitions)
        state = self.metadata.image.partition(TRANSACTION_STATE_TOPIC, p)
        if state is None or state.leader < 0:
            raise CoordinatorNotAvailableError(f"{TRANSACTION_STATE_TOPIC}-{p} has no leader now")
        if state.leader == self.node_id:
            answer = add_partitions_answer(await self._txn.add_partitions_to_txn(request))
        else:
            address = self.metadata.peer_address(state.leader)
            if address is None:
                raise CoordinatorNotAvailableError(f"no address for broker {state.leader}")
            fields = {"transactional_id": request.transactional_id, "producer_id": request.producer_id,
                      "producer_epoch": request.producer_epoch, "verify_only": request.verify_only,
                      "partitions": [{"topic": t, "partition": n} for t, n in request.partitions]}
            answer = await self.peers.call(address, "verify_txn", fields, timeout_s=PEER_TIMEOUT_S)
        if answer and answer.get("unknown"):
            topic, partition = request.partitions[0]
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} is unknown to the coordinator")

    async def _peer_verify(self, request: Request) -> Mapping[str, Any] | None:
        try:
            return add_partitions_answer(await self._txn.add_partitions_to_txn(add_partitions_request(request)))
        except RaftlogError as exc:
            log_event(logger, "txn_verify_refused", level=logging.DEBUG, reason=str(exc))
            raise
