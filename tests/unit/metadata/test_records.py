"""Metadata records and envelopes round-trip through canonical CBOR, decode strictly with typed errors, and stay small."""

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata.errors import EnvelopeTooLargeError, InvalidRecordError
from raftlog.base.acl import AclBinding
from raftlog.base.sasl import scram_credential
from metadata.records import (
    AddPartitions,
    MAX_ENVELOPE_BYTES,
    Acl,
    RemoveAcl,
    RemoveUserScramCredential,
    UserScramCredential,
    Config,
    Envelope,
    FenceBroker,
    NoOp,
    Partition,
    PartitionChange,
    ProducerIdBlock,
    RegisterBroker,
    RemoveTopic,
    Topic,
    UnfenceBroker,
    decode_envelope,
    decode_record,
    encode_envelope,
    encode_record,
    record_to_obj,
)

TOPIC_ID = "AAECAwQFBgcICQoLDA0ODw"  # 22 chars, like a base64url UUID

ids = st.text("abcdefghijklmnopqrstuvwxyzABCDEF0123456789-_", min_size=1, max_size=22)
broker_ids = st.integers(0, 2**31 - 1)
ports = st.integers(1, 65535)
hosts = st.text(min_size=1, max_size=40)
config_maps = st.dictionaries(st.text(min_size=1, max_size=20), st.text(max_size=20), max_size=5)
replica_sets = st.lists(st.integers(0, 1000), min_size=1, max_size=5, unique=True).map(tuple)


@st.composite
def partitions(draw):
    replicas = draw(replica_sets)
    leader = draw(st.one_of(st.just(-1), st.sampled_from(replicas)))
    return Partition(draw(ids), draw(st.integers(0, 9999)), replicas, draw(st.sampled_from(replicas)),
                     leader, draw(st.integers(0, 2**31 - 1)))


@st.composite
def partition_changes(draw):
    replicas = draw(st.one_of(st.none(), replica_sets))
    leader = draw(st.one_of(st.just(-1), st.sampled_from(replicas) if replicas else st.integers(0, 1000)))
    return PartitionChange(draw(ids), draw(st.integers(0, 9999)), leader, draw(st.integers(0, 2**31 - 1)), replicas)


@st.composite
def configs(draw):
    set_ = draw(config_maps)
    delete = draw(st.lists(st.text(min_size=1, max_size=20).filter(lambda k: k not in set_), max_size=3, unique=True))
    return Config(draw(ids), set_, tuple(delete))


