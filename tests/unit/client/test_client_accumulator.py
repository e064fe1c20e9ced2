"""The producer accumulator batches by linger and size, bounds buffered bytes, numbers idempotent batches and re-sends retries byte-identical."""

import pytest

from partition.batch import decode_batch, read_header
from raftlog.client.accumulator import FULL, Accumulator, RecordTooLarge


class Fut:
    def __init__(self):
        self.result = self.error = None

    def set_result(self, r):
        self.result = r

    def set_exception(self, e):
        self.error = e


def acc_of(**kw):
    a = Accumulator(future_factory=Fut, **kw)
    a.set_producer(42, 3)
    return a


LEADER = {("t", 0): 1, ("t", 1): 2}


def leader_of(t, p):
    return LEADER.get((t, p))


def drain_all(a, now):
    return [b for bs in a.drain(now, leader_of).values() for b in bs]


def test_linger_holds_batch_until_due():
    a = acc_of(linger_ms=5)
    a.append("t", 0, b"v", None, None, 1000, now_ms=100)
    assert drain_all(a, 104) == []
    assert a.next_ready_ms(104) == 105
    [b] = drain_all(a, 105)
    assert b.record_count == 1 and b.in_flight


def test_full_batch_is_ready_at_once_and_size_bounded():
    a = acc_of(linger_ms=10_000, batch_bytes=1024)
    batches = {id(a.append("t", 0, b"x" * 100, None, None, 1, now_ms=0)) for _ in range(30)}
    assert len(batches) >= 3  # ~7 records of <=136 bytes per 1 KiB batch
    out = drain_all(a, 0)
    assert len(out) == 1  # only the full head; one batch per partition per drain
    assert len(out[0].payload) <= 1024
    assert read_header(out[0].payload).record_count == out[0].record_count


def test_one_big_record_gets_own_batch_and_too_large_is_refused():
    a = acc_of(batch_bytes=1024, max_request_bytes=4096, buffer_bytes=1 << 20)
    b = a.append("t", 0, b"y" * 2000, None, None, 1, now_ms=0)
    assert b.record_count == 1
    with pytest.raises(RecordTooLarge):
        a.append("t", 0, b"y" * 5000, None, None, 1, now_ms=0)


def test_buffer_full_then_space_after_completion():
    a = acc_of(batch_bytes=1024, buffer_bytes=2048, linger_ms=0)
    results = [a.append("t", 0, b"z" * 100, None, None, 1, now_ms=0) for _ in range(40)]
    assert results[-1] is FULL
    assert a.buffered_bytes <= 2048
    assert a.append("t", 0, b"z" * 100, None, None, 1, now_ms=0) is FULL
    while a.has_pending():
        for b in drain_all(a, 0):
            a.complete(b, 0)
    assert a.buffered_bytes == 0
    assert a.append("t", 0, b"z" * 100, None, None, 1, now_ms=0) is not FULL


def test_sequences_contiguous_and_stamped_with_valid_crc():
    a = acc_of(batch_bytes=512, linger_ms=0)
    for i in range(20):
        a.append("t", 0, b"%03d" % i * 20, None, None, 1, now_ms=0)
    seqs = []
    while a.has_pending():
        for b in drain_all(a, 0):
            h, recs = decode_batch(b.payload)  # checks the recomputed CRC
            assert (h.producer_id, h.producer_epoch) == (42, 3)
            assert h.base_sequence == b.base_sequence
            seqs.append((b.base_sequence, b.record_count))
            a.complete(b, 0)
    nxt = 0
    for s, n in seqs:
        assert s == nxt
        nxt += n
    assert nxt == 20


