"""The transaction coordinator's pure core follows Kafka's state machine: epoch bumps and zombie
fencing, Kafka's error for each misuse, timeouts, and replay that resends a prepared
transaction's markers (so a failover never tears it)."""

from __future__ import annotations

import pytest

from groupcoord.errors import InvalidGroupRecordError
from groupcoord.txn_coordinator import NEED_PRODUCER_ID, TxnConfig, TxnCoordinator, TxnResult
from groupcoord.txn_records import (
    TxnMetadata,
    TxnState,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
    txn_record,
)
from raftlog.base.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    NotCoordinatorError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
)
from raftlog.base.topics import OFFSETS_TOPIC, partition_for_group

pytestmark = pytest.mark.unit

TID = "app-1"


class Harness:
    """A core whose writes commit at once and whose markers are written at once, recording
    the log of `__transaction_state` and the markers sent."""

    def __init__(self, partitions: int = 4, *, auto_markers: bool = True):
        self.core = TxnCoordinator(TxnConfig(partitions=partitions))
        for p in range(partitions):
            self.core.begin_load(p)
            self.core.finish_load(p, 0)
        self.log: list[tuple[int, bytes, bytes | None]] = []
        self.markers: list = []
        self.auto_markers = auto_markers
        self.next_pid = 1000

    def run(self, result: TxnResult, now_ms: int = 0):
        if result.response == NEED_PRODUCER_ID:
            raise AssertionError("caller must pass a producer id")
        while result.write is not None:
            key, value = txn_record(result.write.metadata)
            self.log.append((len(self.log), key, value))
            result = self.core.on_written(result.write, now_ms)
            if result.markers is not None:
                self.markers.append(result.markers)
                if self.auto_markers:
                    reply = result.response
                    follow = self.core.on_markers_written(result.markers.transactional_id, now_ms)
                    assert follow.write is not None and follow.write.metadata.state.completed
                    self.run(follow, now_ms)
                    if isinstance(reply, Exception):
                        raise reply
                    return reply
        if isinstance(result.response, Exception):
            raise result.response
        return result.response

    def init(self, tid: str = TID, pid: int = -1, epoch: int = -1, timeout_ms: int = 60_000, now_ms: int = 0):
        r = self.core.init_producer_id(tid, timeout_ms, pid, epoch, now_ms)
        if r.response == NEED_PRODUCER_ID:
            self.next_pid += 1
            r = self.core.init_producer_id(tid, timeout_ms, pid, epoch, now_ms, new_producer_id=self.next_pid)
        return self.run(r, now_ms)


def test_init_then_commit_and_abort():
    h = Harness()
    got = h.init()
    assert got == {"producer_id": 1001, "producer_epoch": 0}
    assert h.run(h.core.add_partitions(TID, 1001, 0, [("t", 0), ("u", 1)], 5)) == {}
    assert h.core.txns[TID].state is TxnState.ONGOING and h.core.txns[TID].start_ms == 5
    assert h.run(h.core.add_offsets(TID, 1001, 0, "g", 6)) == {}
    assert (OFFSETS_TOPIC, partition_for_group("g")) in h.core.txns[TID].partitions
    assert h.run(h.core.end_txn(TID, 1001, 0, True, 7)) == {}
    assert h.markers[-1].commit and len(h.markers[-1].partitions) == 3
    assert h.core.txns[TID].state is TxnState.COMPLETE_COMMIT and not h.core.txns[TID].partitions
    assert h.run(h.core.end_txn(TID, 1001, 0, True, 8)) == {}  # a retried commit is answered again
    with pytest.raises(InvalidTxnStateError):
        h.run(h.core.end_txn(TID, 1001, 0, False, 8))
    h.run(h.core.add_partitions(TID, 1001, 0, [("t", 0)], 9))
    h.run(h.core.end_txn(TID, 1001, 0, False, 10))
    assert not h.markers[-1].commit and h.core.txns[TID].state is TxnState.COMPLETE_ABORT


