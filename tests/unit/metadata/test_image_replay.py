"""Replay turns committed envelopes into immutable images deterministically: per-record rules, all-or-nothing envelopes, dedupe, epochs, snapshots, chunking."""

import random
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata.delta import replay, replay_decoded, replay_envelope
from raftlog.base.errors import FencedLeaderEpochError, TopicAlreadyExistsError
from metadata.errors import InvalidRecordError
from metadata.image import (
    MAX_RECENT_REQUESTS,
    MetadataImage,
    image_from_snapshot,
    image_to_snapshot,
)
from raftlog.base.acl import AclBinding
from raftlog.base.sasl import scram_credential
from metadata.records import (
    Acl,
    AddPartitions,
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
    encode_envelope,
)

TID = "topic-id-orders"
SCRAM_CREDS = [scram_credential(m, "pw", iterations=4096) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")]


def reg(b, inc="a"):
    return RegisterBroker(b, f"{b}{inc}", "localhost", 9000 + b, "localhost", 9100 + b)


def build(*records, epoch=1):
    """Image after one envelope per record (each must apply)."""
    image = MetadataImage.empty()
    for i, r in enumerate(records):
        image = replay_decoded(image, Envelope(f"setup.{i}", epoch, (r,)))
        assert image.request_outcome(f"setup.{i}").ok, (r, image.request_outcome(f"setup.{i}"))
    return image


def base_image():
    """Brokers 1-3 registered (1, 2 unfenced); topic orders with 2 partitions, p0 led by 1 in epoch 3."""
    return build(
        reg(1), reg(2), reg(3), UnfenceBroker(1, "1a"), UnfenceBroker(2, "2a"),
        Topic("orders", TID, 2, False, {"retention_ms": "1000"}),
        Partition(TID, 0, (1, 2, 3), 1, 1, 3),
        Partition(TID, 1, (2, 3, 1), 2),
    )


def outcome_of(image, *records, epoch=1):
    after = replay_decoded(image, Envelope("probe", epoch, records))
    return after, after.request_outcome("probe")


# (name, records, expected code) — rejections, each against base_image()
REJECTIONS = [
    ("fence unknown broker", [FenceBroker(9, "9a")], "BROKER_ID_NOT_REGISTERED"),
    ("unfence old incarnation", [UnfenceBroker(3, "3z")], "STALE_BROKER_EPOCH"),
    ("topic name taken", [Topic("orders", "other-id", 1)], "TOPIC_ALREADY_EXISTS"),
    ("topic id taken", [Topic("other", TID, 1)], "INVALID_REQUEST"),
    ("remove unknown topic", [RemoveTopic("nope")], "UNKNOWN_TOPIC_OR_PARTITION"),
    ("partition of unknown topic", [Partition("nope", 0, (1,), 1)], "UNKNOWN_TOPIC_OR_PARTITION"),
    ("partition beyond count", [Partition(TID, 2, (1,), 1)], "INVALID_REQUEST"),
    ("partition out of order", [Topic("t2", "t2", 3), Partition("t2", 1, (1,), 1)], "INVALID_REQUEST"),
    ("partition on unknown broker", [Topic("t2", "t2", 1), Partition("t2", 0, (1, 7), 1)], "BROKER_ID_NOT_REGISTERED"),
    ("change unknown partition", [PartitionChange(TID, 5, 1, 9)], "UNKNOWN_TOPIC_OR_PARTITION"),
    ("change removed topic", [RemoveTopic(TID), PartitionChange(TID, 0, 1, 9)], "UNKNOWN_TOPIC_OR_PARTITION"),
    ("stale leader epoch", [PartitionChange(TID, 0, 2, 2)], "FENCED_LEADER_EPOCH"),
    ("same epoch, leader -1", [PartitionChange(TID, 0, -1, 3)], "FENCED_LEADER_EPOCH"),
    ("same epoch, other leader", [PartitionChange(TID, 0, 2, 3)], "INVALID_REQUEST"),
    ("leader not a replica", [PartitionChange(TID, 0, 7, 9)], "INVALID_REQUEST"),
    ("replicas unknown broker", [PartitionChange(TID, 0, 8, 9, (8,))], "BROKER_ID_NOT_REGISTERED"),
    ("grow unknown topic", [AddPartitions("nope", 3)], "UNKNOWN_TOPIC_OR_PARTITION"),
    ("grow to fewer partitions", [AddPartitions(TID, 2)], "INVALID_PARTITIONS"),
    ("grow an incomplete topic", [Topic("t2", "t2", 2), Partition("t2", 0, (1,), 1), AddPartitions("t2", 3)],
     "INVALID_REQUEST"),
    ("grown partition out of order", [AddPartitions(TID, 4), Partition(TID, 3, (1,), 1)], "INVALID_REQUEST"),
    ("config of unknown topic", [Config("nope", {"retention_ms": "1"})], "UNKNOWN_TOPIC_OR_PARTITION"),
    ("producer block below next", [ProducerIdBlock(1, 0, 10), ProducerIdBlock(2, 5, 10)], "INVALID_REQUEST"),
    ("producer block unknown broker", [ProducerIdBlock(9, 0, 10)], "BROKER_ID_NOT_REGISTERED"),
]


@pytest.mark.parametrize("name,records,code", REJECTIONS, ids=[r[0] for r in REJECTIONS])
def test_rejected_envelopes_change_nothing_but_the_outcome(name, records, code):
    image = base_image()
    after, outcome = outcome_of(image, NoOp(), *records)
    assert outcome.code == code and not outcome.ok
    assert outcome.error().code == code
    # all or nothing: everything but the outcome log is as before
    assert image_to_snapshot(after) != image_to_snapshot(image)
    assert after.brokers is image.brokers and after.topics is image.topics
    assert after.next_producer_id == image.next_producer_id
    # single-record replay ignores the rejected record: same object back
    assert replay(image, records[-1]) is image or len(records) > 1


def test_applied_record_rules():
    image = base_image()
    # Registration of a new incarnation re-fences; same incarnation keeps the flag.
    assert not image.broker(1).fenced
    same = replay(image, RegisterBroker(1, "1a", "otherhost", 1, "otherhost", 2))
    assert same.broker(1).host == "otherhost" and not same.broker(1).fenced
    assert replay(image, reg(1, "b")).broker(1).fenced
    # Fence/unfence; repeating is a no-op.
    fenced = replay(image, FenceBroker(1, "1a"))
    assert fenced.broker(1).fenced and fenced.unfenced_broker_ids() == (2,)
    assert replay(fenced, FenceBroker(1, "1a")) == fenced
    # Leader reports.
    p1 = replay(image, PartitionChange(TID, 1, 3, 0))  # epoch 0 had no known leader: learnt
    assert p1.partition("orders", 1).leader == 3
    newer = replay(image, PartitionChange(TID, 0, -1, 4))
    assert (newer.partition("orders", 0).leader, newer.partition("orders", 0).leader_epoch) == (-1, 4)
    assert replay(image, PartitionChange(TID, 0, 1, 3)) == image  # same leader, same epoch: no-op
    moved = replay(image, PartitionChange(TID, 0, 3, 5, (3, 2)))
    assert moved.partition("orders", 0).replicas == (3, 2)
    assert moved.partition("orders", 0).preferred_leader == 3  # old preferred 1 left the replicas
    # Configs: delete then set.
    cfg = replay(image, Config(TID, {"segment_ms": "5"}, ("retention_ms",)))
    assert dict(cfg.topic("orders").configs) == {"segment_ms": "5"}
    # Producer ids.
    pid = replay(image, ProducerIdBlock(1, 1000, 1000))
    assert pid.next_producer_id == 2000
    # Remove topic frees the name.
    gone = replay(image, RemoveTopic(TID))
    assert gone.topic("orders") is None and gone.topic_names() == ()


def test_add_partitions_grows_a_topic_that_survives_a_snapshot():
    image = base_image()
    after, outcome = outcome_of(image, AddPartitions(TID, 3), Partition(TID, 2, (3, 1, 2), 3))
    assert outcome.ok
    topic = after.topic("orders")
    assert topic.complete and topic.partition_count == 3 and topic.partitions[:2] == image.topic("orders").partitions
    assert topic.partitions[2].replicas == (3, 1, 2) and dict(topic.configs) == {"retention_ms": "1000"}
    assert image_from_snapshot(image_to_snapshot(after)) == after


def test_image_is_immutable_and_old_images_survive():
    image = base_image()
    with pytest.raises(TypeError):
        image.brokers[7] = None  # type: ignore[index]
    with pytest.raises(AttributeError):
        image.next_producer_id = 5  # type: ignore[misc]
    before = image_to_snapshot(image)
    after = replay(image, PartitionChange(TID, 0, 2, 4))
    assert image_to_snapshot(image) == before
    assert after.partition("orders", 0).leader == 2 and image.partition("orders", 0).leader == 1
    assert after.brokers is image.brokers  # copy-on-write: untouched maps are shared
    assert isinstance(after.topics, MappingProxyType)


def test_queries():
    image = replay(base_image(), PartitionChange(TID, 1, 2, 1))
    assert image.unfenced_broker_ids() == (1, 2) and image.fenced_broker_ids() == (3,)
    assert image.partitions_led_by(1) == (("orders", 0),)
    assert image.partitions_led_by(2) == (("orders", 1),)
    assert image.partitions_assigned_to(3) == (("orders", 0), ("orders", 1))
    assert image.preferred_leader_counts() == {1: 1, 2: 1, 3: 0}
    assert image.topic("orders").complete and image.topic_by_id(TID).name == "orders"
    assert image.partition("orders", 2) is None and image.partition("nope", 0) is None
    assert image.topic("orders").effective_config().retention_ms == 1000


def test_duplicate_request_applies_once():
    image = base_image()
    env = Envelope("req-1", 1, (ProducerIdBlock(1, image.next_producer_id, 1000),))
    once = replay_decoded(image, env)
    assert replay_decoded(once, env) is once
    assert once.next_producer_id == image.next_producer_id + 1000


def test_stale_controller_epoch_rejected_and_epoch_advances():
    image = replay_decoded(base_image(), Envelope("e5", 5, (NoOp(),)))
    assert image.controller_epoch == 5
    stale = replay_decoded(image, Envelope("e4", 4, (ProducerIdBlock(1, 0, 10),)))
    assert stale.request_outcome("e4").code == "STALE_CONTROLLER_EPOCH"
    assert stale.next_producer_id == image.next_producer_id and stale.controller_epoch == 5
    # a rejected envelope of a newer epoch still advances the epoch
    newer = replay_decoded(image, Envelope("e6", 6, (FenceBroker(9, "x"),)))
    assert newer.controller_epoch == 6 and not newer.request_outcome("e6").ok


def test_outcome_errors_map_to_exceptions():
    image = base_image()
    _, outcome = outcome_of(image, Topic("orders", "x", 1))
    assert isinstance(outcome.error(), TopicAlreadyExistsError)
    _, outcome = outcome_of(image, PartitionChange(TID, 0, 2, 1))
    assert isinstance(outcome.error(), FencedLeaderEpochError)
    _, outcome = outcome_of(image, NoOp())
    assert outcome.ok and outcome.error() is None


def test_recent_requests_are_bounded_oldest_first():
    image = MetadataImage.empty()
    for i in range(MAX_RECENT_REQUESTS + 5):
        image = replay_decoded(image, Envelope(f"r{i}", 1, ()))
    assert len(image.recent_requests) == MAX_RECENT_REQUESTS
    assert image.request_outcome("r4") is None and image.request_outcome("r5").ok
    assert list(image.recent_requests)[-1] == f"r{MAX_RECENT_REQUESTS + 4}"


def test_undecodable_envelope_raises():
    with pytest.raises(InvalidRecordError):
        replay_envelope(MetadataImage.empty(), b"\x00junk")


def test_snapshot_round_trip_and_strictness():
    image = replay_decoded(base_image(), Envelope("x", 3, (ProducerIdBlock(2, 0, 7),)))
    data = image_to_snapshot(image)
    back = image_from_snapshot(data)
    assert back == image and image_to_snapshot(back) == data
    assert list(back.recent_requests) == list(image.recent_requests)
    import cbor2

    obj = cbor2.loads(data)
    bad_version = cbor2.dumps({**obj, "v": 2}, canonical=True)
    parts = obj["topics"][0][1]
    bad_order = cbor2.dumps({**obj, "topics": [[obj["topics"][0][0], parts[::-1]]]}, canonical=True)
    no_broker = cbor2.dumps({**obj, "brokers": obj["brokers"][:1]}, canonical=True)
    for bad, why in [(b"junk", "CBOR"), (bad_version, "version"), (bad_order, "partition entry"),
                     (no_broker, "unknown replica"), (cbor2.dumps([1]), "image map")]:
        with pytest.raises(InvalidRecordError, match=why):
            image_from_snapshot(bad)


# --- determinism over random logs -------------------------------------------------------


def random_log(rng: random.Random, length: int) -> list[bytes]:
    """Plausible envelopes (mostly valid given the image so far) mixed with stale, duplicate
    and nonsensical ones. Generation peeks at the image; the log is fixed afterwards."""
    image = MetadataImage.empty()
    log: list[bytes] = []
    epoch = 1
    topic_names = ["a", "b", "c"]
    for n in range(length):
        roll = rng.random()
        if log and roll < 0.07:
            data = rng.choice(log)  # a retried proposal
            log.append(data)
            image = replay_envelope(image, data)
            continue
        if roll < 0.12:
            epoch += 1
        env_epoch = epoch - 1 if rng.random() < 0.05 and epoch > 1 else epoch
        records = []
        for _ in range(rng.randint(1, 3)):
            kind = rng.randrange(11)
            brokers = sorted(image.brokers)
            topics = sorted(image.topics.values(), key=lambda t: t.topic_id)
            b = rng.randint(1, 4)
            inc = f"{b}{rng.choice('xy')}"
            if kind == 0:
                records.append(RegisterBroker(b, inc, "h", 1000 + b, "h", 2000 + b))
            elif kind == 1 and brokers:
                bb = rng.choice(brokers)
                cls = rng.choice([FenceBroker, UnfenceBroker])
                records.append(cls(bb, image.brokers[bb].incarnation_id if rng.random() < 0.8 else inc))
            elif kind == 2:
                name = rng.choice(topic_names)
                tid = f"{name}-{rng.randrange(4)}"
                records.append(Topic(name, tid, rng.randint(1, 3), rng.random() < 0.1, {"retention_ms": str(n)}))
                if brokers:
                    leader = rng.choice(brokers)
                    records.append(Partition(tid, 0, (leader,), leader))
            elif kind == 3 and topics:
                t = rng.choice(topics)
                if brokers and len(t.partitions) < t.partition_count:
                    reps = tuple(rng.sample(brokers, rng.randint(1, len(brokers))))
                    records.append(Partition(t.topic_id, len(t.partitions) + rng.choice([0, 0, 0, 1]), reps, reps[0]))
            elif kind == 4 and topics:
                t = rng.choice(topics)
                if t.partitions:
                    p = rng.choice(t.partitions)
                    leader = rng.choice((-1,) + p.replicas)
                    records.append(PartitionChange(t.topic_id, p.partition, leader, max(0, p.leader_epoch + rng.randint(-1, 2))))
            elif kind == 5 and topics:
                records.append(Config(rng.choice(topics).topic_id, {"segment_ms": str(rng.randint(1, 9))},
                                      ("retention_ms",) if rng.random() < 0.5 else ()))
            elif kind == 6 and topics and rng.random() < 0.3:
                records.append(RemoveTopic(rng.choice(topics).topic_id))
            elif kind == 7 and brokers:
                first = image.next_producer_id + rng.choice([0, 0, 0, -1, 5])
                records.append(ProducerIdBlock(rng.choice(brokers), max(0, first), 1000))
            elif kind == 9:
                if image.acls and rng.random() < 0.4:
                    records.append(RemoveAcl(rng.choice(sorted(image.acls)) if rng.random() < 0.9 else "gone"))
                else:
                    binding = AclBinding("topic", rng.choice(topic_names), rng.choice(["literal", "prefixed"]),
                                         rng.choice(["User:a", "User:*"]), "*", "read", rng.choice(["allow", "deny"]))
                    records.append(Acl.of(f"acl-{rng.randrange(6)}", binding))
            elif kind == 10:
                user = rng.choice(["u1", "u2"])
                if rng.random() < 0.4:
                    records.append(RemoveUserScramCredential(user, rng.choice(SCRAM_CREDS).mechanism))
                else:
                    records.append(UserScramCredential.of(user, rng.choice(SCRAM_CREDS)))
            else:
                records.append(NoOp())
        data = encode_envelope(Envelope(f"{env_epoch}.{n}", env_epoch, tuple(records)))
        log.append(data)
        image = replay_envelope(image, data)
    return log


def replay_chunked(log: list[bytes], cuts: list[int]) -> MetadataImage:
    image = MetadataImage.empty()
    prev = 0
    for cut in sorted(cuts) + [len(log)]:
        for data in log[prev:cut]:
            image = replay_envelope(image, data)
        image = image_from_snapshot(image_to_snapshot(image))  # as if restarted from a snapshot
        prev = cut
    return image


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.lists(st.integers(0, 80), max_size=5))
def test_replay_is_deterministic_however_chunked(seed, cuts):
    log = random_log(random.Random(seed), 80)
    whole = MetadataImage.empty()
    for data in log:
        whole = replay_envelope(whole, data)
    chunked = replay_chunked(log, cuts)
    assert chunked == whole
    assert image_to_snapshot(chunked) == image_to_snapshot(whole)
    assert list(chunked.recent_requests) == list(whole.recent_requests)


def test_random_logs_exercise_both_outcomes():
    log = random_log(random.Random(7), 300)
    image = MetadataImage.empty()
    for data in log:
        image = replay_envelope(image, data)
    codes = {o.code for o in image.recent_requests.values()}
    assert "OK" in codes and len(codes) >= 4, codes
    assert image.brokers and image.topics and image.acls and image.scram_credentials
    assert {"DUPLICATE_RESOURCE", "RESOURCE_NOT_FOUND"} <= codes, codes
