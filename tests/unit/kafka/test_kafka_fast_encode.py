"""The hand-written Produce response encoder (raftlog/node/kafka/fast_encode.py) writes the bytes
kafka-python writes, over every ProduceResponse version and the shapes the handler builds:
several topics and partitions, errors with messages and record errors, KIP-951 leader hints
and node endpoints, null and non-ASCII strings, lengths past one varint byte. And the
listener's encode_response (codec.py) frames it as it frames kafka-python's."""

from __future__ import annotations

import io
import random
import uuid

import pytest
from kafka.protocol.api_header import RequestHeader, ResponseHeader
from kafka.protocol.producer.produce import ProduceResponse

from raftlog.node.kafka import codec
from raftlog.node.kafka.fast_encode import (
    Endpoint,
    LeaderHint,
    PartitionAnswer,
    ProduceAnswer,
    RecordError,
    TopicAnswer,
    encode_produce,
    uvarint,
)
from raftlog.node.kafka.wire import Header

pytestmark = pytest.mark.unit

T = ProduceResponse.TopicProduceResponse
P = T.PartitionProduceResponse
VERSIONS = range(ProduceResponse.min_version, ProduceResponse.max_version + 1)


def _partition(index: int, code: int = 0, *, base: int = 0, message: str | None = None,
               record_errors: list[tuple[int, str | None]] = (), leader: tuple[int, int] | None = None) -> P:
    p = P(index=index, error_code=code, base_offset=base, log_append_time_ms=-1 if index % 2 else 1_700_000_000_000,
          log_start_offset=index * 7, record_errors=[], error_message=message)
    for batch_index, text in record_errors:
        p.record_errors.append(P.BatchIndexAndErrorMessage(batch_index=batch_index, batch_index_error_message=text))
    if leader is not None:
        p.current_leader = P.LeaderIdAndEpoch(leader_id=leader[0], leader_epoch=leader[1])
    return p


def _responses() -> dict[str, ProduceResponse]:
    topic_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    long_name = "t" * 300  # compact length past one varint byte
    return {
        "one": ProduceResponse(responses=[T(name="orders", topic_id=topic_id, partition_responses=[
            _partition(0, base=12345678901)])], throttle_time_ms=0),
        "empty": ProduceResponse(responses=[], throttle_time_ms=0, node_endpoints=[]),
        "many": ProduceResponse(responses=[
            T(name=f"topic-{i}", topic_id=uuid.UUID(int=i + 1),
              partition_responses=[_partition(j, base=j * 100) for j in range(3)]) for i in range(4)
        ] + [T(name=long_name, topic_id=uuid.UUID(int=0), partition_responses=[_partition(200)])],
            throttle_time_ms=1234),
        "errors": ProduceResponse(responses=[T(name="ünïcode-topic", topic_id=topic_id, partition_responses=[
            _partition(0, 87, base=-1, message="invalid record",
                       record_errors=[(0, "bad crc"), (5, None), (300, "é" * 200)]),
            _partition(1, 3, base=-1, message=None),
            _partition(2, 2, base=-1, message="m" * 200),
        ])], throttle_time_ms=7),
        "hints": ProduceResponse(responses=[T(name="moved", topic_id=topic_id, partition_responses=[
            _partition(0, 6, base=-1, message="not the leader", leader=(2, 17)),
            _partition(1, 6, base=-1, leader=(-1, -1)),  # set: written (kafka-python)
            _partition(2, 0, base=9),
        ])], throttle_time_ms=0, node_endpoints=[
            ProduceResponse.NodeEndpoint(node_id=2, host="node-2.example", port=9092, rack=None),
            ProduceResponse.NodeEndpoint(node_id=300, host="h" * 150, port=19092, rack="rack-a"),
        ]),
    }


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("shape", sorted(_responses()))
def test_produce_body_is_kafka_pythons_bytes(shape: str, version: int) -> None:
    response = _responses()[shape]
    assert encode_produce(response, version) == bytes(response.encode(version=version))


@pytest.mark.parametrize("version", VERSIONS)
def test_encode_response_frames_produce_as_kafka_python(version: int) -> None:
    response = _responses()["hints"]
    header = Header(0, version, 424242, "client")
    body = bytes(response.encode(version=version))
    head = bytes(ResponseHeader(correlation_id=424242).encode(flexible=version >= 9))
    expected = (len(head) + len(body)).to_bytes(4, "big") + head + body
    assert b"".join(codec.encode_response(header, response)) == expected


