"""A replica whose log recovery dropped data comes back durably flagged needs_catch_up."""

from __future__ import annotations

import random

import cbor2
import google_crc32c
import pytest

from metadata.topic_config import TopicConfig
from partition.batch import BatchBuilder
from partition.raft import QuorumState
from partition.quorum_state import (
    QUORUM_STATE_BYTES,
    QUORUM_STATE_FILE,
    QuorumStateCorruptError,
    read_quorum_state,
    write_quorum_state,
)
from partition.replica import Replica


class _NoTransport:
    def send(self, replica, to, message):
        raise AssertionError("nothing is sent in these tests")


def _replica(directory):
    return Replica(topic="t", partition=0, topic_id="tid", replica_id=1, voters=(1, 2, 3),
                   directory=directory, topic_config=TopicConfig.from_configs({}),
                   transport=_NoTransport(), rng=random.Random(1), clock_ms=lambda: 1000)


def _batch(n):
    b = BatchBuilder()
    for i in range(n):
        b.append(b"v" * 50, key=b"k%d" % i, timestamp_ms=1000 + i)
    return b.build()


def test_quorum_state_round_trips_the_flag_and_reads_old_files_as_unflagged(tmp_path):
    write_quorum_state(tmp_path, QuorumState(3, 2, 2, True))
    assert read_quorum_state(tmp_path) == QuorumState(3, 2, 2, True)
    old = cbor2.dumps({"epoch": 3, "voted_for": 2, "leader_id": None}, canonical=True)
    (tmp_path / QUORUM_STATE_FILE).write_bytes(google_crc32c.value(old).to_bytes(4, "big") + old)
    assert read_quorum_state(tmp_path) == QuorumState(3, 2, None, False)
    write_quorum_state(tmp_path, QuorumState(4, 2, None))  # an old, unpadded file is replaced
    assert (tmp_path / QUORUM_STATE_FILE).stat().st_size == QUORUM_STATE_BYTES
    assert read_quorum_state(tmp_path) == QuorumState(4, 2, None, False)
    bad = cbor2.dumps({"epoch": 3, "voted_for": 2, "leader_id": None, "needs_catch_up": 1},
                      canonical=True)
    (tmp_path / QUORUM_STATE_FILE).write_bytes(google_crc32c.value(bad).to_bytes(4, "big") + bad)
    with pytest.raises(QuorumStateCorruptError):
        read_quorum_state(tmp_path)


@pytest.mark.parametrize("at", [4, QUORUM_STATE_BYTES - 1])
def test_a_flipped_bit_in_the_state_or_its_padding_is_corruption(tmp_path, at):
    write_quorum_state(tmp_path, QuorumState(3, 2, 2))
    data = bytearray((tmp_path / QUORUM_STATE_FILE).read_bytes())
    data[at] ^= 0x10
    (tmp_path / QUORUM_STATE_FILE).write_bytes(data)
    with pytest.raises(QuorumStateCorruptError):
        read_quorum_state(tmp_path)


def test_bytes_after_the_state_that_are_not_padding_are_corruption(tmp_path):
    body = cbor2.dumps({"epoch": 3, "voted_for": 2, "leader_id": None}, canonical=True)
    body = (body + b"\x01").ljust(QUORUM_STATE_BYTES - 4, b"\0")  # with a CRC that matches
    (tmp_path / QUORUM_STATE_FILE).write_bytes(google_crc32c.value(body).to_bytes(4, "big") + body)
    with pytest.raises(QuorumStateCorruptError):
        read_quorum_state(tmp_path)


def test_torn_tail_flags_the_replica_durably_and_a_fresh_one_is_not_flagged(tmp_path):
    d = tmp_path / "t-0"
    fresh = _replica(d)
    fresh.open()
    assert not fresh.core.needs_catch_up and fresh.new_log
    for _ in range(4):
        fresh.log.append(_batch(3), leader_epoch=1, now_ms=1000)
    fresh.log.flush()
    end = fresh.log.log_end_offset
    fresh.log.close()
    # Damaged storage: the tail of the active segment is gone (fsynced data included).
    [segment] = sorted(d.glob("*.log"))
    size = segment.stat().st_size
    with open(segment, "r+b") as f:
        f.truncate(size - 40)

    damaged = _replica(d)
    damaged.open()
    assert damaged.log.recovery.bytes_dropped > 0 and damaged.log.log_end_offset < end
    assert damaged.core.needs_catch_up and damaged.status()["needs_catch_up"]
    assert read_quorum_state(d).needs_catch_up  # durable before the core ran
    damaged.log.close()

    # The next restart recovers a clean log; the flag still holds.
    again = _replica(d)
    again.open()
    assert again.log.recovery.bytes_dropped == 0 and again.core.needs_catch_up
    again.log.close()
