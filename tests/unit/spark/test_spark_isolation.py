"""The source's isolation: read_committed by default (option kafka.isolation.level, as Spark's Kafka source), a bad value refused naming the option, and a read_committed fetch answer without the aborted batches whose next offset still moves past them."""

from __future__ import annotations

import pytest

from partition.batch import BatchBuilder, txn_marker_batch
from raftlog.client.consumer import append_fetched
from spark_source.fetch import _without_aborted
from spark_source.options import InvalidOption, parse_options

pytestmark = pytest.mark.unit


def test_the_source_reads_read_committed_by_default() -> None:
    base = {"bootstrap": "h:1", "subscribe": "t"}
    assert parse_options(base, streaming=False).read_committed
    assert not parse_options({**base, "kafka.isolation.level": "read_uncommitted"}, streaming=False).read_committed
    with pytest.raises(InvalidOption, match="kafka.isolation.level"):
        parse_options({**base, "kafka.isolation.level": "serializable"}, streaming=False)


def test_aborted_batches_are_left_out_and_skipped() -> None:
    batches = []
    for base_offset, producer_id, values in ((0, 5, [b"x0", b"x1"]), (2, 6, [b"c0"])):
        b = BatchBuilder(producer_id=producer_id, producer_epoch=0, base_sequence=0, is_transactional=True,
                         base_offset=base_offset)
        for v in values:
            b.append(v, None, (), timestamp_ms=1)
        batches.append(b.build())
    abort = bytearray(txn_marker_batch(5, 0, commit=False, coordinator_epoch=0, timestamp_ms=1))
    abort[0:8] = (3).to_bytes(8, "big")  # the base offset is outside the CRC
    records = b"".join(batches) + bytes(abort)
    answer = _without_aborted(records, [[5, 0]], 4, 0)
    assert answer.next_offset == 4 and answer.high_watermark == 4
    got: list = []
    append_fetched("t", 0, answer.records, 0, got)
    assert [r.value for r in got] == [b"c0"]
