"""ACL and SCRAM-credential records replay into the image by their rules, snapshot and round-trip strictly, hold no password, and leave logs and snapshots written before them readable byte for byte."""

import itertools

import cbor2
import pytest

from metadata.delta import replay_decoded, replay_envelope
from metadata.errors import InvalidRecordError
from metadata.image import MetadataImage, image_from_snapshot, image_to_snapshot
from metadata.records import (
    Acl,
    Envelope,
    RemoveAcl,
    RemoveUserScramCredential,
    UserScramCredential,
    decode_record,
    encode_record,
    record_from_obj,
    record_to_obj,
)
from raftlog.base.acl import AclBinding
from raftlog.base.sasl import scram_credential

PASSWORD = "correct-horse-battery-staple"
CRED_512 = scram_credential("SCRAM-SHA-512", PASSWORD, iterations=4096)
CRED_256 = scram_credential("SCRAM-SHA-256", PASSWORD, iterations=4096)
READ = AclBinding("topic", "orders", "literal", "User:alice", "*", "read", "allow")
DENY = AclBinding("topic", "pay", "prefixed", "User:*", "10.0.0.9", "write", "deny")

# Written by the code before these kinds existed (main at 9091b0a, before the Kafka listener's
# broker fields too): one envelope registering a broker and creating a topic, and the snapshot
# of the image after it.
OLD_ENVELOPE = bytes.fromhex(
    "a5616b68656e76656c6f7065617601677265636f72647384a9616b6f72656769737465725f62726f6b6572617601"
    "64686f7374616864706f7274192385647261636bf66962726f6b65725f69640169706565725f686f737461686970"
    "6565725f706f72741923866e696e6361726e6174696f6e5f6964623161a4616b6e756e66656e63655f62726f6b65"
    "726176016962726f6b65725f6964016e696e6361726e6174696f6e5f6964623161a7616b65746f70696361760164"
    "6e616d65666f726465727367636f6e66696773a16c726574656e74696f6e5f6d73643130303068696e7465726e61"
    "6cf468746f7069635f6964657469642d316f706172746974696f6e5f636f756e7401a8616b69706172746974696f"
    "6e617601666c656164657220687265706c69636173810168746f7069635f6964657469642d316970617274697469"
    "6f6e006c6c65616465725f65706f636800707072656665727265645f6c6561646572016a726571756573745f6964"
    "656f6c642e3170636f6e74726f6c6c65725f65706f636802"
)
OLD_SNAPSHOT = bytes.fromhex(
    "a7616b65696d61676561760166746f706963738182a7616b65746f706963617601646e616d65666f726465727367"
    "636f6e66696773a16c726574656e74696f6e5f6d73643130303068696e7465726e616cf468746f7069635f696465"
    "7469642d316f706172746974696f6e5f636f756e740181a8616b69706172746974696f6e617601666c6561646572"
    "20687265706c69636173810168746f7069635f6964657469642d3169706172746974696f6e006c6c65616465725f"
    "65706f636800707072656665727265645f6c6561646572016762726f6b6572738182a9616b6f7265676973746572"
    "5f62726f6b657261760164686f7374616864706f7274192385647261636bf66962726f6b65725f69640169706565"
    "725f686f7374616869706565725f706f72741923866e696e6361726e6174696f6e5f6964623161f46f726563656e"
    "745f72657175657374738183656f6c642e31624f4b6070636f6e74726f6c6c65725f65706f636802706e6578745f"
    "70726f64756365725f696400"
)


_ids = itertools.count()


def apply(image, *records):
    request_id = f"r{next(_ids)}"
    after = replay_decoded(image, Envelope(request_id, 1, records))
    return after, after.request_outcome(request_id)


def test_logs_and_snapshots_written_before_still_replay():
    image = replay_envelope(MetadataImage.empty(), OLD_ENVELOPE)
    assert image.topic("orders") is not None and image.acls == {} and image.scram_credentials == {}
    assert image_from_snapshot(OLD_SNAPSHOT) == image
    # No security sections while they are empty: such a snapshot reads on a node without them.
    snapshot = cbor2.loads(image_to_snapshot(image))
    assert "acls" not in snapshot and "scram_credentials" not in snapshot


def test_acl_records_add_remove_and_refuse_duplicates():
    image, outcome = apply(MetadataImage.empty(), Acl.of("a1", READ), Acl.of("a2", DENY))
    assert outcome.ok and image.acl_bindings() == (("a1", READ), ("a2", DENY))
    other = AclBinding("group", "g", "literal", "User:bob", "*", "read", "allow")
    _, outcome = apply(image, Acl.of("a1", other))
    assert outcome.code == "INVALID_REQUEST"  # id taken
    _, outcome = apply(image, Acl.of("a3", READ))
    assert outcome.code == "DUPLICATE_RESOURCE"
    _, outcome = apply(image, RemoveAcl("nope"))
    assert outcome.code == "RESOURCE_NOT_FOUND"
    after, outcome = apply(image, RemoveAcl("a1"))
    assert outcome.ok and after.acl_bindings() == (("a2", DENY),)
    assert image.acl_bindings() == (("a1", READ), ("a2", DENY))  # the old image is untouched


