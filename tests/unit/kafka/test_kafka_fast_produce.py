"""The Produce fast path's calls and answers (raftlog/node/kafka/fast_produce.py): a call
carries what the produce handler reads of a decoded request, an answer encodes to the same
bytes as the ProduceResponse it stands for, at every flexible and non-flexible version."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.producer.produce import ProduceRequest

from raftlog.node.kafka.fast_encode import (Endpoint, LeaderHint, PartitionAnswer, ProduceAnswer, RecordError,
                                            TopicAnswer, encode_produce)
from raftlog.node.kafka.fast_produce import answer_bytes, call_bytes, read_answer, read_call
from raftlog.node.kafka.wire import Header

pytestmark = pytest.mark.unit

TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")


@pytest.mark.parametrize("version", [3, 9, 13])
def test_a_call_carries_what_the_handler_reads(version):
    T = ProduceRequest.TopicProduceData
    topic = T(name="t", partition_data=[T.PartitionProduceData(index=0, records=b"batch-0"),
                                        T.PartitionProduceData(index=3, records=b"bad"),
                                        T.PartitionProduceData(index=4, records=None)])
    if version >= 13:
        topic = T(topic_id=TOPIC_ID, partition_data=topic.partition_data)
    request = ProduceRequest[version](transactional_id="tx" if version == 9 else None, acks=-1, timeout_ms=1500,
                                      topic_data=[topic])
    seen: list[tuple[bytes, bool]] = []

    def check(records: bytes, transactional: bool) -> bytes | None:
        seen.append((records, transactional))
        return None if records == b"bad" else records.upper()

    payload = call_bytes(7, Header(0, version, 42, "client"), request, 123, check)
    seq, header, call, frame_bytes = read_call(payload)
    assert (seq, header, frame_bytes) == (7, Header(0, version, 42, "client"), 123)
    assert (call.acks, call.timeout_ms, call.transactional_id) == (-1, 1500, "tx" if version == 9 else None)
    [t] = call.topic_data
    assert t.name == "t" if version < 13 else t.topic_id == TOPIC_ID
    assert [(p.index, p.records, p.checked) for p in t.partition_data] == [
        (0, b"BATCH-0", True), (3, b"bad", False), (4, None, False)]
    assert seen == [(b"batch-0", version == 9), (b"bad", version == 9)]  # no records: nothing to check


def _answer() -> ProduceAnswer:
    failed = PartitionAnswer(1, 6, error_message="not the leader", current_leader=LeaderHint(2, 9))
    refused = PartitionAnswer(2, 87, error_message="bad", record_errors=[RecordError(0, "no key"), RecordError(3)])
    return ProduceAnswer([TopicAnswer("t", TOPIC_ID, [PartitionAnswer(0, 0, 17, -1, 5), failed, refused])],
                         throttle_time_ms=250, node_endpoints=[Endpoint(2, "h2", 9092, None)])


@pytest.mark.parametrize("version", range(3, 14))
def test_an_answer_encodes_as_the_response_it_carries(version):
    seq, answer, close = read_answer(answer_bytes(9, _answer()))
    assert (seq, close) == (9, None)
    assert encode_produce(answer, version) == encode_produce(_answer(), version)


def test_no_answer_and_a_close():
    assert read_answer(answer_bytes(3)) == (3, None, None)  # acks=0
    assert read_answer(answer_bytes(4, close="handler_failed")) == (4, None, "handler_failed")
