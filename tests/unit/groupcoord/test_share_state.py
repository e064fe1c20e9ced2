"""`__share_group_state` records: share-partition snapshots round-trip, damaged bytes are refused, replay keeps the latest per key."""

import pytest

from groupcoord.errors import InvalidGroupRecordError
from groupcoord.share_state import (
    ShareKey,
    ShareStateImage,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for_share,
)
from partition.share_partition import Acknowledgement, AckType, RecordState, SharePartition, ShareSettings
from raftlog.base import cbor

pytestmark = pytest.mark.unit

KEY = ShareKey("q", "orders", 2)


def window():
    sp = SharePartition(10, ShareSettings(delivery_count_limit=3))
    sp.acquire("m", high_watermark=15, max_records=5, now_ms=0)
    sp.acknowledge("m", [Acknowledgement(11, 12, AckType.ACCEPT), Acknowledgement(14, 14, AckType.REJECT)], now_ms=0)
    return sp


def test_snapshot_round_trips_through_a_record():
    sp = window()
    assert decode_key(encode_key(KEY)) == KEY
    snap = decode_value(encode_value(sp.snapshot()))
    assert snap == sp.snapshot()
    with_epoch = sp.snapshot() | {"leader_epoch": 7}  # the share leader's epoch (fencing)
    assert decode_value(encode_value(with_epoch)) == with_epoch
    back = SharePartition.restore(snap, sp.settings)
    A, K, X = RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
    assert [back.state_of(o) for o in range(10, 15)] == [A, K, K, A, X]  # held locks do not survive
    assert [back.delivery_count(o) for o in (10, 13)] == [1, 1]
    assert back.acquired_count() == 0 and back.start_offset == 10 and back.end_offset == 15


@pytest.mark.parametrize("obj", [
    {"v": 2, "state_epoch": 0, "start_offset": 0, "state_batches": []},
    {"v": 1, "state_epoch": 0, "start_offset": 0, "state_batches": [[1, 1, 0, 1]]},  # gap
    {"v": 1, "state_epoch": 0, "start_offset": 0, "state_batches": [[0, 0, 1, 1]]},  # ACQUIRED is never stored
    {"v": 1, "state_epoch": 0, "start_offset": -1, "state_batches": []},
    {"v": 1, "state_epoch": 0, "start_offset": 0},
])
def test_bad_values_are_refused(obj):
    with pytest.raises(InvalidGroupRecordError):
        decode_value(cbor.dumps(obj))


def test_bad_keys_are_refused():
    for obj in ([2, "q", "t", 0], [1, "", "t", 0], [1, "q", "t", -1], [1, "q", "t"]):
        with pytest.raises(InvalidGroupRecordError):
            decode_key(cbor.dumps(obj))
    with pytest.raises(InvalidGroupRecordError):
        decode_key(b"\xff\x00")


def test_replay_keeps_the_latest_and_tombstones_delete():
    image = ShareStateImage()
    other = ShareKey("q", "orders", 0)
    snap1 = SharePartition(5).snapshot()
    snap2 = window().snapshot()
    image.replay([(encode_key(KEY), encode_value(snap1)), (encode_key(other), encode_value(snap1)),
                  (encode_key(KEY), encode_value(snap2)), (encode_key(other), None)])
    assert image.states == {KEY: snap2}
    assert image.group_states("q") == {KEY: snap2} and image.group_states("x") == {}
    assert 0 <= partition_for_share(KEY) < 16


def test_membership_records_replay_beside_share_partitions():
    from groupcoord.share_state import MembersKey, decode_members, encode_members

    members = {"group_epoch": 4, "members": [{"member_id": "m1", "member_epoch": 4, "subscribed_topic_names": ["orders"],
                                              "rack_id": None, "client_id": "c", "client_host": "/127.0.0.1"}]}
    image = ShareStateImage()
    image.replay([(encode_key(MembersKey("q")), encode_members(members)), (encode_key(KEY), encode_value(window().snapshot()))])
    assert image.get(MembersKey("q")) == members and image.get(KEY) is not None
    assert decode_key(encode_key(MembersKey("q"))) == MembersKey("q")
    assert 0 <= partition_for_share(MembersKey("q")) < 16
    image.replay([(encode_key(MembersKey("q")), None)])
    assert image.get(MembersKey("q")) is None and image.get(KEY) is not None
    for bad in ({"v": 1, "group_epoch": -1, "members": []}, {"v": 1, "group_epoch": 1, "members": [["m", 1, "t", None, "", ""]]},
                {"v": 2, "group_epoch": 1, "members": []}):
        with pytest.raises(InvalidGroupRecordError):
            decode_members(cbor.dumps(bad))
    with pytest.raises(InvalidGroupRecordError):
        decode_key(cbor.dumps([2, ""]))
