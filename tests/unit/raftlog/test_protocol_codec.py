"""The frame codec round-trips any plain message however the bytes are split, enforces its limits, refuses non-plain CBOR, and the error tree keeps its wire codes."""

import struct

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.base import errors
from raftlog.base.errors import (
    InvalidRequestError,
    MessageTooLargeError,
    NotLeaderError,
    RaftlogError,
    RejectedError,
    RequestTimedOutError,
    UnknownOutcomeError,
    as_wire_error,
    error_from_wire,
)
from raftlog.base.protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    MAX_NESTING_DEPTH,
    PROTOCOL_VERSION,
    FirstBytes,
    FrameDecoder,
    Request,
    encode_frame,
    error_response,
    field,
    ok_response,
    parse_request,
    parse_response,
)

PROTOCOL_CODES = """SCHEMA_REGISTRY_ERROR NOT_LEADER NOT_CONTROLLER UNKNOWN_TOPIC_OR_PARTITION OFFSET_OUT_OF_RANGE
MESSAGE_TOO_LARGE CORRUPT_MESSAGE UNSUPPORTED_COMPRESSION_TYPE INVALID_REQUEST INVALID_TOPIC
TOPIC_ALREADY_EXISTS INVALID_PARTITIONS INVALID_REPLICATION_FACTOR INVALID_CONFIG
INVALID_REPLICA_ASSIGNMENT REASSIGNMENT_IN_PROGRESS NO_REASSIGNMENT_IN_PROGRESS ELECTION_NOT_NEEDED PREFERRED_LEADER_NOT_AVAILABLE
NOT_ENOUGH_REPLICAS REQUEST_TIMED_OUT OUT_OF_ORDER_SEQUENCE_NUMBER DUPLICATE_SEQUENCE_NUMBER
INVALID_PRODUCER_EPOCH UNKNOWN_PRODUCER_ID REBALANCE_IN_PROGRESS ILLEGAL_GENERATION
UNKNOWN_MEMBER_ID MEMBER_ID_REQUIRED NOT_COORDINATOR COORDINATOR_LOAD_IN_PROGRESS
COORDINATOR_NOT_AVAILABLE GROUP_ID_NOT_FOUND NON_EMPTY_GROUP GROUP_SUBSCRIBED_TO_TOPIC UNSTABLE_OFFSET_COMMIT INVALID_UPDATE_VERSION KAFKA_STORAGE_ERROR
UNKNOWN_SERVER_ERROR BROKER_ID_NOT_REGISTERED STALE_BROKER_EPOCH DUPLICATE_BROKER_REGISTRATION
FENCED_LEADER_EPOCH UNKNOWN_LEADER_EPOCH STALE_CONTROLLER_EPOCH FENCED_INSTANCE_ID INCONSISTENT_GROUP_PROTOCOL
GROUP_MAX_SIZE_REACHED INVALID_SESSION_TIMEOUT INVALID_GROUP_ID OFFSET_METADATA_TOO_LARGE
SASL_AUTHENTICATION_FAILED UNSUPPORTED_SASL_MECHANISM ILLEGAL_SASL_STATE TOPIC_AUTHORIZATION_FAILED
GROUP_AUTHORIZATION_FAILED CLUSTER_AUTHORIZATION_FAILED SECURITY_DISABLED RESOURCE_NOT_FOUND
DUPLICATE_RESOURCE UNACCEPTABLE_CREDENTIAL
INVALID_RECORD INVALID_TIMESTAMP TRANSACTIONAL_ID_AUTHORIZATION_FAILED
PRODUCER_FENCED INVALID_TXN_STATE INVALID_PRODUCER_ID_MAPPING INVALID_TRANSACTION_TIMEOUT
CONCURRENT_TRANSACTIONS TRANSACTIONAL_ID_NOT_FOUND TRANSACTION_COORDINATOR_FENCED
FENCED_MEMBER_EPOCH UNRELEASED_INSTANCE_ID UNSUPPORTED_ASSIGNOR STALE_MEMBER_EPOCH
INVALID_REGULAR_EXPRESSION INVALID_RECORD_STATE""".split()