def test_all_or_nothing_with_other_records():
    image, outcome = apply(MetadataImage.empty(), Acl.of("a1", READ), RemoveAcl("missing"))
    assert outcome.code == "RESOURCE_NOT_FOUND" and image.acls == {}


def test_scram_records_set_replace_and_remove():
    image, outcome = apply(
        MetadataImage.empty(),
        UserScramCredential.of("alice", CRED_512),
        UserScramCredential.of("alice", CRED_256),
        UserScramCredential.of("bob", CRED_256),
    )
    assert outcome.ok and image.scram_users() == ("alice", "bob")
    assert image.scram_credential("alice", "SCRAM-SHA-512") == CRED_512
    newer = scram_credential("SCRAM-SHA-512", "another-password", iterations=4096)
    replaced, outcome = apply(image, UserScramCredential.of("alice", newer))
    assert outcome.ok and replaced.scram_credential("alice", "SCRAM-SHA-512") == newer
    _, outcome = apply(image, RemoveUserScramCredential("carol", "SCRAM-SHA-256"))
    assert outcome.code == "RESOURCE_NOT_FOUND"
    gone, outcome = apply(image, RemoveUserScramCredential("bob", "SCRAM-SHA-256"))
    assert outcome.ok and gone.scram_users() == ("alice",) and gone.scram_credential("bob", "SCRAM-SHA-256") is None
    one_left, _ = apply(image, RemoveUserScramCredential("alice", "SCRAM-SHA-512"))
    assert one_left.scram_credential("alice", "SCRAM-SHA-256") == CRED_256


def test_security_sections_snapshot_and_come_back():
    image, _ = apply(
        MetadataImage.empty(), Acl.of("a1", READ), Acl.of("a2", DENY),
        UserScramCredential.of("alice", CRED_512), UserScramCredential.of("alice", CRED_256),
    )
    data = image_to_snapshot(image)
    back = image_from_snapshot(data)
    assert back == image and image_to_snapshot(back) == data
    assert PASSWORD.encode() not in data
    obj = cbor2.loads(data)
    twice = cbor2.dumps({**obj, "acls": obj["acls"] + [{**obj["acls"][0], "acl_id": "a9"}]}, canonical=True)
    with pytest.raises(InvalidRecordError, match="twice"):
        image_from_snapshot(twice)
    not_list = cbor2.dumps({**obj, "scram_credentials": {"x": 1}}, canonical=True)
    with pytest.raises(InvalidRecordError, match="array"):
        image_from_snapshot(not_list)
    unknown = cbor2.dumps({**obj, "passwords": []}, canonical=True)
    with pytest.raises(InvalidRecordError, match="image map"):
        image_from_snapshot(unknown)


def test_records_round_trip_and_normalise():
    record = Acl("a1", "Topic", "orders", "LITERAL", "User:alice", "*", "Read", "ALLOW")
    assert record.resource_type == "topic" and record.operation == "read" and record.binding == READ
    for r in (record, RemoveAcl("a1"), UserScramCredential.of("alice", CRED_512), RemoveUserScramCredential("alice", "SCRAM-SHA-512")):
        assert decode_record(encode_record(r)) == r
    assert "hidden" in repr(UserScramCredential.of("alice", CRED_512))


@pytest.mark.parametrize(
    "obj, why",
    [
        ({**record_to_obj(Acl.of("a", READ)), "principal": "alice"}, "principal"),
        ({**record_to_obj(Acl.of("a", READ)), "operation": "cluster_action"}, "operation"),
        ({**record_to_obj(Acl.of("a", READ)), "host": 5}, "host"),
        ({**record_to_obj(UserScramCredential.of("u", CRED_512)), "iterations": 10}, "iterations"),
        ({**record_to_obj(UserScramCredential.of("u", CRED_512)), "stored_key": b"short"}, "stored_key"),
        ({**record_to_obj(UserScramCredential.of("u", CRED_512)), "salt": "text"}, "salt"),
        ({**record_to_obj(UserScramCredential.of("u", CRED_512)), "mechanism": "SCRAM-SHA-1"}, "mechanism"),
        ({**record_to_obj(UserScramCredential.of("u", CRED_512)), "password": "x"}, "unknown field"),
    ],
)
def test_strict_decode_of_security_records(obj, why):
    with pytest.raises(InvalidRecordError, match=why):
        record_from_obj(obj)