def test_zombie_is_fenced_by_a_new_init():
    h = Harness()
    h.init()
    h.run(h.core.add_partitions(TID, 1001, 0, [("t", 0)], 1))
    # A second producer with the same id: the ongoing transaction is aborted, epoch bumped.
    with pytest.raises(ConcurrentTransactionsError):
        h.init(now_ms=2)
    assert h.markers[-1].commit is False and h.markers[-1].producer_epoch == 1
    assert h.init(now_ms=3) == {"producer_id": 1001, "producer_epoch": 2}
    for call in (lambda: h.core.add_partitions(TID, 1001, 0, [("t", 1)], 4),
                 lambda: h.core.end_txn(TID, 1001, 0, True, 4),
                 lambda: h.core.add_offsets(TID, 1001, 1, "g", 4)):
        with pytest.raises(ProducerFencedError):
            h.run(call())


@pytest.mark.parametrize("call, error", [
    (lambda c: c.end_txn("nobody", 1, 0, True, 0), InvalidProducerIdMappingError),
    (lambda c: c.end_txn(TID, 999, 0, True, 0), InvalidProducerIdMappingError),
    (lambda c: c.add_partitions(TID, 1001, 7, [("t", 0)], 0), ProducerFencedError),
    (lambda c: c.end_txn(TID, 1001, 0, True, 0), InvalidTxnStateError),  # Empty: nothing to commit
    (lambda c: c.init_producer_id(TID, 0, -1, -1, 0), InvalidTransactionTimeoutError),
    (lambda c: c.init_producer_id(TID, 10**9, -1, -1, 0), InvalidTransactionTimeoutError),
    (lambda c: c.init_producer_id(TID, 1000, 55, 3, 0), InvalidProducerIdMappingError),
])
def test_bad_input_gets_kafkas_error_and_changes_nothing(call, error):
    h = Harness()
    h.init()
    before = dict(h.core.txns)
    log_len = len(h.log)
    with pytest.raises(error):
        h.run(call(h.core))
    assert h.core.txns == before and len(h.log) == log_len


def test_a_step_in_flight_answers_concurrent_transactions():
    h = Harness()
    h.init()
    pending = h.core.add_partitions(TID, 1001, 0, [("t", 0)], 1)
    assert pending.write is not None and h.core.txns[TID].state is TxnState.EMPTY  # not before commit
    with pytest.raises(ConcurrentTransactionsError):
        h.run(h.core.end_txn(TID, 1001, 0, True, 1))
    h.run(pending)
    assert h.core.txns[TID].state is TxnState.ONGOING


def test_failed_write_changes_nothing():
    h = Harness()
    h.init()
    r = h.core.add_partitions(TID, 1001, 0, [("t", 0)], 1)
    out = h.core.on_write_failed(r.write, NotCoordinatorError("moved"))
    assert isinstance(out.response, NotCoordinatorError)
    assert h.core.txns[TID].state is TxnState.EMPTY
    h.run(h.core.add_partitions(TID, 1001, 0, [("t", 0)], 2))  # and the id is not stuck busy


def test_timeout_aborts_and_fences():
    h = Harness()
    h.init(timeout_ms=1000)
    h.run(h.core.add_partitions(TID, 1001, 0, [("t", 0)], 100))
    assert h.core.next_deadline_ms() == 1100
    assert h.core.tick(1099) == []
    [r] = h.core.tick(1100)
    h.run(r, 1100)
    assert h.core.txns[TID].state is TxnState.COMPLETE_ABORT and h.core.txns[TID].producer_epoch == 1
    assert h.markers[-1].commit is False and h.markers[-1].partitions == frozenset({("t", 0)})
    with pytest.raises(ProducerFencedError):
        h.run(h.core.end_txn(TID, 1001, 0, True, 1200))
    assert h.core.next_deadline_ms() is None


