"""KIP-848 in the pure coordinator: the assignors cover every partition once, reconciliation never gives one partition two owners under random membership changes, epochs fence stale members, a replay rebuilds the group, and Kafka 4's online upgrade (classic members inside a consumer group, converted there and back under group.consumer.migration.policy) never gives a partition two owners and keeps offsets."""

import random
from collections import defaultdict

import pytest

from groupcoord import consumer_assignor
from groupcoord.coordinator import CommitOffset, CoordinatorConfig, GroupCoordinator, Pending
from raftlog.base.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from raftlog.base.errors import (
    FencedMemberEpochError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    MemberIdRequiredError,
    RaftlogError,
    RebalanceInProgressError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)

G = "kip848-app"
TOPICS = {"orders": 6, "payments": 3, "audit-1": 2, "audit-2": 2}
SESSION = 10_000


class Shell:
    """The service, simulated: appends commit at once into an in-memory log."""

    def __init__(self, seed=7, **cfg):
        cfg.setdefault("group_consumer_session_timeout_ms", SESSION)
        cfg.setdefault("group_consumer_heartbeat_interval_ms", 500)
        self.cfg = CoordinatorConfig(**cfg)
        self.c = GroupCoordinator(self.cfg, random.Random(seed))
        self.now = 0
        self.log = defaultdict(list)
        self.answers = {}
        for p in range(self.cfg.partitions):
            self.absorb(self.c.begin_load(p))
            self.absorb(self.c.finish_load(p, 0))

    def absorb(self, res):
        for key, response in res.completions:
            self.answers[key] = response
        for a in res.appends:
            base = len(self.log[a.partition])
            self.log[a.partition].extend((base + i, k, v) for i, (k, v) in enumerate(a.records))
            self.absorb(self.c.on_append_committed(a.append_id, base, self.now))
        cg = self.c.consumer_group(G)
        if cg is not None:
            cg.check()
        return res

    def answer(self, res):
        self.absorb(res)
        r = res.response
        if isinstance(r, Pending):
            r = self.answers.pop(r.key)
        if isinstance(r, RaftlogError):
            raise r
        return r

    def hb(self, member_id="", epoch=0, owned=None, topics=TOPICS, **fields):
        if epoch == 0:
            fields.setdefault("subscribed_topic_names", ["orders", "payments"])
            fields.setdefault("rebalance_timeout_ms", 30_000)
        return self.answer(self.c.consumer_group_heartbeat(
            group_id=G, member_id=member_id, member_epoch=epoch, topics=topics, now_ms=self.now,
            owned=None if owned is None else frozenset(owned), **fields))

    def tick(self, ms):
        self.now += ms
        self.absorb(self.c.tick(self.now))

    def replay(self):
        """A new coordinator that loads the group's partition from the log (a failover)."""
        p = self.c.partition_for(G)
        fresh = GroupCoordinator(self.cfg, random.Random(1))
        fresh.begin_load(p)
        fresh.load(p, self.log[p])
        fresh.finish_load(p, self.now)
        return fresh


class Client:
    """A member as librdkafka runs it: applies each assignment it gets and reports what it owns."""

    def __init__(self, shell, member_id, **fields):
        self.s, self.id, self.epoch, self.owned = shell, member_id, 0, frozenset()
        self.fields = fields
        self.beat(first=True)

    def beat(self, first=False):
        r = self.s.hb(self.id, self.epoch, owned=None if first else self.owned, **(self.fields if first else {}))
        self.epoch = r["member_epoch"]
        if r["assignment"] is not None:
            self.owned = frozenset(r["assignment"])
        return r


def all_partitions(topics, subscribed):
    return {(t, p) for t in subscribed if t in topics for p in range(topics[t])}


@pytest.mark.parametrize("name", consumer_assignor.ASSIGNORS)
def test_assignors_cover_each_partition_once(name):
    rng = random.Random(1)
    for _ in range(200):
        members = {f"m{i}": frozenset(rng.sample(sorted(TOPICS), rng.randint(1, 4))) for i in range(rng.randint(1, 7))}
        out = consumer_assignor.assign(name, members, TOPICS, None)
        seen = [tp for tps in out.values() for tp in tps]
        assert len(seen) == len(set(seen))
        assert set(seen) == all_partitions(TOPICS, set().union(*members.values()))
        for mid, tps in out.items():
            assert all(t in members[mid] for t, _ in tps)