def test_retry_resends_same_bytes_alone_and_first():
    a = acc_of(batch_bytes=256, linger_ms=0, max_in_flight_per_partition=5)
    for i in range(12):
        a.append("t", 0, b"r" * 60, None, None, 1, now_ms=0)
    first = [drain_all(a, 0)[0] for _ in range(5) if True]
    assert len(first) == 5 and len({b.base_sequence for b in first}) == 5
    assert drain_all(a, 0) == []  # in-flight bound reached
    b0, b1 = first[0], first[1]
    payload = b0.payload
    a.retry(b0, retry_at_ms=50)
    a.retry(b1, retry_at_ms=0)  # later batch failed too (e.g. out of order)
    assert drain_all(a, 10) == []  # a retry waits until nothing of its partition is in flight
    for b in first[2:]:
        a.retry(b, retry_at_ms=0)
    assert drain_all(a, 10) == []  # b0 backs off until 50
    [again] = drain_all(a, 50)
    assert again is b0 and again.payload is payload and again.attempts == 2
    assert drain_all(a, 50) == []  # the retry goes alone
    a.complete(b0, 100)
    assert b0.future.result == 100
    [nxt] = drain_all(a, 50)
    assert nxt is b1  # then the others, in sequence order


def test_in_flight_bound_and_per_broker_grouping():
    a = acc_of(batch_bytes=256, linger_ms=0, max_in_flight_per_partition=2)
    for i in range(10):
        a.append("t", 0, b"a" * 60, None, None, 1, now_ms=0)
        a.append("t", 1, b"b" * 60, None, None, 1, now_ms=0)
    got = a.drain(0, leader_of)
    assert set(got) == {1, 2}
    a.drain(0, leader_of)
    assert a.drain(0, leader_of) == {}
    assert sum(len(q.in_flight) for q in a._queues["t"].values()) == 4


def test_unknown_leader_waits_and_expiry_fails_unsent():
    a = acc_of(linger_ms=0)
    a.append("t", 7, b"v", None, None, 1, now_ms=0)
    assert a.drain(0, leader_of) == {}
    [b] = a.expire(now_ms=1000, delivery_timeout_ms=1000)
    assert b.attempts == 0 and a.buffered_bytes == 0 and not a.has_pending()


def test_flush_ignores_linger():
    a = acc_of(linger_ms=60_000)
    a.append("t", 0, b"v", None, None, 1, now_ms=0)
    assert drain_all(a, 1) == []
    a.begin_flush()
    assert len(drain_all(a, 1)) == 1


def _cut(records, flush_at=None):
    """Append `records` with linger_ms=None, draining at every step with times far apart;
    returns [(base_sequence, record_count)] of the batches in send order."""
    a = acc_of(linger_ms=None, batch_bytes=1024)
    out = []
    for i, value in enumerate(records):
        a.append("t", 0, value, None, None, 1, now_ms=i * 10_000)
        if flush_at is not None and i == flush_at:
            a.begin_flush()
        for b in drain_all(a, i * 10_000 + 5_000):
            out.append((b.base_sequence, b.record_count))
            a.complete(b, 0)
        a.end_flush()
    a.begin_flush()
    for b in drain_all(a, 10**9):
        out.append((b.base_sequence, b.record_count))
    return out


def test_without_linger_batches_are_cut_by_size_and_flush_alone():
    records = [b"r" * (10 + (i * 37) % 90) for i in range(60)]
    first = _cut(records)
    assert len(first) > 3
    assert first == _cut(records)  # the same records: the same batches, whatever the clock
    assert sum(n for _s, n in first) == 60
    assert [s for s, _n in first] == [sum(n for _s, n in first[:k]) for k in range(len(first))]
    assert _cut(records, flush_at=5) != first  # a flush (and only that) cuts early


def test_without_linger_an_open_batch_never_expires_and_a_full_one_counts_from_full():
    a = acc_of(linger_ms=None, batch_bytes=256)
    a.append("t", 7, b"x" * 80, None, None, 1, now_ms=0)  # partition 7 has no leader
    assert a.next_ready_ms(10**6) is None
    assert a.expire(now_ms=10**6, delivery_timeout_ms=1000) == []
    a.append("t", 7, b"x" * 80, None, None, 1, now_ms=2 * 10**6)  # opens a 2nd: the 1st is full
    assert a.expire(now_ms=2 * 10**6 + 999, delivery_timeout_ms=1000) == []
    [b] = a.expire(now_ms=2 * 10**6 + 1000, delivery_timeout_ms=1000)
    assert b.full and b.attempts == 0 and b.record_count == 1
    assert a.has_pending()  # the open 2nd batch stays