plain = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=40),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
messages = st.dictionaries(st.text(max_size=8), plain, max_size=6)


def frame_of(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def decode_all(decoder: FrameDecoder) -> list[dict]:
    frames = []
    while (frame := decoder.next_frame()) is not None:
        frames.append(frame)
    return frames


@settings(max_examples=100, deadline=None)
@given(st.lists(messages, min_size=1, max_size=4), st.data())
def test_round_trip_with_arbitrary_splits(batch, data):
    stream = b"".join(encode_frame(m) for m in batch)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    decoder = FrameDecoder()
    got = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)]):
        decoder.feed(stream[start:end])
        got.extend(decode_all(decoder))
    assert got == batch
    assert decoder.buffered_bytes == 0


def test_split_at_every_byte():
    message = {"v": 1, "id": 7, "op": "produce", "records": b"\x00" * 50, "n": [1, {"a": None}]}
    stream = encode_frame(message) * 2
    decoder = FrameDecoder()
    got = []
    for index in range(len(stream)):
        decoder.feed(stream[index : index + 1])
        got.extend(decode_all(decoder))
        if index < len(stream) // 2 - 1:
            assert got == []
    assert got == [message, message]


def test_encoding_is_canonical_and_length_prefixed():
    frame = encode_frame({"b": 1, "a": 2})
    body = cbor2.dumps({"a": 2, "b": 1}, canonical=True)
    assert frame == struct.pack(">I", len(body)) + body


def test_feed_accepts_memoryview_and_bytearray():
    frame = encode_frame({"x": 1})
    decoder = FrameDecoder()
    decoder.feed(memoryview(frame)[:3])
    decoder.feed(bytearray(frame[3:]))
    assert decoder.next_frame() == {"x": 1}


def test_oversized_announcement_refused_before_body_arrives():
    decoder = FrameDecoder(max_frame_bytes=100)
    decoder.feed(struct.pack(">I", 101))
    with pytest.raises(MessageTooLargeError):
        decoder.next_frame()
    decoder.feed(encode_frame({"x": 1}))
    with pytest.raises(MessageTooLargeError):  # poisoned: the stream cannot be re-aligned
        decoder.next_frame()


def test_frame_exactly_at_limit_passes():
    body = cbor2.dumps({"k": b"\x00" * 90}, canonical=True)
    decoder = FrameDecoder(max_frame_bytes=len(body))
    decoder.feed(frame_of(body))
    assert decoder.next_frame() == {"k": b"\x00" * 90}


def test_encode_refuses_over_limit():
    with pytest.raises(MessageTooLargeError):
        encode_frame({"k": b"\x00" * 200}, max_frame_bytes=100)


def test_default_limit_is_64_mib():
    assert DEFAULT_MAX_FRAME_BYTES == 64 << 20
    assert FrameDecoder().max_frame_bytes == 64 << 20


@pytest.mark.parametrize(
    "body, why",
    [
        (b"", "empty"),
        (b"\xff", "malformed"),
        (cbor2.dumps([1, 2]), "not a map"),
        (cbor2.dumps("text"), "not a map"),
        (cbor2.dumps({"a": 1}) + b"\x00", "trailing"),
        (cbor2.dumps({1: "int key"}), "non-string key"),
        (cbor2.dumps({b"k": 1}), "bytes key"),
        (cbor2.dumps({"a": cbor2.CBORTag(35, "(a+)+$")}), "regex tag"),
        (cbor2.dumps({"a": cbor2.CBORTag(2, b"\x01" * 20)}), "bignum tag"),
        (cbor2.dumps({"a": cbor2.CBORTag(0, "2020-01-01T00:00:00Z")}), "datetime tag"),
        (cbor2.dumps({"a": cbor2.CBORTag(12345, 1)}), "unknown tag"),
        (cbor2.dumps({"a": cbor2.undefined}), "undefined"),
        (cbor2.dumps({"a": cbor2.CBORSimpleValue(99)}), "simple value"),
        (b"\xbf\x61a\x01\xff", "indefinite map"),
        (b"\xa2\x61a\x01\x61a\x02", "duplicate key"),
        (b"\xa1\x61a" + b"\x81" * (MAX_NESTING_DEPTH + 5) + b"\x00", "too deep"),
        (b"\xa1\x61a\x5b\xff\xff\xff\xff\xff\xff\xff\xff", "huge bytes length"),
        (b"\xa1\x61a\x62\xff\xfe", "invalid utf-8"),
    ],
)
def test_bad_frames_raise_invalid_request_and_decoder_continues(body, why):
    decoder = FrameDecoder()
    decoder.feed(frame_of(body) + encode_frame({"next": True}))
    with pytest.raises(InvalidRequestError):
        decoder.next_frame()
    assert decoder.next_frame() == {"next": True}, why


