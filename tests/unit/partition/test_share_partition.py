"""A share partition's window (KIP-932) under random acquire/ack/expire/leave/failover sequences: never two holders, an acknowledged record never redelivered, delivery counts within the limit, nothing lost."""

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from partition.share_partition import (
    Acknowledgement,
    AckType,
    RecordState,
    SharePartition,
    ShareSettings,
)
from raftlog.base.errors import InvalidRecordStateError, InvalidRequestError

pytestmark = pytest.mark.unit

MEMBERS = ["m1", "m2", "m3"]
LIMIT = 3
LOCK_MS = 100


def offsets(runs):
    return [o for r in runs for o in range(r.first_offset, r.last_offset + 1)]


class ShareMachine(RuleBasedStateMachine):
    """The model: per offset, who holds it (lock expiry), how often it went out, and whether it
    is done (accepted, rejected or exhausted); plus a simulated failover (snapshot/restore)."""

    def __init__(self):
        super().__init__()
        self.settings = ShareSettings(record_lock_duration_ms=LOCK_MS, delivery_count_limit=LIMIT, max_record_locks=8)
        self.sp = SharePartition(0, self.settings)
        self.now_ms = 0
        self.hw = 0
        self.held = {}  # offset -> (member, expiry)
        self.deliveries = {}  # offset -> count
        self.accepted = set()
        self.archived = set()

    def _expire_model(self):
        for off, (_, expiry) in list(self.held.items()):
            if expiry <= self.now_ms:
                self._release_model(off)

    def _release_model(self, off):
        del self.held[off]
        if self.deliveries[off] >= LIMIT:
            self.archived.add(off)

    @rule(n=st.integers(1, 6))
    def produce(self, n):
        self.hw += n

    @rule(ms=st.integers(1, 150))
    def tick(self, ms):
        self.now_ms += ms

    @rule(member=st.sampled_from(MEMBERS), n=st.integers(1, 5))
    def acquire(self, member, n):
        got = offsets(self.sp.acquire(member, high_watermark=self.hw, max_records=n, now_ms=self.now_ms))
        self._expire_model()
        assert len(got) <= n and got == sorted(got) and len(set(got)) == len(got)
        for off in got:
            assert off < self.hw
            assert off not in self.held, f"offset {off} handed to {member} while held by {self.held[off]}"
            assert off not in self.accepted, f"accepted offset {off} redelivered"
            assert off not in self.archived, f"archived offset {off} redelivered"
            self.deliveries[off] = self.deliveries.get(off, 0) + 1
            assert self.deliveries[off] <= LIMIT
            self.held[off] = (member, self.now_ms + LOCK_MS)

    @rule(member=st.sampled_from(MEMBERS), kind=st.sampled_from([AckType.ACCEPT, AckType.RELEASE, AckType.REJECT]),
          data=st.data())
    def ack_own(self, member, kind, data):
        self._expire_model()
        mine = sorted(o for o, (m, _) in self.held.items() if m == member)
        if not mine:
            return
        chosen = sorted(data.draw(st.sets(st.sampled_from(mine), min_size=1)))
        self.sp.acknowledge(member, [Acknowledgement(o, o, kind) for o in chosen], now_ms=self.now_ms)
        for off in chosen:
            if kind is AckType.ACCEPT:
                del self.held[off]
                self.accepted.add(off)
            elif kind is AckType.REJECT:
                del self.held[off]
                self.archived.add(off)
            else:
                self._release_model(off)

    @rule(member=st.sampled_from(MEMBERS), off=st.integers(0, 40))
    def ack_not_held(self, member, off):
        self._expire_model()
        if self.held.get(off, (None,))[0] == member:
            return
        version = self.sp.version
        with pytest.raises(InvalidRecordStateError):
            self.sp.acknowledge(member, [Acknowledgement(off, off, AckType.ACCEPT)], now_ms=self.now_ms)
        assert off not in self.accepted or self.sp.state_of(off) is not RecordState.ACQUIRED
        assert self.sp.version == version or self.sp.version == version + 1  # only an expiry may move it

    @rule(member=st.sampled_from(MEMBERS))
    def leave(self, member):
        self._expire_model()
        self.sp.release_member(member)
        for off in [o for o, (m, _) in self.held.items() if m == member]:
            self._release_model(off)

    @rule()
    def failover(self):
        # The new leader starts from what was persisted: locks are gone, counts and acks stay.
        self.sp = SharePartition.restore(self.sp.snapshot(), self.settings)
        for off in list(self.held):
            self._release_model(off)

    @invariant()
    def agrees(self):
        self.sp.check()
        self.sp.expire(self.now_ms)  # the shell's lock timer
        self._expire_model()
        self.sp.check()
        for off in range(self.sp.start_offset, self.sp.end_offset):
            state = self.sp.state_of(off)
            if off in self.accepted:
                assert state is RecordState.ACKNOWLEDGED
            elif off in self.archived:
                assert state is RecordState.ARCHIVED
            elif off in self.held and self.held[off][1] > self.now_ms:
                assert state is RecordState.ACQUIRED and self.sp.holder(off) == self.held[off][0]
            assert self.sp.delivery_count(off) == self.deliveries.get(off, 0)
        for off in range(self.sp.start_offset):  # below SPSO: done, nothing lost
            assert off in self.accepted or off in self.archived