def test_kip360_retry_with_the_previous_epoch_is_not_a_zombie():
    h = Harness()
    h.init()
    assert h.init(pid=1001, epoch=0) == {"producer_id": 1001, "producer_epoch": 1}
    assert h.init(pid=1001, epoch=0) == {"producer_id": 1001, "producer_epoch": 1}  # retry, same answer
    assert h.init(pid=1001, epoch=1) == {"producer_id": 1001, "producer_epoch": 2}
    with pytest.raises(ProducerFencedError):  # epoch 0 is now neither the current nor the last
        h.init(pid=1001, epoch=0)


def test_epoch_exhaustion_takes_a_new_producer_id():
    h = Harness()
    h.init()
    m = h.core.txns[TID]
    h.core.txns[TID] = TxnMetadata(TID, m.producer_id, 32766, m.timeout_ms, TxnState.EMPTY, 0)
    assert h.init() == {"producer_id": 1002, "producer_epoch": 0}
    assert h.core.txns[TID].last_producer_id == 1001


def test_ownership_and_describe_list():
    core = TxnCoordinator(TxnConfig(partitions=1))
    with pytest.raises(NotCoordinatorError):
        core.describe(TID)
    core.begin_load(0)
    assert isinstance(core.end_txn(TID, 1, 0, True, 0).response, CoordinatorLoadInProgressError)
    core.finish_load(0, 0)
    with pytest.raises(TransactionalIdNotFoundError):
        core.describe(TID)
    h = Harness(partitions=1)
    h.init()
    h.run(h.core.add_partitions(TID, 1001, 0, [("t", 2)], 10))
    d = h.core.describe(TID)
    assert d["state"] == "Ongoing" and d["partitions"] == [("t", 2)] and d["start_ms"] == 10
    assert [t["transactional_id"] for t in h.core.list(states=["Ongoing"])] == [TID]
    assert h.core.list(states=["Empty"]) == []
    assert h.core.list(min_duration_ms=100, now_ms=50) == []
    assert len(h.core.list(min_duration_ms=10, now_ms=50)) == 1


def test_replay_resends_markers_of_a_prepared_transaction():
    h = Harness(partitions=1, auto_markers=False)
    h.init()
    h.run(h.core.add_partitions(TID, 1001, 0, [("t", 0), ("t", 1)], 1))
    h.run(h.core.end_txn(TID, 1001, 0, True, 2))
    assert h.core.txns[TID].state is TxnState.PREPARE_COMMIT
    # The coordinator dies before the markers are written; a new one replays the log.
    fresh = TxnCoordinator(TxnConfig(partitions=1))
    fresh.begin_load(0)
    assert fresh.load(0, h.log) == len(h.log)
    assert fresh.load(0, h.log) == 0  # a chunk fed twice is ignored
    [markers] = fresh.finish_load(0, 3)
    assert markers.commit and markers.partitions == frozenset({("t", 0), ("t", 1)})
    r = fresh.on_markers_written(TID, 4)
    assert r.write is not None and r.write.metadata.state is TxnState.COMPLETE_COMMIT


def test_replay_skips_bad_records():
    h = Harness(partitions=1)
    h.init()
    core = TxnCoordinator(TxnConfig(partitions=1))
    core.begin_load(0)
    assert core.load(0, [(0, b"\x01", b"x"), *[(i + 1, k, v) for i, k, v in h.log]]) == len(h.log)
    core.finish_load(0, 0)
    assert core.txns[TID].producer_id == 1001


def test_records_round_trip_and_strict_decode():
    m = TxnMetadata(TID, 7, 3, 60_000, TxnState.ONGOING, 12, frozenset({("t", 1), ("a", 0)}), 7, 2, 11)
    assert decode_txn_key(encode_txn_key(TID)) == TID
    assert decode_txn_value(TID, encode_txn_value(m)) == m
    assert decode_txn_value(TID, None) is None
    with pytest.raises(InvalidGroupRecordError):
        decode_txn_value(TID, encode_txn_value(m) + b"\x00")
    with pytest.raises(InvalidGroupRecordError):
        decode_txn_key(b"\x82\x02\x61x")
    with pytest.raises(InvalidGroupRecordError):
        TxnMetadata(TID, 7, 40_000, 60_000, TxnState.EMPTY, 0)