def test_uvarint() -> None:
    assert [uvarint(n) for n in (0, 127, 128, 300, 2**21)] == [
        b"\x00", b"\x7f", b"\x80\x01", b"\xac\x02", b"\x80\x80\x80\x01"]


@pytest.mark.parametrize(("api_key", "version"), [(18, 0), (18, 3), (3, 1), (3, 12), (1, 4), (1, 12)])
def test_response_header_is_kafka_pythons(api_key: int, version: int) -> None:
    flexible = api_key != 18 and codec.is_flexible(api_key, version)  # ApiVersions: header v0 always
    expected = bytes(ResponseHeader(correlation_id=-7).encode(flexible=flexible))
    assert codec.response_header_bytes(Header(api_key, version, -7, None)) == expected
    assert flexible == (api_key != 18 and version >= 9)


def _light(response: ProduceResponse) -> ProduceAnswer:
    """The same answer in the handler's light classes (fast_encode.py)."""
    def partition(p: P) -> PartitionAnswer:
        leader = getattr(p, "current_leader", None)
        return PartitionAnswer(
            p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset, p.error_message,
            [RecordError(e.batch_index, e.batch_index_error_message) for e in p.record_errors],
            None if leader is None else LeaderHint(leader.leader_id, leader.leader_epoch))
    return ProduceAnswer(
        [TopicAnswer(t.name, t.topic_id, [partition(p) for p in t.partition_responses]) for t in response.responses],
        response.throttle_time_ms,
        [Endpoint(e.node_id, e.host, e.port, e.rack) for e in getattr(response, "node_endpoints", None) or ()])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("shape", sorted(_responses()))
def test_light_answers_encode_as_kafka_python(shape: str, version: int) -> None:
    response = _responses()[shape]
    assert encode_produce(_light(response), version) == bytes(response.encode(version=version))


def _kafka_python_header(frame: bytes) -> tuple[object, ...]:
    api_key, api_version = int.from_bytes(frame[0:2], "big", signed=True), int.from_bytes(frame[2:4], "big", signed=True)
    stream = io.BytesIO(frame)
    try:
        raw = RequestHeader.decode(stream, flexible=codec.is_flexible(api_key, api_version))
    except Exception:  # noqa: BLE001
        return ("error",)
    if stream.tell() > len(frame):
        return ("error",)
    return (api_key, api_version, raw.correlation_id, raw.client_id, stream.tell())


def _header_frames() -> list[bytes]:
    rng = random.Random(46)
    frames = []
    for key, version in [(0, 3), (0, 9), (0, 11), (1, 12), (3, 12), (18, 3), (18, 4), (99, 0), (-1, 2816)]:
        prefix = key.to_bytes(2, "big", signed=True) + version.to_bytes(2, "big", signed=True) + (7).to_bytes(4, "big")
        for client_id in (b"", b"rdkafka", "prodüçer".encode(), b"\xff\xfe", b"x" * 300):
            n = len(client_id).to_bytes(2, "big")
            for tail in (b"", b"\x00", b"\x00body", b"\x01\x05\x02ab\x00", b"\x01\x00\x03ab"):
                frames.append(prefix + n + client_id + tail)
        frames.append(prefix + b"\xff\xff" + b"\x00body")  # null client_id
        frames.append(prefix + b"\xff\xfe" + b"\x00body")  # a negative length other than -1
        frames.append(prefix + b"\x00\x09abc")  # client_id past the end
    frames += [bytes(rng.getrandbits(8) for _ in range(rng.randrange(10, 40))) for _ in range(2000)]
    return frames


def test_request_header_is_kafka_pythons() -> None:
    for frame in _header_frames():
        try:
            header, offset = codec.decode_header(frame)
            ours: tuple[object, ...] = (header.api_key, header.api_version, header.correlation_id,
                                        header.client_id, offset)
        except codec.CodecError:
            ours = ("error",)
        assert ours == _kafka_python_header(frame), frame
        if ours != ("error",):
            assert codec.decode_header(memoryview(frame)) == (header, offset)