def test_uniform_is_balanced_and_sticky():
    members = {f"m{i}": frozenset({"orders", "payments"}) for i in range(4)}
    first = consumer_assignor.assign("uniform", members, TOPICS, None)
    assert sorted(len(a) for a in first.values()) == [2, 2, 2, 3]
    members["m4"] = frozenset({"orders", "payments"})
    second = consumer_assignor.assign("uniform", members, TOPICS, first)
    assert max(len(a) for a in second.values()) - min(len(a) for a in second.values()) <= 1
    moved = sum(len(first[m] - second[m]) for m in first)
    assert moved <= 2  # only what the new member needs moves


def test_join_converge_and_revoke_before_reassign():
    s = Shell()
    a = Client(s, "a")
    for _ in range(2):
        a.beat()
    assert a.owned == all_partitions(TOPICS, {"orders", "payments"})
    b = Client(s, "b")
    assert b.owned == frozenset()  # everything is still a's
    a.beat()  # a is told to give up half (its epoch stays)
    cg = s.c.consumer_group(G)
    assert cg.members["a"].pending_revocation and a.epoch < cg.group_epoch
    b.beat()
    assert b.owned == frozenset()  # not before a acknowledged
    a.beat()  # a reports it owns only its half now
    b.beat()
    assert a.owned | b.owned == all_partitions(TOPICS, {"orders", "payments"})
    assert not a.owned & b.owned
    assert a.epoch == b.epoch == cg.group_epoch
    assert cg.state() == "Stable"


def test_random_membership_never_two_owners():
    for seed in range(20):
        rng = random.Random(seed)
        s = Shell(seed)
        clients = {}
        n = 0
        for _ in range(150):
            op = rng.random()
            if op < 0.15 or not clients:
                n += 1
                clients[f"c{n}"] = Client(s, f"c{n}", subscribed_topic_names=rng.choice(
                    [["orders"], ["orders", "payments"], ["payments"]]))
            elif op < 0.22:
                mid = rng.choice(sorted(clients))
                s.hb(mid, -1)
                del clients[mid]
            elif op < 0.27:  # a member dies: its session ends
                mid = rng.choice(sorted(clients))
                del clients[mid]
                s.now += 1
                for c in clients.values():
                    c.beat()
                s.tick(SESSION - 1)
            else:
                rng.choice(list(clients.values())).beat()
            # What the clients hold: never one partition in two hands (the server checks its
            # own view in Shell.absorb).
            held = [tp for c in clients.values() for tp in c.owned]
            assert len(held) == len(set(held)), f"seed {seed}"
        for _ in range(6):
            for c in list(clients.values()):
                c.beat()
        if clients:
            subscribed = set().union(*(s.c.consumer_group(G).members[m].subscribed_topic_names for m in clients))
            assert {tp for c in clients.values() for tp in c.owned} == all_partitions(TOPICS, subscribed), f"seed {seed}"


def test_epochs_fence_and_commit_checks():
    s = Shell()
    a = Client(s, "a")
    a.beat()
    with pytest.raises(FencedMemberEpochError):
        s.hb("a", a.epoch + 5)
    with pytest.raises(UnknownMemberIdError):
        s.hb("nobody", 3)
    commit = [CommitOffset("orders", 0, 42)]
    with pytest.raises(StaleMemberEpochError):
        s.answer(s.c.offset_commit(group_id=G, offsets=commit, member_id="a", generation_id=a.epoch + 1, now_ms=0))
    s.answer(s.c.offset_commit(group_id=G, offsets=commit, member_id="a", generation_id=a.epoch, now_ms=0))
    fetched = s.answer(s.c.offset_fetch(group_id=G, partitions=[("orders", 0)]))
    assert fetched["partitions"][0]["offset"] == 42
    fetched = s.answer(s.c.offset_fetch(group_id=G, partitions=[("orders", 0)], member_id="a", member_epoch=a.epoch))
    assert fetched["partitions"][0]["offset"] == 42
    with pytest.raises(StaleMemberEpochError):
        s.answer(s.c.offset_fetch(group_id=G, partitions=[("orders", 0)], member_id="a", member_epoch=a.epoch - 1))


def test_bad_input():
    s = Shell()
    with pytest.raises(InvalidRegularExpressionError):
        s.hb("x", 0, subscribed_topic_regex="orders(")
    with pytest.raises(UnsupportedAssignorError):
        s.hb("x", 0, server_assignor="sticky")
    with pytest.raises(InvalidRequestError):
        s.hb("x", 0, subscribed_topic_names=None)
    Client(s, "a")
    with pytest.raises(InconsistentGroupProtocolError):
        s.answer(s.c.join_group(group_id=G, member_id="", protocol_type="consumer", protocols=[("range", b"")],
                                session_timeout_ms=10_000, rebalance_timeout_ms=10_000, now_ms=0))