acl_bindings = st.builds(
    AclBinding,
    st.sampled_from(["topic", "group"]),
    st.text("abc-.*", min_size=1, max_size=10),
    st.sampled_from(["literal", "prefixed"]),
    st.sampled_from(["User:*", "User:alice", "User:b,o=b"]),
    st.sampled_from(["*", "10.0.0.1", "::1"]),
    st.sampled_from(["read", "describe", "delete", "all"]),
    st.sampled_from(["allow", "deny"]),
)
SCRAM_CREDS = [scram_credential(m, "pw", iterations=4096) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")]

records = st.one_of(
    st.builds(Acl.of, ids, acl_bindings),
    st.builds(RemoveAcl, ids),
    st.builds(UserScramCredential.of, st.text(min_size=1, max_size=30), st.sampled_from(SCRAM_CREDS)),
    st.builds(RemoveUserScramCredential, st.text(min_size=1, max_size=30), st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"])),
    st.builds(RegisterBroker, broker_ids, ids, hosts, ports, hosts, ports, st.one_of(st.none(), ids)),
    st.builds(FenceBroker, broker_ids, ids),
    st.builds(UnfenceBroker, broker_ids, ids),
    st.builds(Topic, st.text(min_size=1, max_size=30), ids, st.integers(1, 10000), st.booleans(), config_maps),
    st.builds(RemoveTopic, ids),
    st.builds(AddPartitions, ids, st.integers(2, 10000)),
    partitions(),
    partition_changes(),
    configs(),
    st.builds(ProducerIdBlock, broker_ids, st.integers(0, 2**62), st.integers(1, 1_000_000)),
    st.just(NoOp()),
)


@settings(max_examples=300, deadline=None)
@given(records)
def test_record_round_trip_is_canonical(record):
    data = encode_record(record)
    back = decode_record(data)
    assert back == record
    assert encode_record(back) == data
    assert data == cbor2.dumps(cbor2.loads(data), canonical=True)


@settings(max_examples=60, deadline=None)
@given(ids, st.integers(0, 2**40), st.lists(records, max_size=8))
def test_envelope_round_trip(request_id, epoch, recs):
    env = Envelope(request_id, epoch, tuple(recs))
    data = encode_envelope(env)
    assert decode_envelope(data) == env
    assert encode_envelope(decode_envelope(data)) == data


def _obj(record):
    return record_to_obj(record)


BASE_PARTITION = Partition(TOPIC_ID, 0, (1, 2, 3), 1)

BAD_RECORD_OBJECTS = [
    ("not a map", [1, 2], "expected map"),
    ("unknown kind", {"k": "bogus", "v": 1}, "unknown kind"),
    ("kind not str", {"k": 7, "v": 1}, "unknown kind"),
    ("newer version", {**_obj(NoOp()), "v": 2}, "unsupported version"),
    ("version as bool", {**_obj(NoOp()), "v": True}, "unsupported version"),
    ("missing field", {k: v for k, v in _obj(BASE_PARTITION).items() if k != "replicas"}, "missing field"),
    ("extra field", {**_obj(BASE_PARTITION), "isr": [1]}, "unknown field"),
    ("str for int", {**_obj(BASE_PARTITION), "partition": "0"}, "partition: expected int"),
    ("bool for int", {**_obj(BASE_PARTITION), "leader_epoch": True}, "leader_epoch: expected int"),
    ("float for int", {**_obj(BASE_PARTITION), "leader_epoch": 1.0}, "leader_epoch: expected int"),
    ("map for array", {**_obj(BASE_PARTITION), "replicas": {"a": 1}}, "replicas: expected array"),
    ("empty replicas", {**_obj(BASE_PARTITION), "replicas": []}, "replicas"),
    ("duplicate replicas", {**_obj(BASE_PARTITION), "replicas": [1, 1]}, "duplicate broker"),
    ("preferred not replica", {**_obj(BASE_PARTITION), "preferred_leader": 9}, "not in replicas"),
    ("leader not replica", {**_obj(BASE_PARTITION), "leader": 9}, "not in replicas"),
    ("negative partition", {**_obj(BASE_PARTITION), "partition": -1}, "out of range"),
    ("port zero", {**_obj(RegisterBroker(1, "i", "h", 1, "h", 2)), "port": 0}, "port"),
    ("empty host", {**_obj(RegisterBroker(1, "i", "h", 1, "h", 2)), "host": ""}, "host"),
    ("config value not str", {**_obj(Config(TOPIC_ID)), "set": {"retention_ms": 5}}, "set: expected str"),
    ("set and delete overlap", {**_obj(Config(TOPIC_ID)), "set": {"a": "1"}, "delete": ["a"]}, "both set and deleted"),
    ("internal not bool", {**_obj(Topic("t", TOPIC_ID, 1)), "internal": 1}, "internal: expected bool"),
    ("zero partitions", {**_obj(Topic("t", TOPIC_ID, 1)), "partition_count": 0}, "partition_count"),
    ("too many partitions", {**_obj(Topic("t", TOPIC_ID, 1)), "partition_count": 10001}, "partition_count"),
    ("producer block overflow",
     {**_obj(ProducerIdBlock(1, 0, 10)), "first_producer_id": 2**63 - 5}, "past the largest"),
    ("datetime tag", {**_obj(FenceBroker(1, "i")), "incarnation_id": cbor2.CBORTag(1, 0)}, "tag"),
]


@pytest.mark.parametrize("name,obj,why", BAD_RECORD_OBJECTS, ids=[c[0] for c in BAD_RECORD_OBJECTS])
def test_strict_record_decode(name, obj, why):
    with pytest.raises(InvalidRecordError) as info:
        decode_record(cbor2.dumps(obj, canonical=True))
    assert why in str(info.value)
    assert info.value.code == "CORRUPT_MESSAGE"


GOOD_ENVELOPE = {"k": "envelope", "v": 1, "request_id": "1.a.1", "controller_epoch": 1, "records": [_obj(NoOp())]}

BAD_ENVELOPE_BYTES = [
    ("not cbor", b"\xff\xff", "not valid CBOR"),
    ("truncated", cbor2.dumps(GOOD_ENVELOPE)[:-3], "not valid CBOR"),
    ("trailing bytes", cbor2.dumps(GOOD_ENVELOPE) + b"\x00", "trailing bytes"),
    ("a record, not an envelope", encode_record(NoOp()), "is not 'envelope'"),
    ("records not array", cbor2.dumps({**GOOD_ENVELOPE, "records": {}}), "records: expected array"),
    ("missing epoch", cbor2.dumps({k: v for k, v in GOOD_ENVELOPE.items() if k != "controller_epoch"}), "missing"),
    ("negative epoch", cbor2.dumps({**GOOD_ENVELOPE, "controller_epoch": -1}), "out of range"),
    ("empty request id", cbor2.dumps({**GOOD_ENVELOPE, "request_id": ""}), "request_id"),
    ("bad inner record", cbor2.dumps({**GOOD_ENVELOPE, "records": [{"k": "x", "v": 1}]}), "unknown kind"),
    ("too large", b"\x00" * (MAX_ENVELOPE_BYTES + 1), "more than"),
    ("not bytes", "text", "expected bytes"),
]


@pytest.mark.parametrize("name,data,why", BAD_ENVELOPE_BYTES, ids=[c[0] for c in BAD_ENVELOPE_BYTES])
def test_strict_envelope_decode(name, data, why):
    with pytest.raises(InvalidRecordError) as info:
        decode_envelope(data)
    assert why in str(info.value)


def test_constructors_refuse_invalid_records():
    with pytest.raises(InvalidRecordError, match="preferred_leader"):
        Partition(TOPIC_ID, 0, (1, 2), 3)
    with pytest.raises(InvalidRecordError, match="not a record"):
        Envelope("r", 1, ("not a record",))
    with pytest.raises(InvalidRecordError, match="broker_id"):
        FenceBroker(-1, "i")


def test_records_are_immutable():
    topic = Topic("t", TOPIC_ID, 1, configs={"b": "2", "a": "1"})
    assert list(topic.configs) == ["a", "b"]
    with pytest.raises(TypeError):
        topic.configs["c"] = "3"  # type: ignore[index]
    with pytest.raises(AttributeError):
        topic.name = "u"  # type: ignore[misc]


def test_encoder_enforces_max_envelope_bytes():
    big = Envelope("r", 1, tuple(Partition(TOPIC_ID, i, (1, 2, 3), 1) for i in range(400)))
    with pytest.raises(EnvelopeTooLargeError) as info:
        encode_envelope(big)
    assert info.value.code == "MESSAGE_TOO_LARGE"
    assert len(encode_envelope(big, max_bytes=10**6)) > MAX_ENVELOPE_BYTES


def test_encoded_sizes_stay_small():
    """Sizes reported to the lead: see the asserted bounds."""
    topic = Topic("orders", TOPIC_ID, 6, False, {"retention_ms": "86400000"})
    parts = tuple(Partition(TOPIC_ID, p, (1, 2, 3), 1) for p in range(6))
    six = encode_envelope(Envelope("12.AbCdEf.345", 12, (topic, *parts)))
    assert len(six) < 1024  # well under the 4 KiB the quorum wants; measured ~0.85 KiB
    offsets = Topic("__consumer_offsets", TOPIC_ID, 16, True, {"cleanup_policy": "compact"})
    sixteen = encode_envelope(
        Envelope("12.AbCdEf.346", 12, (offsets, *(Partition(TOPIC_ID, p, (1, 2, 3), 1) for p in range(16))))
    )
    assert len(sixteen) < 2048
    register = encode_envelope(Envelope("12.AbCdEf.347", 12, (RegisterBroker(1, "x" * 22, "localhost", 9092, "localhost", 9093),)))
    assert len(register) < 256
    unfence = encode_envelope(Envelope("12.AbCdEf.348", 12, (UnfenceBroker(1, "x" * 22),)))
    assert len(unfence) < 192
    change = encode_envelope(Envelope("12.AbCdEf.349", 12, (PartitionChange(TOPIC_ID, 3, 2, 7),)))
    assert len(change) < 256


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_decode_or_raise_typed(data):
    try:
        env = decode_envelope(data)
    except InvalidRecordError:
        return
    assert isinstance(env, Envelope)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 7))
def test_bit_flips_decode_or_raise_typed(position, bit):
    data = bytearray(encode_envelope(Envelope("r.1", 3, (Topic("t", TOPIC_ID, 2), BASE_PARTITION))))
    data[position % len(data)] ^= 1 << bit
    try:
        env = decode_envelope(bytes(data))
    except InvalidRecordError:
        return
    assert encode_envelope(env) is not None  # whatever decodes re-encodes