def test_verification_is_not_refused_while_another_step_is_written():
    """A produce's KIP-890 verification of a partition already added answers NONE while the
    producer's AddOffsetsToTxn is being written (aiokafka sends both at once); it was refused
    CONCURRENT_TRANSACTIONS, failing the produce of a transaction that then committed."""
    h = Harness()
    h.init()
    h.run(h.core.add_partitions(TID, 1001, 0, [("t", 0)], 1))
    pending = h.core.add_offsets(TID, 1001, 0, "g", 2)  # written, not yet committed
    assert pending.write is not None
    assert h.run(h.core.add_partitions(TID, 1001, 0, [("t", 0)], 2, verify_only=True)) == {}
    with pytest.raises(InvalidTxnStateError):  # a partition never added is still refused
        h.run(h.core.add_partitions(TID, 1001, 0, [("t", 1)], 2, verify_only=True))
    with pytest.raises(ConcurrentTransactionsError):  # a real add still waits for the write
        h.run(h.core.add_partitions(TID, 1001, 0, [("t", 1)], 2))
    h.run(pending)
    assert (OFFSETS_TOPIC, partition_for_group("g")) in h.core.txns[TID].partitions


# --------------------------------------------------------------------------- Transactions V2 (KIP-890 part 2)


def _end_v2(h: Harness, pid: int, epoch: int, commit: bool, tid: str = TID):
    r = h.core.end_txn_v2(tid, pid, epoch, commit, 0)
    if r.response == NEED_PRODUCER_ID:
        h.next_pid += 1
        r = h.core.end_txn_v2(tid, pid, epoch, commit, 0, new_producer_id=h.next_pid)
    return h.run(r)


def test_v2_end_bumps_the_epoch_and_marks_with_it():
    h = Harness()
    ident = h.init()
    pid, epoch = ident["producer_id"], ident["producer_epoch"]
    h.run(h.core.add_partitions(TID, pid, epoch, [("t", 0), ("t", 1)], 0))
    answer = _end_v2(h, pid, epoch, True)
    assert answer == {"producer_id": pid, "producer_epoch": epoch + 1}
    assert [(m.producer_id, m.producer_epoch, m.commit, m.partitions) for m in h.markers] == [
        (pid, epoch + 1, True, frozenset({("t", 0), ("t", 1)}))]
    assert h.core.txns[TID].state is TxnState.COMPLETE_COMMIT
    # The retry of the same EndTxn (the answer was lost) gets the same answer, nothing new written.
    written = len(h.log)
    assert _end_v2(h, pid, epoch, True) == answer and len(h.log) == written
    # The old epoch may not start another transaction: it is fenced.
    with pytest.raises(ProducerFencedError):
        h.run(h.core.add_partitions(TID, pid, epoch, [("t", 0)], 0))
    # The next transaction runs at the bumped epoch (implicit add on produce: add_partitions).
    h.run(h.core.add_partitions(TID, pid, epoch + 1, [("t", 2)], 0))
    assert _end_v2(h, pid, epoch + 1, False) == {"producer_id": pid, "producer_epoch": epoch + 2}
    assert h.markers[-1].producer_epoch == epoch + 2 and not h.markers[-1].commit
    with pytest.raises(InvalidTxnStateError):  # a retry that asks the other outcome
        _end_v2(h, pid, epoch + 1, True)


def test_v2_retry_while_the_markers_are_written_is_concurrent():
    h = Harness(auto_markers=False)
    ident = h.init()
    pid, epoch = ident["producer_id"], ident["producer_epoch"]
    h.run(h.core.add_partitions(TID, pid, epoch, [("t", 0)], 0))
    assert _end_v2(h, pid, epoch, False) == {"producer_id": pid, "producer_epoch": epoch + 1}
    with pytest.raises(ConcurrentTransactionsError):
        _end_v2(h, pid, epoch, False)
    h.run(h.core.on_markers_written(TID, 0))
    assert _end_v2(h, pid, epoch, False) == {"producer_id": pid, "producer_epoch": epoch + 1}