def test_classic_group_with_members_is_not_a_consumer_group_and_empty_one_upgrades():
    s = Shell(group_min_session_timeout_ms=1000, group_initial_rebalance_delay_ms=0)
    s.answer(s.c.offset_commit(group_id=G, offsets=[CommitOffset("orders", 1, 7)], now_ms=0))
    r = s.c.join_group(group_id=G, member_id="", protocol_type="consumer", protocols=[("range", b"")],
                       session_timeout_ms=10_000, rebalance_timeout_ms=10_000, now_ms=0)
    s.absorb(r)
    member_id = r.response.member_id
    s.absorb(s.c.join_group(group_id=G, member_id=member_id, protocol_type="consumer", protocols=[("range", b"")],
                            session_timeout_ms=10_000, rebalance_timeout_ms=10_000, now_ms=0))
    s.tick(1)
    assert s.c.group(G).members
    with pytest.raises(GroupIdNotFoundError):
        s.hb("new", 0)
    s.answer(s.c.leave_group(group_id=G, members=[(member_id, None)], now_ms=0))
    a = Client(s, "a")  # the Empty classic group converts; its offsets stay
    assert s.c.consumer_group(G) is not None and a.epoch > 0
    assert s.answer(s.c.offset_fetch(group_id=G, partitions=[("orders", 1)]))["partitions"][0]["offset"] == 7


def test_static_member_rejoins_without_rebalance():
    s = Shell()
    a = Client(s, "a1", instance_id="host-a")
    Client(s, "b", instance_id="host-b")
    for _ in range(3):
        a.beat()
    with pytest.raises(UnreleasedInstanceIdError):
        s.hb("a2", 0, instance_id="host-a")
    epoch = s.c.consumer_group(G).group_epoch
    s.hb("a1", -2)
    r = s.hb("a2", 0, instance_id="host-a")
    assert s.c.consumer_group(G).group_epoch == epoch
    assert frozenset(r["assignment"]) == a.owned


def test_replay_rebuilds_the_group():
    s = Shell()
    a, b = Client(s, "a"), Client(s, "b", subscribed_topic_names=[], subscribed_topic_regex="audit-.*")
    for _ in range(3):
        a.beat()
        b.beat()
    before = s.c.consumer_group_describe([G]).response
    fresh = s.replay()
    after = fresh.consumer_group_describe([G]).response
    assert after == before
    assert {tp for m in after["groups"][0]["members"] if m["member_id"] == "b" for r in m["assignment"]
            for tp in r["partitions"]} == {0, 1}


def test_revocation_not_acknowledged_within_the_rebalance_timeout_fences_the_member():
    s = Shell()
    a = Client(s, "a", rebalance_timeout_ms=5_000)
    a.beat()
    Client(s, "b")
    a.s.hb("a", a.epoch)  # told to revoke; never acknowledges
    assert s.c.consumer_group(G).members["a"].pending_revocation
    s.tick(5_000)
    assert "a" not in s.c.consumer_group(G).members
    with pytest.raises(UnknownMemberIdError):
        s.hb("a", a.epoch)


def test_empty_consumer_group_converts_back_to_classic_with_its_offsets():
    s = Shell(group_min_session_timeout_ms=1000, group_initial_rebalance_delay_ms=0)
    a = Client(s, "a")
    s.answer(s.c.offset_commit(group_id=G, offsets=[CommitOffset("orders", 2, 9)], member_id="a",
                               generation_id=a.epoch, now_ms=0))
    s.hb("a", -1)
    r = s.c.join_group(group_id=G, member_id="", protocol_type="consumer", protocols=[("range", b"")],
                       session_timeout_ms=10_000, rebalance_timeout_ms=10_000, now_ms=0)
    s.absorb(r)
    assert s.c.consumer_group(G) is None and r.response.member_id  # MEMBER_ID_REQUIRED: a classic group now
    assert s.answer(s.c.offset_fetch(group_id=G, partitions=[("orders", 2)]))["partitions"][0]["offset"] == 9
    fresh = s.replay()  # the log says the same
    assert fresh.consumer_group(G) is None


# ---- Kafka 4's online upgrade and downgrade (groupcoord/classic_member.py, consumer_group_classic.py)

SUBSCRIBED = ["orders", "payments"]
ALL = {(t, p) for t in SUBSCRIBED for p in range(TOPICS[t])}


