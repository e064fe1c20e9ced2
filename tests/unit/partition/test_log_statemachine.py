"""Random appends, rolls, truncations, retention, compaction, flushes, closes and crashes keep the log equal to an in-memory reference."""

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from partition.batch import BatchBuilder, decode_batches
from partition.log import Log, LogConfig

BASE = dict(segment_bytes=600, index_interval_bytes=150, retention_ms=-1,
            cleanup_policy="compact,delete", delete_retention_ms=10**12)
KEYS = [b"a", b"b", b"c", b"d", None]


class LogMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="logsm-"))
        self.log = Log.open(self.dir, LogConfig(**BASE), now_ms=0)
        self.batches = []  # [(base, last, [(offset, key, value)])] as appended, never compacted
        self.epochs = []  # [(epoch, start_offset)]
        self.epoch = 0
        self.log_start = 0
        self.compacted = False
        self.truncate_floor = 0  # offsets below it may sit in compacted segments

    def teardown(self):
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def leo(self):
        return self.batches[-1][1] + 1 if self.batches else self.log_start

    @rule(items=st.lists(st.tuples(st.sampled_from(KEYS), st.binary(max_size=60)), min_size=1, max_size=5),
          new_epoch=st.booleans())
    def append(self, items, new_epoch):
        if new_epoch:
            self.epoch += 1
        b = BatchBuilder()
        for k, v in items:
            b.append(v, key=k, timestamp_ms=1000)
        first, last = self.log.append(b.build(), leader_epoch=self.epoch, now_ms=0)
        assert first == self.leo and last == first + len(items) - 1
        if not self.epochs or self.epochs[-1][0] != self.epoch:
            self.epochs.append((self.epoch, first))
        self.batches.append((first, last, [(first + i, k, v) for i, (k, v) in enumerate(items)]))

    def has_batches(self):
        return bool(self.batches)

    # A named precondition, not a lambda: hypothesis describes a lambda by parsing its source,
    # and CPython 3.11.7's ast.parse raised SystemError ("AST constructor recursion depth
    # mismatch") there in one CI run.
    @precondition(has_batches)
    @rule(frac=st.floats(0, 1))
    def truncate(self, frac):
        low = max(self.log_start, self.truncate_floor)
        if low >= self.leo:
            return
        offset = low + int(frac * (self.leo - low))
        cut = offset < self.leo
        self.log.truncate_to(offset)
        keep = [b for b in self.batches if b[1] < offset]
        self.batches = keep
        self.epochs = [e for e in self.epochs if e[1] < self.leo]
        assert self.log.log_end_offset == self.leo
        if cut:  # a real truncation is durable on return; truncating at the end is a no-op
            assert self.log.flushed_offset == self.leo

    @rule(budget=st.integers(0, 2000))
    def retention(self, budget):
        self.log.set_config(LogConfig(**(BASE | {"retention_bytes": budget, "cleanup_policy": "delete"})))
        self.log.maintain(now_ms=0)
        self.log.set_config(LogConfig(**BASE))
        new_start = self.log.log_start_offset
        assert new_start >= self.log_start
        if new_start > self.log_start:
            self.log_start = new_start
            self.batches = [b for b in self.batches if b[1] >= new_start]
            assert not self.batches or self.batches[0][0] >= new_start  # whole segments only
            before = [e for e in self.epochs if e[1] <= new_start]
            self.epochs = ([(before[-1][0], new_start)] if before else []) + \
                [e for e in self.epochs if e[1] > new_start]
            self.epochs = [e for e in self.epochs if e[1] < self.leo]  # an emptied log keeps none

    @rule()
    def compact(self):
        self.log.flush()
        self.log.set_config(LogConfig(**(BASE | {"cleanup_policy": "compact"})))
        done = self.log.maintain(now_ms=0)
        self.log.set_config(LogConfig(**BASE))
        if done["compacted_segments"]:
            self.compacted = True
        self.truncate_floor = self.log._segments[-1].base_offset

    @rule()
    def flush(self):
        assert self.log.flush() == self.leo == self.log.flushed_offset

    @rule(crash=st.booleans())
    def reopen(self, crash):
        if crash:
            self.log._abandon()  # the page cache survives a process crash: nothing is lost
        else:
            self.log.close()
        self.log = Log.open(self.dir, LogConfig(**BASE), now_ms=0)
        assert self.log.recovery.bytes_dropped == 0

    @invariant()
    def matches_reference(self):
        log = self.log
        assert (log.log_start_offset, log.log_end_offset) == (self.log_start, self.leo)
        assert log.epochs() == self.epochs
        expected = {o: (k, v) for _, _, rs in self.batches for o, k, v in rs}
        got = {}
        offset = self.log_start
        max_bytes = 1
        while offset < self.leo:
            data = log.read(offset, max_bytes)
            max_bytes = max_bytes * 3 + 100
            assert data
            for h, rs in decode_batches(data):
                offset = max(offset, h.next_offset)
                for r in rs:
                    got[r.offset] = (r.key, r.value)
        assert all(expected[o] == kv for o, kv in got.items())
        if not self.compacted:
            assert got == expected
        newest = {}
        for o in sorted(expected):
            newest[expected[o][0]] = o
        for k, o in newest.items():
            assert o in got, (k, o)  # compaction never drops a key's newest value
        assert sum(1 for kv in got.values() if kv[0] is None) == \
            sum(1 for kv in expected.values() if kv[0] is None)


TestLogMachine = LogMachine.TestCase
TestLogMachine.settings = settings(max_examples=20, stateful_step_count=25, deadline=None)


class SlowLogMachine(LogMachine):
    pass


TestLogMachineSlow = pytest.mark.slow(SlowLogMachine.TestCase)
TestLogMachineSlow.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
