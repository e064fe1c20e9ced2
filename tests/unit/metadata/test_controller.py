"""Controller decisions on an injected clock: placement balance, fencing timelines, validation errors, leadership, producer ids, internal topics."""

import base64
import random

import pytest

from metadata.features import FIRST_TERM
from metadata.controller import (
    MAX_LEADER_REPORTS,
    OFFSETS_TOPIC,
    PRODUCER_ID_BLOCK_SIZE,
    Controller,
    ControllerResult,
    LeaderReport,
)
from metadata.delta import replay_decoded, replay_envelope
from raftlog.base.errors import (
    BrokerIdNotRegisteredError,
    DuplicateBrokerRegistrationError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    NotControllerError,
    StaleBrokerEpochError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from metadata.image import MetadataImage
from metadata.records import (
    MAX_ENVELOPE_BYTES,
    FenceBroker,
    NoOp,
    Partition,
    PartitionChange,
    ProducerIdBlock,
    RegisterBroker,
    Topic,
    UnfenceBroker,
    encode_envelope,
)


class Cluster:
    """A controller plus the committed image, with a manual clock. `commit` replays a
    result's envelopes through bytes, as the quorum would, and feeds the image back."""

    def __init__(self, brokers=0, epoch=1, seed=0, capabilities=(), **kwargs):
        self.capabilities = capabilities  # what the brokers' registrations and heartbeats say
        self.now_ms = 0
        self.image = MetadataImage.empty()
        kwargs.setdefault("random_bytes", random.Random(seed).randbytes)  # repeatable ids
        self.c = Controller(self.image, epoch, self.now_ms, random.Random(seed), **kwargs)
        self.commit(self.c.noop())
        for b in range(1, brokers + 1):
            self.add_broker(b)

    def commit(self, result: ControllerResult):
        for env in result.envelopes:
            self.image = replay_envelope(self.image, encode_envelope(env))
        self.c.update_image(self.image, self.now_ms)
        for env in result.envelopes:
            assert self.image.request_outcome(env.request_id).ok, self.image.request_outcome(env.request_id)
        return result.response

    def add_broker(self, b, inc=None):
        inc = inc or f"inc-{b}"
        self.commit(self.c.register_broker(b, inc, "localhost", 9000 + b, "localhost", 9100 + b, now_ms=self.now_ms,
                                           capabilities=self.capabilities))
        self.commit(self.c.heartbeat(b, inc, now_ms=self.now_ms, capabilities=self.capabilities))
        assert not self.image.broker(b).fenced

    def heartbeat_all(self):
        for b, reg in self.image.brokers.items():
            self.commit(self.c.heartbeat(b, reg.incarnation_id, now_ms=self.now_ms))


def kinds(result):
    return [type(r).__name__ for r in result.records]


# --- placement --------------------------------------------------------------------------


def test_six_partitions_rf3_three_brokers_two_preferred_each():
    cl = Cluster(brokers=3, capabilities=[FIRST_TERM])  # the named first leader's path
    resp = cl.commit(cl.c.create_topic("orders", 6, 3, now_ms=0))
    preferred = [p.preferred_leader for p in resp.partitions]
    assert sorted(preferred) == [1, 1, 2, 2, 3, 3]
    for p in resp.partitions:
        assert len(set(p.replicas)) == 3 and p.replicas[0] == p.preferred_leader
        # The first leader is named, not yet confirmed (partition/raft.py "First term").
        assert (p.leader, p.leader_epoch) == (p.preferred_leader, 0)
    assert (cl.image.partition("orders", 0).leader, cl.image.partition("orders", 0).leader_epoch) == (1, 0)
    # Its report of leading epoch 1 confirms it.
    cl.commit(cl.c.partition_leader_report("orders", 0, 1, 1, now_ms=0))
    assert (cl.image.partition("orders", 0).leader, cl.image.partition("orders", 0).leader_epoch) == (1, 1)
    assert cl.image.replica_counts() == {1: 6, 2: 6, 3: 6}
    topic = cl.image.topic("orders")
    assert topic.complete and [p.replicas for p in topic.partitions] == [p.replicas for p in resp.partitions]


@pytest.mark.parametrize(
    "brokers,topics",
    [
        (4, [(3, 2), (3, 2), (3, 2), (5, 3), (1, 1), (7, 3)]),
        (4, [(1, 1)] * 9),
        (3, [(2, 1), (4, 3), (5, 2), (16, 3)]),
        (5, [(6, 3), (6, 3), (6, 3), (2, 2)]),
    ],
)
def test_preferred_leaders_balance_across_topics(brokers, topics):
    cl = Cluster(brokers=brokers)
    for i, (partitions, rf) in enumerate(topics):
        cl.commit(cl.c.create_topic(f"t{i}", partitions, rf, now_ms=0))
        counts = cl.image.preferred_leader_counts().values()
        assert max(counts) - min(counts) <= 1, cl.image.preferred_leader_counts()


def test_placement_uses_only_unfenced_brokers():
    cl = Cluster(brokers=4)
    cl.commit(ControllerResult((cl.c._envelope([FenceBroker(2, "inc-2")]),), None))
    resp = cl.commit(cl.c.create_topic("t", 6, 3, now_ms=0))
    assert all(2 not in p.replicas for p in resp.partitions)


# --- brokers: fencing timelines ---------------------------------------------------------


def test_registration_then_heartbeat_unfences_once():
    cl = Cluster()
    r = cl.c.register_broker(1, "i1", "h", 1, "h", 2, now_ms=0)
    assert kinds(r) == ["RegisterBroker"]
    # heartbeat while the registration is in flight: accepted, still fenced, nothing proposed
    hb = cl.c.heartbeat(1, "i1", now_ms=10)
    assert hb.response.fenced and hb.envelopes == ()
    cl.commit(r)
    assert cl.image.broker(1).fenced
    first = cl.c.heartbeat(1, "i1", now_ms=20)
    assert kinds(first) == ["UnfenceBroker"] and first.response.fenced
    again = cl.c.heartbeat(1, "i1", now_ms=30)  # unfence in flight: not proposed twice
    assert again.envelopes == ()
    cl.commit(first)
    assert not cl.image.broker(1).fenced
    assert cl.c.heartbeat(1, "i1", now_ms=40).response.fenced is False
    # a retried registration of the same incarnation writes nothing
    assert cl.c.register_broker(1, "i1", "h", 1, "h", 2, now_ms=50).envelopes == ()


# (time_ms, action, expected record kinds) — session 9000 ms, broker 1 heartbeats at 0
FENCING_TIMELINE = [
    (5000, "tick", []),
    (9000, "tick", []),  # silent exactly session_timeout_ms: not yet
    (9001, "tick", ["FenceBroker"]),
    (9002, "tick", []),  # the fence is in flight: not proposed twice
    (9003, "commit", []),
    (9500, "tick", []),  # already fenced
    (9600, "heartbeat", ["UnfenceBroker"]),
    (9601, "commit", []),
    (18000, "tick", []),
    (18601, "tick", ["FenceBroker"]),
]


def test_fencing_timeline():
    cl = Cluster(brokers=2)
    pending = None
    for t, action, expected in FENCING_TIMELINE:
        cl.now_ms = t
        # broker 2 keeps heartbeating throughout and must never be fenced
        cl.commit(cl.c.heartbeat(2, "inc-2", now_ms=t))
        if action == "tick":
            result = cl.c.tick(t)
        elif action == "heartbeat":
            result = cl.c.heartbeat(1, "inc-1", now_ms=t)
        else:
            result = ControllerResult((), None)
            cl.commit(pending)
        assert kinds(result) == expected, (t, action)
        if expected:
            assert all(r.broker_id == 1 for r in result.records)
            pending = result
    assert cl.image.unfenced_broker_ids() == (1, 2)  # the last fence is still uncommitted


def test_new_controller_gives_every_broker_a_fresh_session():
    cl = Cluster(brokers=2)
    cl.now_ms = 60_000
    c2 = Controller(cl.image, 2, cl.now_ms, random.Random(1))
    assert c2.tick(cl.now_ms + 9000).envelopes == ()
    assert kinds(c2.tick(cl.now_ms + 9001)) == ["FenceBroker", "FenceBroker"]
    assert len(c2.tick(cl.now_ms + 9001).envelopes) == 0  # pending


def test_duplicate_registration_refused_while_old_incarnation_lives():
    cl = Cluster(brokers=1)
    cl.now_ms = 3000
    with pytest.raises(DuplicateBrokerRegistrationError, match="live incarnation inc-1"):
        cl.c.register_broker(1, "new", "h", 1, "h", 2, now_ms=3000)
    # after the session expires the new incarnation may register; it starts fenced
    cl.now_ms = 9001
    cl.commit(cl.c.register_broker(1, "new", "h", 1, "h", 2, now_ms=9001))
    assert cl.image.broker(1).incarnation_id == "new" and cl.image.broker(1).fenced
    with pytest.raises(StaleBrokerEpochError):
        cl.c.heartbeat(1, "inc-1", now_ms=9002)
    with pytest.raises(BrokerIdNotRegisteredError):
        cl.c.heartbeat(7, "x", now_ms=9002)


def test_the_next_incarnation_on_the_same_data_dir_replaces_the_old_at_once():
    cl = Cluster(brokers=1)
    cl.now_ms = 3000
    with pytest.raises(DuplicateBrokerRegistrationError):  # names another predecessor
        cl.c.register_broker(1, "new", "h", 1, "h", 2, now_ms=3000, previous_incarnation_id="inc-0")
    cl.commit(cl.c.register_broker(1, "new", "h", 1, "h", 2, now_ms=3000, previous_incarnation_id="inc-1"))
    assert cl.image.broker(1).incarnation_id == "new" and cl.image.broker(1).fenced
    with pytest.raises(StaleBrokerEpochError):  # the old process, were it alive, must stop
        cl.c.heartbeat(1, "inc-1", now_ms=3001)


def test_controlled_shutdown_fences_and_allows_immediate_restart():
    cl = Cluster(brokers=1)
    result = cl.c.controlled_shutdown(1, "inc-1", now_ms=100)
    assert kinds(result) == ["FenceBroker"]
    cl.commit(result)
    hb = cl.c.heartbeat(1, "inc-1", now_ms=200)
    assert hb.envelopes == () and hb.response.shutting_down and hb.response.fenced
    cl.commit(cl.c.register_broker(1, "inc-1b", "h", 1, "h", 2, now_ms=300))
    cl.commit(cl.c.heartbeat(1, "inc-1b", now_ms=400))
    assert cl.image.unfenced_broker_ids() == (1,)


@pytest.mark.parametrize(
    "args,why",
    [
        ((-1, "i", "h", 1, "h", 2), "broker_id"),
        ((1, "", "h", 1, "h", 2), "incarnation_id"),
        ((1, "i", "", 1, "h", 2), "host"),
        ((1, "i", "h", 70000, "h", 2), "port"),
        ((1, "i", "h", 1, "h", True), "peer_port"),
    ],
)
def test_register_broker_validation(args, why):
    with pytest.raises(InvalidRequestError, match=why):
        Cluster().c.register_broker(*args, now_ms=0)


# --- topics: validation -----------------------------------------------------------------


CREATE_ERRORS = [
    (("", 1, 1), InvalidTopicError, "non-empty"),
    ((".", 1, 1), InvalidTopicError, "cannot be"),
    (("..", 1, 1), InvalidTopicError, "cannot be"),
    (("a" * 250, 1, 1), InvalidTopicError, "at most 249"),
    (("bad name", 1, 1), InvalidTopicError, "may contain only"),
    (("caf\u00e9", 1, 1), InvalidTopicError, "may contain only"),
    ((7, 1, 1), InvalidTopicError, "string"),
    ((OFFSETS_TOPIC, 1, 1), InvalidTopicError, "reserved"),
    (("orders", 1, 1), TopicAlreadyExistsError, "already exists"),
    (("my_topic", 1, 1), InvalidTopicError, "collides with existing topic 'my.topic'"),
    (("t", 0, 1), InvalidPartitionsError, "1..10000"),
    (("t", 10001, 1), InvalidPartitionsError, "1..10000"),
    (("t", "3", 1), InvalidPartitionsError, "1..10000"),
    (("t", True, 1), InvalidPartitionsError, "1..10000"),
    (("t", 3, 0), InvalidReplicationFactorError, "3 live (unfenced) broker(s)"),
    (("t", 3, 4), InvalidReplicationFactorError, "3 live (unfenced) broker(s), got 4"),
    (("t", 3, "3"), InvalidReplicationFactorError, "got '3'"),
    (("t", 3, 3, {"retention.msec": "1"}), InvalidConfigError, "retention.msec"),
    (("t", 3, 3, {"segment_bytes": "10"}), InvalidConfigError, "segment_bytes"),
    (("t", 3, 3, {"cleanup_policy": "never"}), InvalidConfigError, "cleanup_policy"),
]


@pytest.mark.parametrize("args,error,why", CREATE_ERRORS, ids=[f"{e[1].__name__}-{i}" for i, e in enumerate(CREATE_ERRORS)])
def test_create_topic_validation(args, error, why):
    cl = Cluster(brokers=3)
    cl.commit(cl.c.create_topic("orders", 1, 1, now_ms=0))
    cl.commit(cl.c.create_topic("my.topic", 1, 1, now_ms=0))
    with pytest.raises(error) as info:
        cl.c.create_topic(*args, now_ms=0)
    assert why in str(info.value)
    assert info.value.code == error.code
    if error is InvalidConfigError:
        assert info.value.key == why


def test_create_in_flight_blocks_a_second_create_and_replay_settles_races():
    cl = Cluster(brokers=3)
    first = cl.c.create_topic("t", 2, 1, now_ms=0)
    with pytest.raises(TopicAlreadyExistsError):
        cl.c.create_topic("t", 2, 1, now_ms=1)
    # another controller (say, after a failover) decided the same name on the same image
    other = Controller(cl.image, 1, 0, random.Random(99))
    race = other.create_topic("t", 3, 1, now_ms=0)
    cl.commit(first)
    image = replay_decoded(cl.image, race.envelopes[0])
    outcome = image.request_outcome(race.envelopes[0].request_id)
    assert outcome.code == "TOPIC_ALREADY_EXISTS" and isinstance(outcome.error(), TopicAlreadyExistsError)
    assert len(image.topic("t").partitions) == 2


def test_delete_topic_and_recreate():
    cl = Cluster(brokers=1)
    resp = cl.commit(cl.c.create_topic("t", 1, 1, now_ms=0))
    result = cl.c.delete_topic("t", now_ms=0)
    assert result.response == resp.topic_id
    with pytest.raises(UnknownTopicOrPartitionError):
        cl.c.delete_topic("t", now_ms=1)  # delete in flight
    cl.commit(result)
    with pytest.raises(UnknownTopicOrPartitionError):
        cl.c.delete_topic("t", now_ms=2)
    again = cl.commit(cl.c.create_topic("t", 1, 1, now_ms=3))
    assert again.topic_id != resp.topic_id


def test_create_partitions_grows_a_topic_in_one_envelope_placed_for_balance():
    cl = Cluster(brokers=3)
    old = cl.commit(cl.c.create_topic("t", 2, 2, now_ms=0))
    result = cl.c.create_partitions("t", 5, now_ms=0)
    assert kinds(result) == ["AddPartitions", "Partition", "Partition", "Partition"]
    assert len(result.envelopes) == 1  # atomic: never an incomplete (hidden) topic
    with pytest.raises(InvalidPartitionsError, match="in flight"):
        cl.c.create_partitions("t", 6, now_ms=0)
    new = cl.commit(result)
    topic = cl.image.topic("t")
    assert topic.complete and topic.partition_count == 5 and topic.topic_id == old.topic_id
    assert [p.partition for p in new.partitions] == [2, 3, 4]
    assert topic.partitions[:2] == tuple(old.partitions)  # existing partitions untouched
    assert all(len(p.replicas) == 2 for p in topic.partitions)  # the topic's RF
    assert sorted(p.preferred_leader for p in topic.partitions) in ([1, 1, 2, 2, 3], [1, 2, 2, 3, 3],
                                                                     [1, 1, 2, 3, 3])


@pytest.mark.parametrize(
    "name, count, error, why",
    [
        ("t", 2, InvalidPartitionsError, "must be 3"),  # not more than now
        ("t", 1, InvalidPartitionsError, "must be 3"),
        ("t", 10_001, InvalidPartitionsError, "10000"),
        ("nope", 3, UnknownTopicOrPartitionError, "unknown"),
        (OFFSETS_TOPIC, 20, InvalidTopicError, "internal"),
    ],
)
def test_create_partitions_validation(name, count, error, why):
    cl = Cluster(brokers=3, offsets_replication_factor=1)
    cl.commit(cl.c.create_topic("t", 2, 3, now_ms=0))
    cl.commit(cl.c.ensure_internal_topics(0))
    with pytest.raises(error, match=why):
        cl.c.create_partitions(name, count, now_ms=0)


def test_create_partitions_needs_the_topics_replication_factor_and_validate_only_writes_nothing():
    cl = Cluster(brokers=3)
    cl.commit(cl.c.create_topic("t", 1, 3, now_ms=0))
    checked = cl.c.create_partitions("t", 4, validate_only=True, now_ms=0)
    assert checked.envelopes == () and len(checked.response.partitions) == 3
    cl.commit(cl.c.controlled_shutdown(3, "inc-3", now_ms=0))
    with pytest.raises(InvalidReplicationFactorError):
        cl.c.create_partitions("t", 2, now_ms=0)


def test_create_partitions_too_many_for_one_envelope_is_refused():
    cl = Cluster(brokers=3, max_envelope_bytes=4096)
    cl.commit(cl.c.create_topic("t", 1, 3, now_ms=0))
    with pytest.raises(InvalidPartitionsError, match="at most about"):
        cl.c.create_partitions("t", 200, now_ms=0)
    cl.commit(cl.c.create_partitions("t", 20, now_ms=0))
    assert cl.image.topic("t").partition_count == 20


def test_alter_and_describe_configs():
    cl = Cluster(brokers=1)
    cl.commit(cl.c.create_topic("t", 1, 1, {"retention_ms": "1000"}, now_ms=0))
    after = cl.commit(cl.c.alter_configs("t", {"segment_bytes": "8192"}, ["retention_ms"], now_ms=0))
    assert after == {"segment_bytes": "8192"} == dict(cl.image.topic("t").configs)
    entries = {e.name: e for e in cl.c.describe_configs("t")}
    assert entries["retention_ms"].is_default and not entries["segment_bytes"].is_default
    assert cl.c.alter_configs("t", {"segment_bytes": "8192"}, now_ms=0).envelopes == ()  # no change
    with pytest.raises(InvalidConfigError) as info:
        cl.c.alter_configs("t", {"flush_policy": "maybe"}, now_ms=0)
    assert info.value.key == "flush_policy"
    with pytest.raises(InvalidConfigError, match="bogus"):
        cl.c.alter_configs("t", delete=["bogus"], now_ms=0)
    with pytest.raises(InvalidRequestError, match="both set and deleted"):
        cl.c.alter_configs("t", {"segment_ms": "5"}, ["segment_ms"], now_ms=0)
    with pytest.raises(UnknownTopicOrPartitionError):
        cl.c.alter_configs("nope", {"segment_ms": "5"}, now_ms=0)
    assert cl.c.list_topics() == ("t",) and cl.c.describe_topic("t").name == "t"


def test_internal_topic_cannot_be_deleted():
    cl = Cluster(brokers=1, offsets_replication_factor=1)
    cl.commit(cl.c.ensure_internal_topics(0))
    with pytest.raises(InvalidTopicError, match="internal"):
        cl.c.delete_topic(OFFSETS_TOPIC, now_ms=0)
    assert cl.c.list_topics() == () and cl.c.list_topics(include_internal=True) == (OFFSETS_TOPIC,)


# --- big topics -------------------------------------------------------------------------


def test_big_topic_is_split_and_hidden_until_complete():
    cl = Cluster(brokers=3, max_envelope_bytes=4096)
    result = cl.c.create_topic("big", 200, 3, now_ms=0)
    assert len(result.envelopes) > 1
    assert isinstance(result.envelopes[0].records[0], Topic)
    assert all(len(encode_envelope(e)) <= 4096 for e in result.envelopes)
    image = replay_decoded(cl.image, result.envelopes[0])
    cl.c.update_image(image, 0)
    assert not image.topic("big").complete
    with pytest.raises(UnknownTopicOrPartitionError):
        cl.c.describe_topic("big")
    assert cl.c.list_topics() == ()
    # the rest of the envelopes are lost (leader crash); a new controller completes the topic
    c2 = Controller(image, 2, 0, random.Random(5), max_envelope_bytes=4096)
    repair = c2.tick(0)
    assert {type(r) for r in repair.records} == {Partition}
    for env in repair.envelopes:
        image = replay_decoded(image, env)
    assert image.topic("big").complete and len(image.topic("big").partitions) == 200
    assert all(len(p.replicas) == 3 for p in image.topic("big").partitions)


def test_ten_thousand_partitions_fit_default_envelopes():
    cl = Cluster(brokers=3)
    result = cl.c.create_topic("huge", 10_000, 3, now_ms=0)
    assert all(len(encode_envelope(e)) <= MAX_ENVELOPE_BYTES for e in result.envelopes)
    cl.commit(result)
    assert cl.image.topic("huge").complete
    counts = cl.image.preferred_leader_counts()
    assert max(counts.values()) - min(counts.values()) <= 1


# --- the first leader's naming, gated on what the brokers support -------------------------


def test_first_leaders_are_named_only_when_every_replica_said_it_supports_them():
    """Rolling upgrade (metadata/features.py "Broker capabilities"): a broker of an older
    release would run its own election for epoch 1, so a new partition's record names its
    first leader only when every replica's registered incarnation said `first_term`."""
    cl = Cluster(brokers=3)  # none said it (an older release's brokers)
    old = cl.commit(cl.c.create_topic("old", 3, 3, now_ms=0))
    assert all((p.leader, p.leader_epoch) == (-1, 0) for p in old.partitions)
    for b in (1, 2):  # two upgraded: RF 3 partitions still have an older replica
        cl.commit(cl.c.heartbeat(b, f"inc-{b}", now_ms=0, capabilities=[FIRST_TERM, "later-one"]))
    mixed = cl.commit(cl.c.create_topic("mixed", 3, 3, now_ms=0))
    assert all(p.leader == -1 for p in mixed.partitions)
    rf2 = cl.commit(cl.c.create_topic("rf2", 1, 2, assignments=[[2, 1]], now_ms=0))
    assert [(p.leader, p.leader_epoch) for p in rf2.partitions] == [(2, 0)]  # its replicas both said it
    cl.commit(cl.c.heartbeat(3, "inc-3", now_ms=0, capabilities=[FIRST_TERM]))
    new = cl.commit(cl.c.create_topic("new", 3, 3, now_ms=0))
    assert all((p.leader, p.leader_epoch) == (p.preferred_leader, 0) for p in new.partitions)
    grown = cl.commit(cl.c.create_partitions("old", 4, now_ms=0))
    assert [(p.leader, p.leader_epoch) for p in grown.partitions] == [(grown.partitions[0].preferred_leader, 0)]
    # Broker 3 downgraded: its next heartbeat says nothing, and it counts as not supporting.
    cl.commit(cl.c.heartbeat(3, "inc-3", now_ms=0))
    assert all(p.leader == -1 for p in cl.commit(cl.c.create_topic("down", 3, 3, now_ms=0)).partitions)
    # A new incarnation counts by what it said itself, not by what the old one said.
    cl.commit(cl.c.heartbeat(3, "inc-3", now_ms=0, capabilities=[FIRST_TERM]))
    cl.commit(cl.c.register_broker(3, "inc-3b", "localhost", 9003, "localhost", 9103, now_ms=0,
                                   previous_incarnation_id="inc-3"))
    cl.commit(cl.c.heartbeat(3, "inc-3b", now_ms=0))
    assert all(p.leader == -1 for p in cl.commit(cl.c.create_topic("restarted", 3, 3, now_ms=0)).partitions)
    cl.commit(cl.c.heartbeat(3, "inc-3b", now_ms=0, capabilities=[FIRST_TERM]))
    assert all(p.leader >= 0 for p in cl.commit(cl.c.create_topic("upgraded", 3, 3, now_ms=0)).partitions)
    # A new controller knows nothing until the brokers' heartbeats tell it again.
    fresh = Controller(cl.image, 2, 0, random.Random(1))
    assert all(p.leader == -1 for p in fresh.create_topic("after", 3, 3, now_ms=0).response.partitions)
    with pytest.raises(InvalidRequestError):
        cl.c.heartbeat(1, "inc-1", now_ms=0, capabilities=["x"] * 33)
    with pytest.raises(InvalidRequestError):
        cl.c.heartbeat(1, "inc-1", now_ms=0, capabilities="first_term")


# --- partition leadership ---------------------------------------------------------------


def test_partition_leader_reports_only_when_newer():
    cl = Cluster(brokers=3, capabilities=[FIRST_TERM])  # the named first leader's path
    resp = cl.commit(cl.c.create_topic("t", 1, 3, now_ms=0))
    replicas = resp.partitions[0].replicas
    a, b = replicas[0], replicas[1]
    # The record named `a` at epoch 0; `a` leading the first term (epoch 1) confirms it.
    assert cl.c.partition_leader_report("t", 0, a, 0, now_ms=0).response is False  # same
    first = cl.c.partition_leader_report("t", 0, a, 1, now_ms=0)
    assert first.response is True and kinds(first) == ["PartitionChange"]
    assert cl.c.partition_leader_report("t", 0, a, 1, now_ms=1).envelopes == ()  # in flight
    cl.commit(first)
    assert cl.c.partition_leader_report("t", 0, a, 1, now_ms=2).response is False  # same
    up = cl.c.partition_leader_report("t", 0, b, 3, now_ms=3)
    assert cl.c.partition_leader_report("t", 0, b, 2, now_ms=4).response is False  # older than in flight
    cl.commit(up)
    assert cl.c.partition_leader_report("t", 0, a, 2, now_ms=5).response is False  # stale
    assert (cl.image.partition("t", 0).leader, cl.image.partition("t", 0).leader_epoch) == (b, 3)
    with pytest.raises(InvalidRequestError):
        cl.c.partition_leader_report("t", 0, 99, 5, now_ms=6)
    with pytest.raises(UnknownTopicOrPartitionError):
        cl.c.partition_leader_report("t", 1, a, 5, now_ms=6)
    with pytest.raises(UnknownTopicOrPartitionError):
        cl.c.partition_leader_report("t", 0, a, 5, now_ms=6, topic_id="old-incarnation")


def test_partition_leader_reports_in_one_result_answered_per_report():
    cl = Cluster(brokers=3)
    resp = cl.commit(cl.c.create_topic("t", 4, 3, now_ms=0))
    p = resp.partitions
    result = cl.c.partition_leader_reports([
        LeaderReport("t", 0, p[0].replicas[1], 1),
        {"topic": "t", "partition": 1, "leader_id": p[1].replicas[2], "leader_epoch": 3},
        LeaderReport("nope", 0, 1, 1),                       # unknown topic: only this one fails
        LeaderReport("t", 2, 99, 1),                         # not a replica
        {"topic": "t", "partition": "2"},                    # malformed
        LeaderReport("t", 3, p[3].replicas[0], 2, topic_id="old-incarnation"),
    ], now_ms=0)
    assert kinds(result) == ["PartitionChange", "PartitionChange"] and len(result.envelopes) == 1
    r = result.response
    assert r[0] == {"changed": True} and r[1] == {"changed": True}
    assert [e["error"]["code"] for e in r[2:]] == [
        "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_REQUEST", "INVALID_REQUEST", "UNKNOWN_TOPIC_OR_PARTITION"]
    # in flight: the same news again (batched or single) proposes nothing
    again = cl.c.partition_leader_reports([LeaderReport("t", 0, p[0].replicas[1], 1)], now_ms=1)
    assert again.envelopes == () and again.response == [{"changed": False}]
    assert cl.c.partition_leader_report("t", 1, p[1].replicas[2], 3, now_ms=1).envelopes == ()
    cl.commit(result)
    assert (cl.image.partition("t", 0).leader, cl.image.partition("t", 0).leader_epoch) == (p[0].replicas[1], 1)
    assert (cl.image.partition("t", 1).leader, cl.image.partition("t", 1).leader_epoch) == (p[1].replicas[2], 3)
    stale = cl.c.partition_leader_reports([LeaderReport("t", 1, p[1].replicas[0], 2)], now_ms=2)
    assert stale.envelopes == () and stale.response == [{"changed": False}]
    with pytest.raises(InvalidRequestError):
        cl.c.partition_leader_reports("not a list", now_ms=2)
    with pytest.raises(InvalidRequestError):
        cl.c.partition_leader_reports([LeaderReport("t", 0, 1, 9)] * (MAX_LEADER_REPORTS + 1), now_ms=2)


def test_partition_leader_reports_newer_of_two_wins_and_big_batches_split_into_envelopes():
    cl = Cluster(brokers=3)
    n = 700
    resp = cl.commit(cl.c.create_topic("big", n, 3, now_ms=0))
    a, b = resp.partitions[0].replicas[0], resp.partitions[0].replicas[1]
    twice = cl.c.partition_leader_reports(
        [LeaderReport("big", 0, a, 1), LeaderReport("big", 0, b, 2), LeaderReport("big", 0, a, 1)], now_ms=0)
    assert twice.response == [{"changed": False}, {"changed": True}, {"changed": False}]
    assert [(r.leader, r.leader_epoch) for r in twice.records] == [(b, 2)]
    cl.commit(twice)
    reports = [LeaderReport("big", p.partition, p.replicas[1], 5) for p in resp.partitions]
    result = cl.c.partition_leader_reports(reports, now_ms=1)
    assert all(r == {"changed": True} for r in result.response)
    assert len(result.records) == n and 1 < len(result.envelopes) <= 4
    assert all(len(encode_envelope(env)) <= MAX_ENVELOPE_BYTES for env in result.envelopes)
    cl.commit(result)
    assert all(cl.image.partition("big", p.partition).leader_epoch == 5 for p in resp.partitions)


def test_preferred_leader_moves_wait_settle_and_are_bounded():
    cl = Cluster(brokers=3, leader_settle_ms=5000, leader_move_retry_ms=10_000, max_leader_moves=2)
    resp = cl.commit(cl.c.create_topic("t", 6, 3, now_ms=0))
    # every partition elected a non-preferred leader (its second replica)
    for p in resp.partitions:
        cl.commit(cl.c.partition_leader_report("t", p.partition, p.replicas[1], 1, now_ms=0))
    cl.now_ms = 4999
    assert cl.c.preferred_leader_moves(4999) == ()  # brokers unfenced for < settle time
    moves = cl.c.preferred_leader_moves(5000)
    assert [(m.partition, m.leader, m.preferred_leader) for m in moves] == [
        (0, resp.partitions[0].replicas[1], resp.partitions[0].preferred_leader),
        (1, resp.partitions[1].replicas[1], resp.partitions[1].preferred_leader),
    ]
    assert [m.partition for m in cl.c.preferred_leader_moves(5001)] == [2, 3]
    assert [m.partition for m in cl.c.preferred_leader_moves(5002, max_moves=10)] == [4, 5]
    assert cl.c.preferred_leader_moves(6000) == ()  # all suggested recently
    cl.commit(cl.c.partition_leader_report("t", 0, resp.partitions[0].preferred_leader, 2, now_ms=6000))
    assert [m.partition for m in cl.c.preferred_leader_moves(15_001)] == [1, 2]  # p0 is home now


def test_no_move_toward_a_fenced_preferred_leader():
    cl = Cluster(brokers=2, leader_settle_ms=0)
    resp = cl.commit(cl.c.create_topic("t", 1, 2, now_ms=0))
    p = resp.partitions[0]
    cl.commit(cl.c.partition_leader_report("t", 0, p.replicas[1], 1, now_ms=0))
    cl.commit(cl.c.controlled_shutdown(p.preferred_leader, f"inc-{p.preferred_leader}", now_ms=0))
    assert cl.c.preferred_leader_moves(100) == ()


# --- producer ids, internal topics, epochs ----------------------------------------------


def test_producer_id_blocks_never_overlap():
    cl = Cluster(brokers=2)
    a = cl.c.allocate_producer_ids(1, now_ms=0)
    b = cl.c.allocate_producer_ids(2, now_ms=0)  # both in flight at once
    assert (a.response.first_producer_id, b.response.first_producer_id) == (0, PRODUCER_ID_BLOCK_SIZE)
    cl.commit(b)
    image = replay_decoded(cl.image, a.envelopes[0])  # the older block commits after: rejected
    assert image.request_outcome(a.envelopes[0].request_id).code == "INVALID_REQUEST"
    c = cl.commit(cl.c.allocate_producer_ids(1, now_ms=0))
    assert c.first_producer_id == 2 * PRODUCER_ID_BLOCK_SIZE
    with pytest.raises(BrokerIdNotRegisteredError):
        cl.c.allocate_producer_ids(9, now_ms=0)


def test_ensure_internal_topics_waits_for_enough_brokers():
    cl = Cluster(brokers=2)
    assert cl.c.ensure_internal_topics(0).envelopes == ()
    cl.add_broker(3)
    result = cl.c.ensure_internal_topics(0)
    assert cl.c.ensure_internal_topics(0).envelopes == ()  # in flight
    resp = cl.commit(result)
    topic = cl.image.topic(OFFSETS_TOPIC)
    assert topic.internal and topic.partition_count == 16 and dict(topic.configs) == {"cleanup_policy": "compact"}
    assert all(len(p.replicas) == 3 for p in topic.partitions) and len(resp.partitions) == 16
    assert cl.c.ensure_internal_topics(0).envelopes == ()


def test_transaction_state_topic_is_created_when_asked():
    from raftlog.base.topics import TRANSACTION_STATE_TOPIC

    cl = Cluster(brokers=2)  # fewer brokers than offsets_replication_factor: RF is their count
    result = cl.c.ensure_transaction_state_topic(0)
    assert cl.c.ensure_transaction_state_topic(0).envelopes == ()  # in flight
    cl.commit(result)
    topic = cl.image.topic(TRANSACTION_STATE_TOPIC)
    assert topic.internal and topic.partition_count == 16 and dict(topic.configs) == {"cleanup_policy": "compact"}
    assert all(len(p.replicas) == 2 for p in topic.partitions)
    assert cl.c.ensure_transaction_state_topic(0).envelopes == ()


def test_deposed_controller_refuses_decisions():
    cl = Cluster(brokers=1)
    newer = Controller(cl.image, 2, 0, random.Random(1))
    cl.image = replay_decoded(cl.image, newer.noop().envelopes[0])
    cl.c.update_image(cl.image, 0)
    with pytest.raises(NotControllerError):
        cl.c.create_topic("t", 1, 1, now_ms=0)
    with pytest.raises(NotControllerError):
        cl.c.tick(0)
    with pytest.raises(NotControllerError):
        Controller(cl.image, 1, 0, random.Random(1))
    # and an envelope the old controller still had in flight is rejected by replay
    stale = replay_decoded(cl.image, cl.c._envelope([NoOp()]))
    assert list(stale.recent_requests.values())[-1].code == "STALE_CONTROLLER_EPOCH"


def test_request_ids_are_unique_and_records_carry_the_epoch():
    cl = Cluster(brokers=3, epoch=7)
    results = [cl.c.create_topic(f"t{i}", 1, 1, now_ms=0) for i in range(5)]
    ids = [env.request_id for r in results for env in r.envelopes]
    assert len(set(ids)) == len(ids)
    assert all(env.controller_epoch == 7 for r in results for env in r.envelopes)
    twin = Controller(cl.image, 7, 0, random.Random(12345))
    assert twin.noop().envelopes[0].request_id not in ids


def test_result_records_are_the_envelope_records():
    cl = Cluster()
    result = cl.c.register_broker(1, "i", "h", 1, "h", 2, now_ms=0)
    assert result.records == result.envelopes[0].records
    assert isinstance(result.records[0], RegisterBroker)
    assert UnfenceBroker(1, "i") != FenceBroker(1, "i")
    assert ProducerIdBlock(1, 0, 1) == ProducerIdBlock(1, 0, 1)
    assert PartitionChange("x", 0, -1, 0).replicas is None


def test_topic_ids_come_from_the_random_bytes_source_not_the_seeded_rng():
    made = []

    def source(n: int) -> bytes:
        made.append(n)
        return bytes(range(n))

    cl = Cluster(brokers=1, random_bytes=source)
    result = cl.c.create_topic("ids", 1, 1, now_ms=0)
    assert made == [16]
    assert result.records[0].topic_id == base64.urlsafe_b64encode(bytes(range(16))).rstrip(b"=").decode()
    # By default (the node's way) two controllers seeded alike still make unrelated ids.
    ids = {Controller(MetadataImage.empty(), 1, 0, random.Random(7))._new_topic_id() for _ in range(2)}
    assert len(ids) == 2