def test_parse_request_splits_envelope():
    request = parse_request({"v": 1, "id": 5, "op": "fetch", "max_wait_ms": 10})
    assert request == Request(id=5, op="fetch", fields={"max_wait_ms": 10})
    with pytest.raises(TypeError):
        request.fields["x"] = 1  # read-only


@pytest.mark.parametrize(
    "frame, bad_field, request_id",
    [
        ({"v": 1, "op": "x"}, "id", None),
        ({"v": 1, "id": 0, "op": "x"}, "id", None),
        ({"v": 1, "id": -3, "op": "x"}, "id", None),
        ({"v": 1, "id": True, "op": "x"}, "id", None),
        ({"v": 1, "id": "1", "op": "x"}, "id", None),
        ({"v": 1, "id": 2**64, "op": "x"}, "id", None),
        ({"id": 4, "op": "x"}, "v", 4),
        ({"v": 2, "id": 4, "op": "x"}, "v", 4),
        ({"v": True, "id": 4, "op": "x"}, "v", 4),
        ({"v": 1, "id": 4}, "op", 4),
        ({"v": 1, "id": 4, "op": 7}, "op", 4),
        ({"v": 1, "id": 4, "op": ""}, "op", 4),
    ],
)
def test_parse_request_errors_name_the_field(frame, bad_field, request_id):
    with pytest.raises(InvalidRequestError) as caught:
        parse_request(frame)
    assert caught.value.details["field"] == bad_field
    assert caught.value.request_id == request_id


def test_typed_field_access():
    request = parse_request(
        {"v": 1, "id": 9, "op": "p", "acks": -1, "topics": None, "names": ["a", "b"], "f": 2}
    )
    assert field(request, "acks", int) == -1
    assert field(request, "timeout_ms", int, default=30000) == 30000
    assert field(request, "topics", list, nullable=True) is None
    assert field(request, "names", list, items=str) == ["a", "b"]
    assert field(request, "f", float) == 2
    nested = {"topic": "t", "partition": True}
    assert field(nested, "topic", str, where="partitions[0]") == "t"
    cases = [
        (lambda: field(request, "missing", int), "missing"),
        (lambda: field(request, "topics", list), "topics"),
        (lambda: field(request, "names", list, items=int), "names"),
        (lambda: field(request, "acks", int, min_value=0), "acks"),
        (lambda: field(request, "acks", int, max_value=-2), "acks"),
        (lambda: field(request, "acks", str), "acks"),
        (lambda: field(nested, "partition", int, where="partitions[0]"), "partitions[0].partition"),
    ]
    for call, name in cases:
        with pytest.raises(InvalidRequestError) as caught:
            call()
        assert caught.value.details["field"] == name
        assert name in caught.value.message


def test_responses_round_trip_through_the_codec():
    decoder = FrameDecoder()
    decoder.feed(encode_frame(ok_response(3, base_offset=10)))
    decoder.feed(encode_frame(error_response(4, NotLeaderError(leader_id=2, leader="h:9092"))))
    ok = parse_response(decoder.next_frame())
    assert (ok.id, ok.error, dict(ok.fields)) == (3, None, {"base_offset": 10})
    failed = parse_response(decoder.next_frame())
    assert failed.id == 4
    assert isinstance(failed.error, NotLeaderError)
    assert (failed.error.leader_id, failed.error.leader) == (2, "h:9092")
    with pytest.raises(InvalidRequestError):
        parse_response({"id": 1})