class ClassicClient:
    """A classic consumer (eager unless `cooperative`): joins, syncs, heartbeats, and rejoins
    with what it still owns when told to."""

    def __init__(self, shell, cooperative=False):
        self.s, self.id, self.generation, self.owned, self.cooperative = shell, "", -1, frozenset(), cooperative

    def protocols(self):
        owned = tuple(sorted(self.owned)) if self.cooperative else ()
        return [("range", encode_subscription(Subscription(tuple(SUBSCRIBED), owned)))]

    def join_request(self):
        if not self.cooperative:
            self.owned = frozenset()  # eager: everything is revoked before the join
        return self.s.c.join_group(group_id=G, member_id=self.id, protocol_type="consumer", protocols=self.protocols(),
                                   session_timeout_ms=10_000, rebalance_timeout_ms=10_000, now_ms=self.s.now,
                                   topics=TOPICS)

    def join(self):
        try:
            r = self.s.answer(self.join_request())
        except MemberIdRequiredError as e:
            self.id = e.member_id
            r = self.s.answer(self.join_request())
        self.id, self.generation = r["member_id"], r["generation_id"]
        return r

    def sync(self, assignments=None):
        r = self.s.answer(self.s.c.sync_group(group_id=G, member_id=self.id, generation_id=self.generation,
                                              now_ms=self.s.now, assignments=assignments,
                                              protocol_type="consumer", protocol_name="range"))
        self.owned = frozenset(decode_assignment(r["assignment"]).partitions)
        return r

    def beat(self):
        """One heartbeat; on REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION a rejoin and a sync."""
        try:
            self.s.answer(self.s.c.heartbeat(group_id=G, member_id=self.id, generation_id=self.generation,
                                             now_ms=self.s.now))
        except (RebalanceInProgressError, IllegalGenerationError):
            self.join()
            try:
                self.sync()
            except RebalanceInProgressError:
                pass


def classic_rebalance(s, members):
    """Every classic member joins (at once, as the classic protocol wants), the leader stores a
    round-robin assignment, every member syncs: the group is Stable."""
    pending = []
    for m in members:
        if not m.id:
            try:
                s.answer(m.join_request())
            except MemberIdRequiredError as e:
                m.id = e.member_id
        pending.append(s.absorb(m.join_request()).response)
    for _ in range(10):  # the initial delay is extended while members keep arriving
        if s.c.group(G).state.value != "PreparingRebalance":
            break
        s.tick(s.cfg.group_initial_rebalance_delay_ms)
    for m, r in zip(members, pending):
        m.generation = (s.answers.pop(r.key) if isinstance(r, Pending) else r)["generation_id"]
    leader = next(m for m in members if m.id == s.c.group(G).leader_id)
    plan = {m.id: [] for m in members}
    for i, tp in enumerate(sorted(ALL)):
        plan[members[i % len(members)].id].append(tp)
    s.absorb(s.c.sync_group(group_id=G, member_id=leader.id, generation_id=leader.generation, now_ms=s.now,
                            assignments={k: encode_assignment(Assignment(tuple(v))) for k, v in plan.items()},
                            protocol_type="consumer", protocol_name="range"))
    for m in members:
        if m is not leader:
            s.absorb(s.c.sync_group(group_id=G, member_id=m.id, generation_id=m.generation, now_ms=s.now))
        m.owned = frozenset(plan[m.id])
    assert s.c.group(G).state.value == "Stable"


def stable_classic_group(s, n=3):
    members = [ClassicClient(s) for _ in range(n)]
    classic_rebalance(s, members)
    return members


def assert_one_owner(clients):
    seen = {}
    for c in clients:
        for tp in c.owned:
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {c.id}"
            seen[tp] = c.id


def settle(s, classic, consumers, rounds=12):
    for _ in range(rounds):
        for c in classic:
            c.beat()
            assert_one_owner(classic + consumers)
        for c in consumers:
            c.beat()
            assert_one_owner(classic + consumers)


def shell(**cfg):
    return Shell(group_min_session_timeout_ms=1000, group_initial_rebalance_delay_ms=100, **cfg)


@pytest.mark.parametrize("cooperative", [False, True])
def test_rolling_upgrade_converts_and_never_gives_a_partition_two_owners(cooperative):
    s = shell()
    classic = stable_classic_group(s)
    for c in classic:
        c.cooperative = cooperative
    s.answer(s.c.offset_commit(group_id=G, offsets=[CommitOffset("orders", 0, 5)], member_id=classic[0].id,
                               generation_id=classic[0].generation, now_ms=0))
    consumers = []
    for i in range(3):  # each classic member in turn is replaced by one with the consumer protocol
        consumers.append(Client(s, f"new-{i}", subscribed_topic_names=SUBSCRIBED))  # the first converts
        cg = s.c.consumer_group(G)
        assert cg is not None and sum(m.is_classic for m in cg.members.values()) == len(classic)
        settle(s, classic, consumers)
        gone = classic.pop(0)
        s.answer(s.c.leave_group(group_id=G, members=[(gone.id, None)], now_ms=s.now))
        settle(s, classic, consumers)
        assert set().union(*(c.owned for c in classic + consumers)) == ALL
    cg = s.c.consumer_group(G)
    assert len(cg.members) == 3 and not any(m.is_classic for m in cg.members.values())
    assert s.answer(s.c.offset_fetch(group_id=G, partitions=[("orders", 0)]))["partitions"][0]["offset"] == 5