TestShareMachine = ShareMachine.TestCase
TestShareMachine.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)


def sp(**kw):
    return SharePartition(0, ShareSettings(record_lock_duration_ms=LOCK_MS, delivery_count_limit=LIMIT,
                                           max_record_locks=kw.pop("locks", 100)))


def test_acquire_hands_out_lowest_first_and_one_holder_at_a_time():
    s = sp()
    a = s.acquire("m1", high_watermark=10, max_records=4, now_ms=0)
    b = s.acquire("m2", high_watermark=10, max_records=10, now_ms=0)
    assert offsets(a) == [0, 1, 2, 3] and offsets(b) == [4, 5, 6, 7, 8, 9]
    assert s.acquire("m3", high_watermark=10, max_records=10, now_ms=1) == []


def test_lock_expiry_redelivers_to_another_member_with_a_higher_count():
    s = sp()
    s.acquire("m1", high_watermark=2, max_records=2, now_ms=0)
    assert s.acquire("m2", high_watermark=2, max_records=2, now_ms=LOCK_MS - 1) == []
    runs = s.acquire("m2", high_watermark=2, max_records=2, now_ms=LOCK_MS)
    assert offsets(runs) == [0, 1] and runs[0].delivery_count == 2
    with pytest.raises(InvalidRecordStateError):  # m1's lock is gone
        s.acknowledge("m1", [Acknowledgement(0, 0, AckType.ACCEPT)], now_ms=LOCK_MS)


def test_poison_record_is_archived_after_the_delivery_limit():
    s = sp()
    for n in range(1, LIMIT + 1):
        runs = s.acquire("m1", high_watermark=1, max_records=1, now_ms=n)
        assert offsets(runs) == [0] and runs[0].delivery_count == n
        s.acknowledge("m1", [Acknowledgement(0, 0, AckType.RELEASE)], now_ms=n)
    assert s.state_of(0) is RecordState.ARCHIVED and s.start_offset == 1
    assert s.acquire("m1", high_watermark=1, max_records=1, now_ms=99) == []


