"""The Produce fast path's two messages between a Kafka network worker and the node's main
process (issue 46; network_worker.py sends calls, listener.py answers them; mux.py's MSG).

    payload = call_bytes(seq, header, request, frame_bytes)      # worker: a decoded Produce
    seq, header, request, frame_bytes = read_call(payload)        # main: what the handler takes
    payload = answer_bytes(seq, reply)                            # main: the handler's answer
    seq, answer, close = read_answer(payload)                     # worker: encode_produce's input

A call is what the produce handler reads of a ProduceRequest (acks, timeout, transactional
id, each topic's name or id and each partition's index and records bytes) and of its header
(version, correlation id, client id); an answer is what encode_produce reads of a
ProduceResponse (per partition: error, base offset, log append time, log start offset,
message, record errors, KIP-951's leader hint; the throttle time; the node endpoints), or a
close reason (the main closes the connection instead of answering). Both are tuples of
ints, strings, bytes and None in `marshal`'s format: written and read in C, a few us a call,
between two processes of the same node and Python (never stored, never from a client).

Concurrency: pure functions.
"""

from __future__ import annotations

import marshal
import uuid
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from raftlog.node.kafka.fast_encode import Endpoint, LeaderHint, PartitionAnswer, ProduceAnswer, RecordError, TopicAnswer
from raftlog.node.kafka.wire import Header

__all__ = ["call_bytes", "read_call", "answer_bytes", "read_answer", "PRODUCE_KEY", "CallRequest"]

PRODUCE_KEY = 0


@dataclass(slots=True)
class CallPartition:
    index: int
    records: bytes | None
    checked: bool = False  # partition/port.py ProducePart.checked


@dataclass(slots=True)
class CallTopic:
    name: str | None
    topic_id: uuid.UUID | None
    partition_data: list[CallPartition]


@dataclass(slots=True)
class CallRequest:
    """The produce handler's view of a ProduceRequest (the attributes it reads)."""

    acks: int
    timeout_ms: int
    transactional_id: str | None
    topic_data: list[CallTopic]


def call_bytes(seq: int, header: Header, request: Any, frame_bytes: int,
               check: Callable[[bytes, bool], bytes | None] | None = None) -> bytes:
    """A decoded ProduceRequest (kafka-python's, or a CallRequest) as one call. `check(records,
    transactional)`: the records as checked (ProducePart.checked), or None where they fail
    (then they go unchecked: the leader's validation names the error)."""
    transactional = request.transactional_id is not None
    topics = []
    for t in request.topic_data:
        partitions = []
        for p in t.partition_data:
            records = None if p.records is None else bytes(p.records)
            checked = check(records, transactional) if check is not None and records else None
            partitions.append((p.index, records, False) if checked is None else (p.index, checked, True))
        topic_id = getattr(t, "topic_id", None)
        topics.append((getattr(t, "name", None), None if topic_id is None else topic_id.bytes, tuple(partitions)))
    return marshal.dumps((seq, header.api_version, header.correlation_id, header.client_id, request.acks,
                          request.timeout_ms, request.transactional_id, frame_bytes, tuple(topics)))


def read_call(payload: bytes) -> tuple[int, Header, CallRequest, int]:
    seq, version, correlation_id, client_id, acks, timeout_ms, transactional_id, frame_bytes, topics = (
        marshal.loads(payload))
    request = CallRequest(acks, timeout_ms, transactional_id, [
        CallTopic(name, None if topic_id is None else uuid.UUID(bytes=topic_id),
                  [CallPartition(index, records, checked) for index, records, checked in partitions])
        for name, topic_id, partitions in topics])  # fmt: skip
    return seq, Header(PRODUCE_KEY, version, correlation_id, client_id), request, frame_bytes


def answer_bytes(seq: int, reply: Any = None, close: str | None = None) -> bytes:
    """The answer to call `seq`: a ProduceResponse (a ProduceAnswer or kafka-python's error
    answer: read by attribute as encode_produce reads it), or `close`, a reason to close."""
    if reply is None:
        return marshal.dumps((seq, None, close))
    topics = []
    for topic in reply.responses:
        topic_id = getattr(topic, "topic_id", None)
        partitions = []
        for p in topic.partition_responses:
            leader = getattr(p, "current_leader", None)
            partitions.append((
                p.index, p.error_code, p.base_offset, getattr(p, "log_append_time_ms", -1),
                getattr(p, "log_start_offset", -1), getattr(p, "error_message", None),
                tuple((e.batch_index, e.batch_index_error_message) for e in getattr(p, "record_errors", ()) or ()),
                None if leader is None or leader.leader_id < 0 else (leader.leader_id, leader.leader_epoch)))
        topics.append((getattr(topic, "name", None) or "", None if topic_id is None else topic_id.bytes,
                       tuple(partitions)))
    endpoints = tuple((e.node_id, e.host, e.port, e.rack) for e in getattr(reply, "node_endpoints", None) or ())
    return marshal.dumps((seq, (tuple(topics), reply.throttle_time_ms, endpoints), None))


def read_answer(payload: bytes) -> tuple[int, ProduceAnswer | None, str | None]:
    seq, body, close = marshal.loads(payload)
    if body is None:
        return seq, None, close
    topics, throttle_time_ms, endpoints = body
    answer = ProduceAnswer([
        TopicAnswer(name, uuid.UUID(int=0) if topic_id is None else uuid.UUID(bytes=topic_id), [
            PartitionAnswer(index, code, base, append_time, log_start, message,
                            [RecordError(i, m) for i, m in record_errors],
                            None if leader is None else LeaderHint(*leader))
            for index, code, base, append_time, log_start, message, record_errors, leader in partitions])
        for name, topic_id, partitions in topics
    ], throttle_time_ms, [Endpoint(*e) for e in endpoints])  # fmt: skip
    return seq, answer, None
