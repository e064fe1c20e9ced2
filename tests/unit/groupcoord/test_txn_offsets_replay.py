"""TxnOffsetCommit's offsets are a transactional batch in `__consumer_offsets`: the group coordinator holds them until the marker, and a replay of the log (a failover) rebuilds the same pending and committed offsets."""

import random

from groupcoord.coordinator import CommitOffset, CoordinatorConfig, GroupCoordinator
from groupcoord.records import OffsetKey, OffsetValue, offset_record
from partition.batch import BatchBuilder, txn_marker_batch
from partition.keyed import logged_records
from raftlog.base.topics import partition_for_group

G = "txn-app"
P = partition_for_group(G)
PID, EPOCH = 4000, 3


def rec(offset, topic, partition, value, pid=-1):
    return (offset, *offset_record(OffsetKey(G, topic, partition), OffsetValue(value, "", 1)), pid, None)


def marker(offset, pid, commit):
    return (offset, b"", None, pid, commit)


def loaded(records):
    c = GroupCoordinator(CoordinatorConfig(), random.Random(1))
    c.begin_load(P)
    c.load(P, records)
    counts = c.finish_load(P, 0).response
    return c, counts


def fetch_all(c):
    return {(e["topic"], e["partition"]): e["offset"] for e in c.offset_fetch(group_id=G).response["partitions"]
            if e["offset"] >= 0}


def test_replay_applies_committed_drops_aborted_and_keeps_open_ones_pending():
    log = [
        rec(0, "t", 0, 10),
        rec(1, "t", 0, 20, pid=7),          # committed below
        rec(2, "t", 1, 5, pid=8),           # aborted below
        marker(3, 7, True),
        marker(4, 8, False),
        rec(5, "t", 2, 99, pid=9),          # its marker is not in the log yet
    ]
    c, counts = loaded(log)
    assert fetch_all(c) == {("t", 0): 20}
    assert counts["txn_offsets"] == 1
    assert c.pending_txn_partitions(G) == {("t", 2)}
    # The marker that was still to come (written after the failover) applies them.
    c.complete_txn(P, 9, True, 1)
    assert fetch_all(c) == {("t", 0): 20, ("t", 2): 99}
    assert c.pending_txn_partitions(G) == set()


def test_a_later_plain_commit_wins_over_an_earlier_transactional_one():
    log = [rec(0, "t", 0, 20, pid=7), rec(1, "t", 0, 30), marker(2, 7, True)]
    c, _ = loaded(log)
    assert fetch_all(c) == {("t", 0): 30}


def test_commit_appends_a_transactional_batch_held_until_the_marker():
    c = GroupCoordinator(CoordinatorConfig(), random.Random(1))
    c.begin_load(P)
    c.finish_load(P, 0)
    r = c.txn_offset_commit(group_id=G, offsets=[CommitOffset("t", 0, 42)], now_ms=5,
                            producer_id=PID, producer_epoch=EPOCH)
    (append,) = r.appends
    assert (append.producer_id, append.producer_epoch) == (PID, EPOCH)
    done = c.on_append_committed(append.append_id, 100, 6)
    assert done.completions or done.response is None
    assert fetch_all(c) == {} and c.pending_txn_partitions(G) == {("t", 0)}
    c.complete_txn(P, PID, False, 7)  # an abort drops them
    assert fetch_all(c) == {} and c.pending_txn_partitions(G) == set()
    r = c.txn_offset_commit(group_id=G, offsets=[CommitOffset("t", 0, 43)], now_ms=8,
                            producer_id=PID, producer_epoch=EPOCH + 1)
    c.on_append_committed(r.appends[0].append_id, 102, 9)
    c.complete_txn(P, PID, True, 10)
    assert fetch_all(c) == {("t", 0): 43}


def test_a_marker_while_the_partition_loads_is_left_to_the_replay():
    c = GroupCoordinator(CoordinatorConfig(), random.Random(1))
    c.begin_load(P)
    c.load(P, [rec(0, "t", 0, 20, pid=7)])
    c.complete_txn(P, 7, True, 1)  # ignored: the replay reads the marker from the log
    c.load(P, [marker(1, 7, True)])
    c.finish_load(P, 2)
    assert fetch_all(c) == {("t", 0): 20}


def test_unload_forgets_the_pending_offsets_of_the_partition():
    c, _ = loaded([rec(0, "t", 0, 20, pid=7)])
    assert c.pending_txn_partitions(G) == {("t", 0)}
    c.unload(P)
    assert c.pending_txn_partitions(G) == set() and c.txn_offset_producers() == 0


def test_logged_records_keep_producer_ids_and_markers_from_real_batches():
    key, value = offset_record(OffsetKey(G, "t", 0), OffsetValue(7, "", 1))
    plain = BatchBuilder(base_offset=0)
    plain.append(value, key, timestamp_ms=1)
    txn = BatchBuilder(producer_id=PID, producer_epoch=EPOCH, is_transactional=True, base_offset=1)
    txn.append(value, key, timestamp_ms=1)
    data = bytearray(plain.build()) + bytearray(txn.build())
    mark = bytearray(txn_marker_batch(PID, EPOCH, commit=True, coordinator_epoch=2, timestamp_ms=1))
    mark[0:8] = (2).to_bytes(8, "big")  # base offset 2 (the log stamps it)
    data += mark
    records, end = logged_records(bytes(data), 0)
    assert end == 3
    assert [(r[0], r[3], r[4]) for r in records] == [(0, -1, None), (1, PID, None), (2, PID, True)]
    assert records[1][1:3] == (key, value)
    # from an offset past the first two: only the marker
    assert [(r[0], r[4]) for r in logged_records(bytes(data), 2)[0]] == [(2, True)]