def test_ack_is_all_or_nothing():
    s = sp()
    s.acquire("m1", high_watermark=3, max_records=2, now_ms=0)
    s.acquire("m2", high_watermark=3, max_records=1, now_ms=0)
    with pytest.raises(InvalidRecordStateError):
        s.acknowledge("m1", [Acknowledgement(0, 2, AckType.ACCEPT)], now_ms=1)
    assert [s.state_of(o) for o in range(3)] == [RecordState.ACQUIRED] * 3
    with pytest.raises(InvalidRequestError):
        s.acknowledge("m1", [Acknowledgement(1, 0, AckType.ACCEPT)], now_ms=1)
    with pytest.raises(InvalidRequestError):
        s.acknowledge("m1", [Acknowledgement(0, 1, AckType.ACCEPT), Acknowledgement(1, 1, AckType.REJECT)], now_ms=1)
    with pytest.raises(InvalidRecordStateError):
        s.acknowledge("m1", [Acknowledgement(0, 10**12, AckType.ACCEPT)], now_ms=1)


def test_window_is_capped_by_max_record_locks():
    s = sp(locks=3)
    assert offsets(s.acquire("m1", high_watermark=10, max_records=10, now_ms=0)) == [0, 1, 2]
    s.acknowledge("m1", [Acknowledgement(1, 2, AckType.ACCEPT)], now_ms=0)
    assert s.acquire("m2", high_watermark=10, max_records=10, now_ms=0) == []  # 0 still held
    s.acknowledge("m1", [Acknowledgement(0, 0, AckType.ACCEPT)], now_ms=0)
    assert s.start_offset == 3
    assert offsets(s.acquire("m2", high_watermark=10, max_records=10, now_ms=0)) == [3, 4, 5]


def test_snapshot_restore_keeps_acks_and_counts_and_frees_locks():
    s = sp()
    s.acquire("m1", high_watermark=4, max_records=4, now_ms=0)
    s.acknowledge("m1", [Acknowledgement(1, 1, AckType.ACCEPT), Acknowledgement(3, 3, AckType.REJECT)], now_ms=0)
    snap = s.snapshot()
    assert snap["start_offset"] == 0
    r = SharePartition.restore(snap, s.settings)
    r.check()
    assert [r.state_of(o) for o in range(4)] == [RecordState.AVAILABLE, RecordState.ACKNOWLEDGED,
                                                 RecordState.AVAILABLE, RecordState.ARCHIVED]
    runs = r.acquire("m2", high_watermark=6, max_records=10, now_ms=0)
    assert offsets(runs) == [0, 2, 4, 5]
    assert [x.delivery_count for x in runs] == [2, 2, 1]
    with pytest.raises(ValueError):
        SharePartition.restore({"start_offset": 0, "state_batches": [
            {"first_offset": 1, "last_offset": 1, "delivery_state": 0, "delivery_count": 0}]})


def test_move_start_and_reset():
    s = sp()
    s.acquire("m1", high_watermark=5, max_records=2, now_ms=0)
    s.move_start(3)
    s.check()
    assert s.start_offset == 3 and s.acquired_count() == 0
    with pytest.raises(InvalidRecordStateError):
        s.acknowledge("m1", [Acknowledgement(0, 0, AckType.ACCEPT)], now_ms=0)
    s.acquire("m1", high_watermark=5, max_records=1, now_ms=0)
    with pytest.raises(InvalidRecordStateError):
        s.reset(0)
    s.release_member("m1")
    s.reset(0)
    assert offsets(s.acquire("m2", high_watermark=5, max_records=9, now_ms=0)) == [0, 1, 2, 3, 4]


def test_acquire_stops_at_the_read_end_and_next_fetch_offset_finds_redeliveries():
    s = sp()
    s.acquire("m1", high_watermark=6, max_records=6, now_ms=0)
    s.acknowledge("m1", [Acknowledgement(0, 0, AckType.ACCEPT), Acknowledgement(2, 2, AckType.RELEASE),
                         Acknowledgement(4, 4, AckType.RELEASE)], now_ms=0)
    assert s.next_fetch_offset() == 2
    assert offsets(s.acquire("m2", high_watermark=3, max_records=9, now_ms=0)) == [2]  # 4 lies past the read
    assert s.next_fetch_offset() == 4
    assert offsets(s.acquire("m2", high_watermark=9, max_records=9, now_ms=0)) == [4, 6, 7, 8]