def test_every_protocol_code_has_exactly_one_class():
    assert sorted(errors.ERROR_CLASSES) == sorted(PROTOCOL_CODES)
    for code, cls in errors.ERROR_CLASSES.items():
        rebuilt = error_from_wire(cls("boom").to_wire())
        assert type(rebuilt) is cls and rebuilt.code == code and rebuilt.message == "boom"


def test_timeout_is_unknown_outcome_not_rejection():
    assert issubclass(RequestTimedOutError, UnknownOutcomeError)
    assert not issubclass(RequestTimedOutError, RejectedError)
    assert issubclass(InvalidRequestError, RejectedError)


def test_unknown_wire_code_is_kept():
    error = error_from_wire({"code": "BRAND_NEW", "message": "m", "extra": 1})
    assert type(error) is RaftlogError
    assert (error.code, error.message, error.details) == ("BRAND_NEW", "m", {"extra": 1})
    assert error_from_wire("garbage").code == "UNKNOWN_SERVER_ERROR"


def test_error_to_wire_carries_details():
    wire = NotLeaderError(leader_id=3, leader=None).to_wire()
    assert wire["code"] == "NOT_LEADER" and wire["leader_id"] == 3 and wire["leader"] is None
    with pytest.raises(TypeError):
        RaftlogError("x", code="SPOOF")


class PackageOffsetError(errors.OffsetOutOfRangeError):
    """Stands for a package's own error: a subclass of the registry class of its code."""


def test_package_errors_answer_with_their_registry_code_and_details():
    mine = PackageOffsetError(offset=9, log_start_offset=0, log_end_offset=5)
    assert as_wire_error(mine) is mine
    assert mine.to_wire() == {
        "code": "OFFSET_OUT_OF_RANGE", "message": "offset 9 is outside [0, 5]",
        "offset": 9, "log_start_offset": 0, "log_end_offset": 5,
    }  # fmt: skip
    back = errors.error_from_wire(mine.to_wire())
    assert type(back) is errors.OffsetOutOfRangeError and back.offset == 9


def test_as_wire_error_unwraps_single_groups_and_refuses_bugs():
    timed_out = RequestTimedOutError("late")
    assert as_wire_error(ExceptionGroup("g", [timed_out])) is timed_out
    assert as_wire_error(ValueError("bug")) is None
    assert as_wire_error(ExceptionGroup("g", [ValueError(), timed_out])) is None

    class Foreign(Exception):  # a code attribute alone makes nothing a wire error any more
        code = "OFFSET_OUT_OF_RANGE"

    assert as_wire_error(Foreign()) is None


def test_every_error_is_a_definite_failure_or_an_unknown_outcome():
    for cls in errors.ERROR_CLASSES.values():
        assert issubclass(cls, (errors.RejectedError, errors.UnknownOutcomeError)), cls


def test_protocol_version_is_one():
    assert PROTOCOL_VERSION == 1


def test_only_a_connections_first_bytes_say_what_spoke():
    # A large answer arrives in several reads; the middle of a frame is not judged (it was,
    # and a Spark task's first big fetch was taken for "something else" and dropped).
    frame = encode_frame({"v": 1, "id": 1, "records": bytes(range(256)) * 4096})
    first = FirstBytes()
    assert [first.check(frame[i:i + 4096]) for i in range(0, len(frame), 4096)] == [None] * (
        -(-len(frame) // 4096))
    # The first bytes may come one at a time and are still judged once there are enough.
    http = FirstBytes()
    assert [http.check(bytes([b])) for b in b"HTTP/1.1 400"][:6] == [None] * 3 + ["HTTP", None, None]
    kafka = FirstBytes()
    assert kafka.check(b"\x00\x00") is None
    assert kafka.check(b"\x00\x08\x00\x00\x00\x01") == "a Kafka-protocol listener"