def test_v2_abort_with_nothing_ongoing_bumps_the_epoch_and_commit_is_refused():
    h = Harness()
    ident = h.init()
    pid, epoch = ident["producer_id"], ident["producer_epoch"]
    with pytest.raises(InvalidTxnStateError):
        _end_v2(h, pid, epoch, True)
    assert _end_v2(h, pid, epoch, False) == {"producer_id": pid, "producer_epoch": epoch + 1}
    assert h.markers[-1].partitions == frozenset()
    assert h.core.txns[TID].state is TxnState.COMPLETE_ABORT
    with pytest.raises(InvalidProducerIdMappingError):
        _end_v2(h, pid + 99, epoch + 1, False)


def test_v2_epoch_exhausted_moves_to_a_new_producer_id_markers_under_the_old():
    h = Harness()
    ident = h.init()
    pid = ident["producer_id"]
    old = h.core.txns[TID]
    h.core.txns[TID] = TxnMetadata(TID, pid, 32766, old.timeout_ms, TxnState.EMPTY, 0)
    h.run(h.core.add_partitions(TID, pid, 32766, [("t", 0)], 0))
    answer = _end_v2(h, pid, 32766, True)
    assert answer["producer_id"] != pid and answer["producer_epoch"] == 0
    assert (h.markers[-1].producer_id, h.markers[-1].producer_epoch) == (pid, 32767)
    assert _end_v2(h, pid, 32766, True) == answer  # the retry
    # The state survives replay (the record carries the marker epoch as the last epoch).
    for _, key, value in h.log[-2:]:
        m = decode_txn_value(decode_txn_key(key), value)
        assert m.last_producer_epoch == 32767
    h.run(h.core.add_partitions(TID, answer["producer_id"], 0, [("t", 0)], 0))
    assert _end_v2(h, answer["producer_id"], 0, True) == {"producer_id": answer["producer_id"], "producer_epoch": 1}
    assert (h.markers[-1].producer_id, h.markers[-1].producer_epoch) == (answer["producer_id"], 1)


def test_v2_zombie_after_fencing_gets_fenced():
    h = Harness()
    first = h.init()
    pid, epoch = first["producer_id"], first["producer_epoch"]
    h.run(h.core.add_partitions(TID, pid, epoch, [("t", 0)], 0))
    with pytest.raises(ConcurrentTransactionsError):  # the new producer aborts the old one's transaction
        h.init(pid=-1, epoch=-1)
    second = h.init()
    assert second["producer_epoch"] == epoch + 2
    with pytest.raises(ProducerFencedError):
        _end_v2(h, pid, epoch, True)
    with pytest.raises(ProducerFencedError):
        h.run(h.core.add_partitions(TID, pid, epoch, [("t", 1)], 0))


def test_busy_partitions_while_loading_and_while_markers_are_in_flight():
    """What a replica move of `__transaction_state` waits for (metadata/reassignment.py
    "Busy coordinators"): a partition being loaded, and one whose transaction has its
    markers in flight; none once they are written."""
    h = Harness(partitions=2, auto_markers=False)
    p = h.core.partition_for(TID)
    h.core.begin_load(1 - p)
    assert {k: type(v) for k, v in h.core.busy_partitions().items()} == {1 - p: CoordinatorLoadInProgressError}
    h.core.finish_load(1 - p, 0)
    assert h.core.busy_partitions() == {}
    h.init()
    h.run(h.core.add_partitions(TID, 1001, 0, [("t", 0)], 1))
    assert h.core.busy_partitions() == {}  # ongoing, nothing in flight
    h.run(h.core.end_txn(TID, 1001, 0, True, 2))
    [(busy_p, reason)] = h.core.busy_partitions().items()
    assert busy_p == p and isinstance(reason, ConcurrentTransactionsError)
    assert repr(TID) in reason.message and "markers" in reason.message
    h.run(h.core.on_markers_written(TID, 3))
    assert h.core.busy_partitions() == {}
