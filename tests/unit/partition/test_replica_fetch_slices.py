"""A leader's fetch answers for plain-TCP peers carry a slice of its log instead of bytes (read with sendfile later), and a slice stops being intact once any cut of the log begins, so no byte of another time is ever sent; over TLS the answer carries the bytes, as before."""

from __future__ import annotations

import os
import random

import trio

from metadata.topic_config import TopicConfig
from partition.batch import BatchBuilder, iter_headers
from partition.raft import FetchResponse, TruncateTo
from partition.replica import LogSlice, Replica

CONFIG = TopicConfig.from_configs({"segment_bytes": "1048576"})


class _Capture:
    def __init__(self, file_slices: bool):
        self.file_slices = file_slices
        self.sent: list = []

    def send(self, replica, to, message):
        self.sent.append((to, message))

    def answering(self, broker_id):
        return False


def _replica(directory, transport):
    return Replica(topic="t", partition=0, topic_id="tid", replica_id=1, voters=(1, 2, 3),
                   directory=directory, topic_config=CONFIG, transport=transport,
                   rng=random.Random(1), clock_ms=lambda: 1000)


def _batch(i: int) -> bytes:
    b = BatchBuilder()
    b.append(b"v%04d" % i + b"." * 300, key=b"k%d" % i, timestamp_ms=1000 + i)
    return b.build()


def _answer(read_offset: int) -> FetchResponse:
    return FetchResponse(1, 1, 1, 1, None, 0, read_offset, None, -1, read_offset)


async def test_a_slice_of_the_log_is_sent_and_a_cut_makes_it_not_intact(tmp_path):
    transport = _Capture(file_slices=True)
    r = _replica(tmp_path / "t-0", transport)
    await trio.to_thread.run_sync(r.open)
    data = b"".join(_batch(i) for i in range(10))
    r.log.append(data, leader_epoch=1, now_ms=1000)
    await r._send(2, _answer(0))
    (to, m), = transport.sent
    piece = m.records
    assert to == 2 and isinstance(piece, LogSlice) and piece.intact() and len(piece) == len(data)
    sent = os.pread(piece.fd, piece.length, piece.offset)
    assert [h.base_offset for _, h in iter_headers(sent)] == list(range(10))  # stamped, CRCs good
    await r._execute([TruncateTo(5)])
    assert not piece.intact()  # the sender closes the connection instead of sending it
    piece.close()
    piece.close()  # idempotent: the outbox and the listener may both release it
    await r._send(2, _answer(0))
    fresh = transport.sent[-1][1].records
    assert fresh.intact() and fresh.length < len(data)
    fresh.close()
    await r.close()


async def test_without_file_slices_the_answer_carries_the_bytes(tmp_path):
    transport = _Capture(file_slices=False)
    r = _replica(tmp_path / "t-0", transport)
    await trio.to_thread.run_sync(r.open)
    r.log.append(_batch(0), leader_epoch=1, now_ms=1000)
    await r._send(2, _answer(0))
    records = transport.sent[0][1].records
    assert type(records) is bytes and len(records) == len(_batch(0))
    await r.close()


async def test_a_follower_asking_for_the_same_offset_again_gets_a_checked_read(tmp_path):
    """The leader sends its own fresh tail unchecked (the follower checks every CRC); a
    follower that asks for the same offset again may have refused those bytes, so that read
    is checked: damage in the tail is found, and never sent twice."""
    transport = _Capture(file_slices=True)
    r = _replica(tmp_path / "t-0", transport)
    await trio.to_thread.run_sync(r.open)
    data = b"".join(_batch(i) for i in range(10))
    r.log.append(data, leader_epoch=1, now_ms=1000)
    seg = r.log._segments[-1]
    pos = [p for p, _ in iter_headers(data)][6]
    with open(seg.log_path, "r+b") as f:  # damage in place, under the running replica
        f.seek(pos + 100)
        byte = f.read(1)
        f.seek(pos + 100)
        f.write(bytes([byte[0] ^ 0x10]))
    await r._send(2, _answer(0))
    await r._send(3, _answer(0))  # another follower's first ask: unchecked too
    assert [to for to, _ in transport.sent] == [2, 3] and not r._damage_reports
    for _, m in transport.sent:
        m.records.close()
    await r._send(2, _answer(0))  # follower 2 asks again: checked, found, nothing sent
    assert [to for to, _ in transport.sent] == [2, 3]
    assert r._damage_reports == {seg.base_offset: "replica_fetch"}
    await r.close()