def test_classic_members_survive_replay_and_the_last_consumer_member_leaving_downgrades():
    s = shell()
    classic = stable_classic_group(s, 2)
    a = Client(s, "a", subscribed_topic_names=SUBSCRIBED)
    settle(s, classic, [a])
    before = s.c.consumer_group_describe([G]).response
    fresh = s.replay()
    assert fresh.consumer_group_describe([G]).response == before
    kept = fresh.consumer_group(G).members[classic[0].id]
    assert kept.is_classic and kept.classic_session_timeout_ms == 10_000
    # A classic member's commit is fenced by its generation, as a classic group's is.
    with pytest.raises(IllegalGenerationError):
        s.answer(s.c.offset_commit(group_id=G, offsets=[CommitOffset("orders", 0, 1)], member_id=classic[0].id,
                                   generation_id=classic[0].generation + 7, now_ms=0))
    s.answer(s.c.offset_commit(group_id=G, offsets=[CommitOffset("orders", 0, 3)], member_id=classic[0].id,
                               generation_id=classic[0].generation, now_ms=0))
    s.hb("a", -1)
    assert s.c.consumer_group(G) is None
    group = s.c.group(G)
    assert group.state.value == "PreparingRebalance" and set(group.members) == {c.id for c in classic}
    classic_rebalance(s, classic)
    assert group.state.value == "Stable"
    assert s.answer(s.c.offset_fetch(group_id=G, partitions=[("orders", 0)]))["partitions"][0]["offset"] == 3
    fresh = s.replay()
    assert fresh.consumer_group(G) is None and set(fresh.group(G).members) == {c.id for c in classic}


def test_a_classic_group_converts_only_when_stable():
    s = shell()
    classic = stable_classic_group(s)
    s.answer(s.c.leave_group(group_id=G, members=[(classic[0].id, None)], now_ms=s.now))
    with pytest.raises(GroupIdNotFoundError):  # rebalancing: the member retries later
        s.hb("a", 0, subscribed_topic_names=SUBSCRIBED)
    assert s.c.consumer_group(G) is None and s.c.group(G).state.value == "PreparingRebalance"


def test_migration_policy_gates_both_ways():
    s = shell(group_consumer_migration_policy="disabled")
    stable_classic_group(s, 2)
    with pytest.raises(GroupIdNotFoundError):
        s.hb("a", 0, subscribed_topic_names=SUBSCRIBED)
    assert s.c.group(G).state.value == "Stable"

    s = shell(group_consumer_migration_policy="upgrade")
    classic = stable_classic_group(s, 2)
    a = Client(s, "a", subscribed_topic_names=SUBSCRIBED)
    settle(s, classic, [a])
    s.hb("a", -1)
    cg = s.c.consumer_group(G)
    assert cg is not None and all(m.is_classic for m in cg.members.values())  # no downgrade
    with pytest.raises(UnknownMemberIdError):  # a KIP-848 member has no classic heartbeat
        Client(s, "b", subscribed_topic_names=SUBSCRIBED)
        s.answer(s.c.heartbeat(group_id=G, member_id="b", generation_id=cg.members["b"].member_epoch, now_ms=s.now))
def test_a_groups_own_session_timeout_and_heartbeat_interval_apply_at_the_next_heartbeat():
    s = Shell()
    configs: dict[str, dict[str, str]] = {}
    s.c.use_group_configs(lambda group_id: configs.get(group_id, {}))
    a = s.hb()
    assert a["heartbeat_interval_ms"] == 500
    configs[G] = {"consumer.session.timeout.ms": "60000", "consumer.heartbeat.interval.ms": "1500"}
    a = s.hb(a["member_id"], a["member_epoch"])
    assert a["heartbeat_interval_ms"] == 1500
    s.tick(SESSION + 1)  # past the broker's session timeout, within the group's
    assert a["member_id"] in s.c.consumer_group(G).members
    s.tick(60_000)
    assert a["member_id"] not in s.c.consumer_group(G).members
