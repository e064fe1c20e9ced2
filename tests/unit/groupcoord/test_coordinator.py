"""The pure group coordinator follows Kafka's classic protocol on every transition (injected clock), stores offsets only once appended, and rebuilds the same cache from a replay."""

import random
from collections import defaultdict

import pytest

from groupcoord.coordinator import (
    CommitOffset,
    CoordinatorConfig,
    GroupCoordinator,
    Pending,
)
from raftlog.base.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    NotCoordinatorError,
    RaftlogError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    error_from_wire,
)
from groupcoord.records import OffsetKey, OffsetValue, offset_record
from raftlog.base.topics import partition_for_group
from groupcoord.state import GroupState

G = "orders-app"
P = partition_for_group(G)
SESSION = 10_000
REBALANCE = 30_000
DELAY = 3_000
RANGE = (("range", b"sub"),)


class Harness:
    """The shell, simulated: appends go to an in-memory log and (when `auto`) commit at once;
    completions are collected by key. Group invariants are checked after every step."""

    def __init__(self, auto=True, **cfg):
        cfg.setdefault("group_initial_rebalance_delay_ms", DELAY)
        self.c = GroupCoordinator(CoordinatorConfig(**cfg), random.Random(7))
        self.now = 0
        self.log = defaultdict(list)
        self.answers = {}
        self.held = []
        self.auto = auto
        for p in range(16):
            self.absorb(self.c.begin_load(p))
            self.absorb(self.c.finish_load(p, 0))

    def absorb(self, res):
        for key, response in res.completions:
            assert key not in self.answers
            self.answers[key] = response
        for a in res.appends:
            if self.auto:
                self.commit(a)
            else:
                self.held.append(a)
        for g in list(self.c._groups.values()):
            g.check()
        return res

    def commit(self, append):
        base = len(self.log[append.partition])
        self.log[append.partition].extend((base + i, k, v) for i, (k, v) in enumerate(append.records))
        self.absorb(self.c.on_append_committed(append.append_id, base, self.now))

    def fail(self, append, code="REQUEST_TIMED_OUT"):
        self.absorb(self.c.on_append_failed(append.append_id, error_from_wire({"code": code}), self.now))

    def call(self, name, **kw):
        if name not in ("offset_fetch", "list_groups", "describe_groups"):
            kw.setdefault("now_ms", self.now)
        response = self.absorb(getattr(self.c, name)(**kw)).response
        if isinstance(response, Pending) and response.key in self.answers:
            return self.answers.pop(response.key)  # its append committed at once (auto)
        return response

    def tick(self, to):
        self.now = to
        self.absorb(self.c.tick(to))

    def answer(self, pending):
        assert isinstance(pending, Pending), pending
        return self.answers.pop(pending.key)

    def group(self):
        return self.c.group(G)

    # --- client steps ---

    def join(self, member_id="", instance=None, protocols=RANGE, session=SESSION, rebalance=REBALANCE, ptype="consumer"):
        return self.call("join_group", group_id=G, member_id=member_id, group_instance_id=instance,
                         client_id="cli", client_host="10.0.0.1", protocol_type=ptype, protocols=protocols,
                         session_timeout_ms=session, rebalance_timeout_ms=rebalance)

    def new_id(self, **kw):
        r = self.join(**kw)
        assert isinstance(r, MemberIdRequiredError) and r.code == "MEMBER_ID_REQUIRED"
        return r.member_id

    def heartbeat(self, mid, gen, instance=None):
        return self.call("heartbeat", group_id=G, member_id=mid, generation_id=gen, group_instance_id=instance)

    def sync(self, mid, gen, assignments=None, instance=None):
        return self.call("sync_group", group_id=G, member_id=mid, generation_id=gen,
                         assignments=assignments, group_instance_id=instance)

    def commit_offsets(self, mid="", gen=-1, offsets=(("t", 0, 10),), instance=None):
        return self.call("offset_commit", group_id=G, member_id=mid, generation_id=gen,
                         offsets=[CommitOffset(*o) for o in offsets], group_instance_id=instance)

    def fetch(self, partitions=None):
        r = self.call("offset_fetch", group_id=G, partitions=partitions)
        return {(e["topic"], e["partition"]): e["offset"] for e in r["partitions"]}

    def form(self, n, instances=None):
        """n members join within the initial delay and sync; returns (ids, generation)."""
        instances = instances or [None] * n
        ids, pend = [], []
        for inst in instances:
            if inst is None:
                mid = self.new_id()
                pend.append(self.join(mid))
            else:
                pend.append(self.join(instance=inst))
        for _ in range(20):
            if all(p.key in self.answers for p in pend):
                break
            self.tick(self.c.next_deadline_ms())
        joined = [self.answer(p) for p in pend]
        ids = [j["member_id"] for j in joined]
        gen = joined[0]["generation_id"]
        leader = joined[0]["leader"]
        assert all(j["generation_id"] == gen and j["leader"] == leader for j in joined)
        self.sync_all(ids, gen, leader)
        return ids, gen

    def sync_all(self, ids, gen, leader):
        plan = {mid: f"assign-{mid}".encode() for mid in ids}
        pend = {mid: self.sync(mid, gen) for mid in ids if mid != leader}
        pend[leader] = self.sync(leader, gen, plan)
        for mid, p in pend.items():
            r = self.answers.pop(p.key) if isinstance(p, Pending) else p
            assert r["assignment"] == plan[mid]
        assert self.group().state is GroupState.STABLE


# ---- JoinGroup -------------------------------------------------------------------------


def test_first_join_with_empty_id_gets_member_id_required_then_joins():
    h = Harness(group_initial_rebalance_delay_ms=0)
    r = h.join()
    assert isinstance(r, MemberIdRequiredError) and r.member_id.startswith("cli-")
    assert r.member_id in h.group().pending_members and h.group().state is GroupState.EMPTY
    joined = h.join(r.member_id)
    assert joined["member_id"] == r.member_id and joined["generation_id"] == 1
    assert joined["leader"] == r.member_id and joined["protocol_name"] == "range"
    assert joined["members"] == [{"member_id": r.member_id, "group_instance_id": None, "metadata": b"sub"}]
    assert h.group().state is GroupState.COMPLETING_REBALANCE


def test_full_rebalance_with_three_members_and_initial_delay():
    h = Harness()
    ids = [h.new_id() for _ in range(3)]
    pend = [h.join(ids[0])]
    assert h.c.next_deadline_ms() == DELAY
    h.now = 100
    pend += [h.join(ids[1]), h.join(ids[2])]
    assert all(isinstance(p, Pending) for p in pend)
    h.tick(DELAY)  # new members arrived during the delay: extended by another delay
    assert not h.answers and h.group().state is GroupState.PREPARING_REBALANCE
    h.tick(2 * DELAY)
    joined = [h.answer(p) for p in pend]
    assert [j["generation_id"] for j in joined] == [1, 1, 1]
    assert {j["leader"] for j in joined} == {ids[0]}
    assert [len(j["members"]) for j in joined] == [3, 0, 0]
    # followers wait for the leader's assignment
    f1, f2 = h.sync(ids[1], 1), h.sync(ids[2], 1)
    assert isinstance(f1, Pending) and isinstance(f2, Pending) and not h.answers
    lead = h.sync(ids[0], 1, {ids[0]: b"A0", ids[1]: b"A1"})  # ids[2] left out: gets b""
    assert lead["assignment"] == b"A0"
    assert h.answer(f1)["assignment"] == b"A1" and h.answer(f2)["assignment"] == b""
    assert h.group().state is GroupState.STABLE
    # the stored group record holds the assignment
    assert len(h.log[P]) == 1


def test_fourth_member_triggers_rebalance_others_see_it_on_heartbeat():
    h = Harness()
    ids, gen = h.form(3)
    m4 = h.new_id()
    assert h.group().state is GroupState.STABLE  # a pending member does not rebalance yet
    p4 = h.join(m4)
    assert isinstance(p4, Pending) and h.group().state is GroupState.PREPARING_REBALANCE
    for mid in ids:
        assert isinstance(h.heartbeat(mid, gen), RebalanceInProgressError)
    pend = [h.join(mid) for mid in ids[:2]]
    assert not h.answers
    last = h.join(ids[2])  # the last one completes the join phase: answered at once
    assert last["generation_id"] == gen + 1
    answers = [h.answer(p) for p in pend + [p4]]
    assert all(a["generation_id"] == gen + 1 for a in answers)
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    assert isinstance(h.heartbeat(ids[0], gen), IllegalGenerationError)
    assert h.heartbeat(ids[0], gen + 1) == {}


def test_session_expiry_removes_a_silent_member_and_rebalances():
    h = Harness()
    ids, gen = h.form(2)
    t0 = h.now
    h.tick(t0 + SESSION // 2)
    assert h.heartbeat(ids[0], gen) == {}
    h.tick(t0 + SESSION)  # ids[1] said nothing for a session
    g = h.group()
    assert list(g.members) == [ids[0]] and g.state is GroupState.PREPARING_REBALANCE
    assert isinstance(h.heartbeat(ids[1], gen), UnknownMemberIdError)
    assert isinstance(h.heartbeat(ids[0], gen), RebalanceInProgressError)
    assert h.join(ids[0])["generation_id"] == gen + 1


def test_heartbeats_keep_a_member():
    h = Harness()
    (m,), gen = h.form(1)
    for i in range(1, 6):
        h.tick(h.now + SESSION - 1)
        assert h.heartbeat(m, gen) == {}
    assert h.group().state is GroupState.STABLE and m in h.group().members


def test_leave_rebalances_and_last_leave_empties_the_group():
    h = Harness()
    ids, gen = h.form(2)
    r = h.call("leave_group", group_id=G, members=[(ids[1], None), ("ghost", None)])
    assert r["members"][0] == {"member_id": ids[1], "group_instance_id": None}
    assert r["members"][1]["error"]["code"] == "UNKNOWN_MEMBER_ID"
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.join(ids[0])["generation_id"] == gen + 1
    records_before = len(h.log[P])
    h.call("leave_group", group_id=G, members=[(ids[0], None)])
    g = h.group()
    assert g.state is GroupState.EMPTY and g.generation_id == gen + 2 and not g.members
    assert len(h.log[P]) == records_before + 1  # the Empty group is stored


def test_rebalance_timeout_removes_a_member_that_did_not_rejoin():
    h = Harness()
    ids, gen = h.form(3)
    m4 = h.new_id()
    p4 = h.join(m4)
    started = h.now
    p0, p1 = h.join(ids[0]), h.join(ids[1])
    for t in range(started + 9_000, started + REBALANCE, 9_000):
        h.tick(t)  # ids[2] is alive (its heartbeat thread runs) but busy: it does not rejoin
        assert isinstance(h.heartbeat(ids[2], gen), RebalanceInProgressError)
    h.tick(started + REBALANCE - 1)
    assert not h.answers and ids[2] in h.group().members
    h.tick(started + REBALANCE)
    answers = [h.answer(p) for p in (p0, p1, p4)]
    assert {a["generation_id"] for a in answers} == {gen + 1}
    assert set(h.group().members) == {ids[0], ids[1], m4}
    assert isinstance(h.heartbeat(ids[2], gen), UnknownMemberIdError)


def test_join_of_the_leader_who_did_not_rejoin_passes_leadership():
    h = Harness()
    ids, gen = h.form(2)
    h.join(h.new_id())
    p1 = h.join(ids[1])
    h.tick(h.now + REBALANCE)
    assert h.answer(p1)["leader"] == ids[1]


@pytest.mark.parametrize(
    "protocol_lists, expected",
    [
        ([RANGE, (("roundrobin", b""), ("range", b""))], "range"),
        ([(("range", b""), ("sticky", b"")), (("sticky", b""), ("range", b"")), (("sticky", b""),)], "sticky"),
    ],
)
def test_protocol_vote(protocol_lists, expected):
    h = Harness()
    pend = []
    for protos in protocol_lists:
        pend.append(h.join(h.new_id(protocols=protos), protocols=protos))
    h.tick(h.c.next_deadline_ms())
    h.tick(h.c.next_deadline_ms())
    assert {h.answer(p)["protocol_name"] for p in pend} == {expected}


@pytest.mark.parametrize(
    "kw, error",
    [
        ({"protocols": (("sticky", b""),)}, InconsistentGroupProtocolError),
        ({"ptype": "connect"}, InconsistentGroupProtocolError),
        ({"session": 1_000}, InvalidSessionTimeoutError),
        ({"session": 10_000_000}, InvalidSessionTimeoutError),
        ({"member_id": "nobody"}, UnknownMemberIdError),
        ({"protocols": ()}, InvalidRequestError),
    ],
)
def test_join_rejections(kw, error):
    h = Harness()
    h.form(1)
    assert isinstance(h.join(**kw), error)


def test_a_new_member_stuck_in_a_long_join_expires_kip_394():
    h = Harness(new_member_join_timeout_ms=60_000)
    ids, gen = h.form(1)
    newcomer = h.new_id()
    p = h.join(newcomer, rebalance=600_000)
    start = h.now
    for t in range(start + 9_000, start + 60_000, 9_000):
        h.tick(t)
        assert isinstance(h.heartbeat(ids[0], gen), RebalanceInProgressError)  # alive, not rejoining
    h.tick(start + 60_000)
    assert isinstance(h.answer(p), UnknownMemberIdError)
    assert newcomer not in h.group().members


def test_timers_follow_the_earliest_deadline():
    h = Harness()
    ids, gen = h.form(2)
    t = h.now
    assert h.c.next_deadline_ms() == t + SESSION
    h.tick(t + 1000)
    h.heartbeat(ids[0], gen)
    h.heartbeat(ids[1], gen)
    h.tick(t + SESSION)  # an early timer: nothing expires, the next one is set
    assert len(h.group().members) == 2 and h.c.next_deadline_ms() == t + 1000 + SESSION


def test_group_max_size():
    h = Harness(group_max_size=2)
    h.form(2)
    assert isinstance(h.join(), GroupMaxSizeReachedError)


def test_pending_member_expires_if_it_never_rejoins():
    h = Harness()
    ids, gen = h.form(1)
    ghost = h.new_id()
    h.tick(h.now + SESSION - 1)
    h.heartbeat(ids[0], gen)
    h.tick(h.now + 1)
    assert ghost not in h.group().pending_members
    assert isinstance(h.join(ghost), UnknownMemberIdError)


def test_follower_rejoin_in_stable_is_answered_without_rebalance_but_leader_rejoin_rebalances():
    h = Harness()
    ids, gen = h.form(2)
    again = h.join(ids[1])
    assert again["generation_id"] == gen and again["members"] == []
    assert h.group().state is GroupState.STABLE
    assert isinstance(h.join(ids[0]), Pending)
    assert h.group().state is GroupState.PREPARING_REBALANCE


def test_duplicate_join_in_completing_rebalance_resends_the_answer():
    h = Harness(group_initial_rebalance_delay_ms=0)
    mid = h.new_id()
    first = h.join(mid)
    assert h.join(mid) == first


def test_a_second_join_of_the_same_member_supersedes_the_first():
    h = Harness()
    ids, gen = h.form(2)
    p_old = h.join(ids[0])
    p_new = h.join(ids[0])
    assert isinstance(h.answer(p_old), RebalanceInProgressError)
    assert h.join(ids[1])["generation_id"] == gen + 1
    assert h.answer(p_new)["generation_id"] == gen + 1


# ---- SyncGroup -------------------------------------------------------------------------


def test_sync_rejections():
    h = Harness()
    ids, gen = h.form(2)
    assert isinstance(h.sync(ids[0], gen + 5), IllegalGenerationError)
    assert isinstance(h.sync("nobody", gen), UnknownMemberIdError)
    h.join(h.new_id())
    assert isinstance(h.sync(ids[0], gen), RebalanceInProgressError)


def test_sync_append_failure_answers_everyone_and_rebalances():
    h = Harness(auto=False, group_initial_rebalance_delay_ms=0)
    mid = h.new_id()
    gen = h.join(mid)["generation_id"]
    p = h.sync(mid, gen, {mid: b"A"})
    (append,) = h.held
    h.fail(append, "NOT_LEADER")
    assert isinstance(h.answer(p), NotCoordinatorError)
    assert h.group().state is GroupState.PREPARING_REBALANCE


def test_a_rebalance_during_the_assignment_append_wins():
    h = Harness(auto=False, group_initial_rebalance_delay_ms=0)
    a = h.new_id()
    gen = h.join(a)["generation_id"]
    pa = h.sync(a, gen, {a: b"A"})
    pb = h.join(h.new_id())  # a new member: rebalance, a's sync answered REBALANCE_IN_PROGRESS
    assert isinstance(h.answer(pa), RebalanceInProgressError)
    h.commit(h.held.pop(0))
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert isinstance(pb, Pending)


# ---- OffsetCommit / OffsetFetch ---------------------------------------------------------


def test_commits_are_fenced_by_member_and_generation():
    h = Harness()
    ids, gen = h.form(2)
    assert h.commit_offsets(ids[0], gen) == {"partitions": [{"topic": "t", "partition": 0}]}
    assert isinstance(h.commit_offsets(ids[0], gen - 1), IllegalGenerationError)
    assert isinstance(h.commit_offsets("nobody", gen), UnknownMemberIdError)
    assert isinstance(h.commit_offsets("", -1), UnknownMemberIdError)  # simple commit, group not Empty
    assert h.fetch() == {("t", 0): 10}


def test_commits_in_preparing_rebalance_are_accepted_and_rejected_after():
    h = Harness()
    ids, gen = h.form(2)
    h.join(h.new_id())
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.commit_offsets(ids[0], gen, offsets=[("t", 0, 42)])["partitions"][0] == {"topic": "t", "partition": 0}
    assert h.fetch() == {("t", 0): 42}
    h.join(ids[0])
    h.join(ids[1])
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    assert isinstance(h.commit_offsets(ids[0], gen + 1), RebalanceInProgressError)
    assert isinstance(h.commit_offsets(ids[0], gen), RebalanceInProgressError)


def test_old_generation_commit_after_the_rebalance_is_illegal():
    h = Harness()
    ids, gen = h.form(1)
    h.join(ids[0])  # leader rejoin: new generation at once
    h.sync_all(ids, gen + 1, ids[0])
    assert isinstance(h.commit_offsets(ids[0], gen), IllegalGenerationError)


def test_simple_commits_for_groups_without_members():
    h = Harness()
    assert isinstance(h.commit_offsets("", 3), IllegalGenerationError)  # no group, generation given
    assert h.c.group(G) is None
    assert h.commit_offsets("anyone", -1, offsets=[("t", 1, 7)])["partitions"] == [{"topic": "t", "partition": 1}]
    assert h.group().state is GroupState.EMPTY and h.fetch([("t", 1), ("t", 2)]) == {("t", 1): 7, ("t", 2): -1}


def test_commit_per_partition_errors():
    h = Harness(offset_metadata_max_bytes=4)
    r = h.commit_offsets(offsets=[("t", 0, 5, None, "toolong"), ("t", 1, 6, 3, "ok")])
    assert r["partitions"][0]["error"]["code"] == "OFFSET_METADATA_TOO_LARGE"
    assert "error" not in r["partitions"][1]
    entry = h.call("offset_fetch", group_id=G, partitions=[("t", 1)])["partitions"][0]
    assert entry == {"topic": "t", "partition": 1, "offset": 6, "leader_epoch": 3, "metadata": "ok"}


def test_the_cache_changes_only_when_the_append_is_committed():
    h = Harness(auto=False)
    p = h.commit_offsets(offsets=[("t", 0, 5)])
    assert isinstance(p, Pending) and h.fetch() == {}
    (append,) = h.held
    h.commit(h.held.pop())
    assert h.answer(p) == {"partitions": [{"topic": "t", "partition": 0}]} and h.fetch() == {("t", 0): 5}
    p2 = h.commit_offsets(offsets=[("t", 0, 9)])
    h.fail(h.held.pop(), "REQUEST_TIMED_OUT")
    assert h.answer(p2)["partitions"][0]["error"]["code"] == "COORDINATOR_NOT_AVAILABLE"
    assert h.fetch() == {("t", 0): 5}


def test_appends_in_flight_are_bounded():
    h = Harness(auto=False, max_pending_appends=1)
    assert isinstance(h.commit_offsets(offsets=[("t", 0, 1)]), Pending)
    assert isinstance(h.commit_offsets(offsets=[("t", 0, 2)]), CoordinatorNotAvailableError)


def test_a_late_completion_never_moves_an_offset_back():
    h = Harness(auto=False)
    pa = h.commit_offsets(offsets=[("t", 0, 5)])
    pb = h.commit_offsets(offsets=[("t", 0, 9)])
    a, b = h.held
    # b landed after a in the log (offsets 1 and 0 reversed on purpose: b is at log offset 7)
    h.absorb(h.c.on_append_committed(b.append_id, 7, h.now))
    h.absorb(h.c.on_append_committed(a.append_id, 3, h.now))
    assert h.fetch() == {("t", 0): 9}
    assert "error" not in h.answer(pa)["partitions"][0] and "error" not in h.answer(pb)["partitions"][0]


# ---- static membership -----------------------------------------------------------------


def test_static_member_restart_keeps_its_assignment_without_rebalance():
    h = Harness()
    ids, gen = h.form(2, instances=["i-0", "i-1"])
    assert all(not mid.startswith("cli") for mid in ids)  # no MEMBER_ID_REQUIRED round for static members
    r = h.join(instance="i-1")  # restart: empty member id, same instance, same subscription
    new = r["member_id"]
    assert new != ids[1] and r["generation_id"] == gen and r["leader"] == ids[0] and r["members"] == []
    assert h.group().state is GroupState.STABLE
    assert h.sync(new, gen, instance="i-1")["assignment"] == f"assign-{ids[1]}".encode()
    assert isinstance(h.heartbeat(ids[1], gen, instance="i-1"), FencedInstanceIdError)
    assert isinstance(h.commit_offsets(ids[1], gen, instance="i-1"), FencedInstanceIdError)
    assert h.heartbeat(new, gen, instance="i-1") == {}


def test_static_leader_restart_is_told_the_old_leader_id():
    h = Harness()
    ids, gen = h.form(2, instances=["i-0", "i-1"])
    r = h.join(instance="i-0")
    assert r["leader"] == ids[0] != r["member_id"]  # so it does not run a useless assignment
    assert h.group().leader_id == r["member_id"]


def test_static_restart_with_a_changed_subscription_rebalances():
    h = Harness()
    ids, gen = h.form(2, instances=["i-0", "i-1"])
    p = h.join(instance="i-1", protocols=(("range", b"other-topics"),))
    assert isinstance(p, Pending) and h.group().state is GroupState.PREPARING_REBALANCE


def test_static_restart_reverts_when_its_append_fails():
    h = Harness()
    ids, gen = h.form(2, instances=["i-0", "i-1"])
    h.auto = False
    p = h.join(instance="i-1")
    h.fail(h.held.pop(), "NOT_ENOUGH_REPLICAS")
    assert isinstance(h.answer(p), CoordinatorNotAvailableError)
    assert h.heartbeat(ids[1], gen, instance="i-1") == {}


def test_static_member_rejoining_during_a_join_fences_the_old_request():
    h = Harness()
    ids, gen = h.form(2, instances=["i-0", "i-1"])
    h.join(h.new_id())
    old = h.join(ids[1], instance="i-1")
    new = h.join(instance="i-1")
    assert isinstance(h.answer(old), FencedInstanceIdError)
    assert isinstance(new, Pending)


def test_static_member_leaves_by_instance_id():
    h = Harness()
    ids, gen = h.form(2, instances=["i-0", "i-1"])
    r = h.call("leave_group", group_id=G, members=[("", "i-1"), ("wrong", "i-0"), ("", "i-9")])
    assert [m.get("error", {}).get("code") for m in r["members"]] == [None, "FENCED_INSTANCE_ID", "UNKNOWN_MEMBER_ID"]
    assert list(h.group().members) == [ids[0]]


# ---- failover: load / replay / unload --------------------------------------------------


def replay(log_records, partition=P, now=0):
    c = GroupCoordinator(CoordinatorConfig(), random.Random(1))
    c.begin_load(partition)
    c.load(partition, log_records)
    c.finish_load(partition, now)
    return c


def fetch_all(c, group=G):
    return {(e["topic"], e["partition"]): e["offset"] for e in
            c.offset_fetch(group_id=group).response["partitions"]}


def test_replay_rebuilds_offsets_and_the_stable_group():
    h = Harness()
    ids, gen = h.form(2)
    h.commit_offsets(ids[0], gen, offsets=[("t", 0, 10), ("t", 1, 20)])
    h.commit_offsets(ids[1], gen, offsets=[("t", 0, 11)])
    c = replay(h.log[P])
    assert fetch_all(c) == {("t", 0): 11, ("t", 1): 20}
    g = c.group(G)
    assert g.state is GroupState.STABLE and g.generation_id == gen and list(g.members) == ids
    assert g.members[ids[1]].assignment == f"assign-{ids[1]}".encode()
    assert c.heartbeat(group_id=G, member_id=ids[0], generation_id=gen, now_ms=1).response == {}
    # members must heartbeat within a session of the load
    c.tick(SESSION)
    assert c.group(G).state is GroupState.PREPARING_REBALANCE


def test_replay_later_record_wins_even_if_its_offset_is_lower_and_tombstones_delete():
    k = OffsetKey(G, "t", 0)
    recs = [
        offset_record(k, OffsetValue(100, "", 1)),
        offset_record(OffsetKey(G, "t", 1), OffsetValue(5, "", 1)),
        offset_record(k, OffsetValue(40, "", 2)),  # a reset to an earlier offset, committed later
        offset_record(OffsetKey(G, "t", 1), None),  # tombstone
    ]
    log = [(i, kb, vb) for i, (kb, vb) in enumerate(recs)]
    c = replay(log)
    assert fetch_all(c) == {("t", 0): 40}
    # Compaction keeps the newest record per key (and may keep tombstones): same cache.
    compacted = [log[2], log[3]]
    assert fetch_all(replay(compacted)) == fetch_all(c)


def test_replay_fed_twice_or_out_of_order_does_not_go_back():
    k = OffsetKey(G, "t", 0)
    log = [(i, *offset_record(k, OffsetValue(o, "", i))) for i, o in enumerate([10, 20, 30])]
    c = GroupCoordinator(CoordinatorConfig(), random.Random(1))
    c.begin_load(P)
    assert c.load(P, log) == 3
    assert c.load(P, log[:2]) == 0  # a chunk fed again (a retried read) is ignored
    c.finish_load(P, 0)
    assert fetch_all(c) == {("t", 0): 30}


def test_a_bad_record_is_skipped_not_fatal():
    good = offset_record(OffsetKey(G, "t", 0), OffsetValue(3, "", 0))
    c = GroupCoordinator(CoordinatorConfig(), random.Random(1))
    c.begin_load(P)
    assert c.load(P, [(0, b"\xff", b""), (1, *good)]) == 1
    assert c.finish_load(P, 0).response["errors"] == 1
    assert fetch_all(c) == {("t", 0): 3}


def test_routing_load_in_progress_and_not_coordinator():
    c = GroupCoordinator(CoordinatorConfig(), random.Random(1))
    r = c.heartbeat(group_id=G, member_id="m", generation_id=1, now_ms=0).response
    assert isinstance(r, NotCoordinatorError)
    c.begin_load(P)
    assert isinstance(c.offset_fetch(group_id=G).response, CoordinatorLoadInProgressError)
    assert isinstance(c.heartbeat(group_id="", member_id="m", generation_id=1, now_ms=0).response, InvalidGroupIdError)
    c.finish_load(P, 0)
    assert c.offset_fetch(group_id=G).response == {"partitions": []}


def test_unload_answers_pending_requests_not_coordinator():
    h = Harness()
    ids, gen = h.form(2)
    h.auto = False
    pj = h.join(h.new_id())
    pc = h.commit_offsets(ids[0], gen, offsets=[("t", 0, 1)])
    h.absorb(h.c.unload(P))
    assert isinstance(h.answer(pj), NotCoordinatorError)
    assert h.answer(pc)["partitions"][0]["error"]["code"] == "NOT_COORDINATOR"
    assert h.c.group(G) is None and h.c.pending_count() == 0
    h.absorb(h.c.on_append_committed(h.held[0].append_id, 0, h.now))  # late report: ignored
    assert isinstance(h.c.offset_fetch(group_id=G).response, NotCoordinatorError)


def test_abandoned_pending_request_is_forgotten_but_the_member_still_counts():
    h = Harness()
    ids, gen = h.form(2)
    p = h.join(h.new_id())
    h.c.abandon(p.key)
    h.join(ids[0])
    h.join(ids[1])
    assert p.key not in h.answers and h.group().generation_id == gen + 1 and len(h.group().members) == 3


# ---- ListGroups / DescribeGroups / DeleteGroups ----------------------------------------


def test_list_and_describe():
    h = Harness()
    ids, gen = h.form(2)
    assert h.call("list_groups")["groups"] == [{"group_id": G, "protocol_type": "consumer", "state": "Stable", "type": "classic"}]
    assert h.call("list_groups", states=["Empty"])["groups"] == []
    (d, unknown) = h.call("describe_groups", group_ids=[G, "nope"])["groups"]
    assert d["state"] == "Stable" and d["protocol"] == "range"
    assert [(m["member_id"], m["assignment"]) for m in d["members"]] == [(i, f"assign-{i}".encode()) for i in ids]
    assert d["members"][0]["metadata"] == b"sub" and d["members"][0]["client_host"] == "10.0.0.1"
    assert unknown["state"] == "Dead" and unknown["members"] == []
    h.join(h.new_id())
    (d,) = h.call("describe_groups", group_ids=[G])["groups"]
    assert d["state"] == "PreparingRebalance" and d["protocol"] == "" and d["members"][0]["assignment"] == b""


def test_delete_group_only_when_empty():
    h = Harness()
    assert isinstance(h.call("delete_group", group_id=G), GroupIdNotFoundError)
    ids, gen = h.form(1)
    h.commit_offsets(ids[0], gen)
    assert isinstance(h.call("delete_group", group_id=G), NonEmptyGroupError)
    h.call("leave_group", group_id=G, members=[(ids[0], None)])
    assert h.group().state is GroupState.EMPTY
    assert h.call("delete_group", group_id=G) == {}
    assert h.c.group(G) is None and h.fetch() == {}
    assert fetch_all(replay(h.log[P])) == {} and replay(h.log[P]).group(G) is None


def test_delete_group_failure_leaves_it_empty():
    h = Harness(auto=False)
    h.commit_offsets()
    h.commit(h.held.pop())
    p = h.call("delete_group", group_id=G)
    assert h.group().state is GroupState.DEAD
    assert isinstance(h.commit_offsets(), CoordinatorNotAvailableError)
    h.fail(h.held.pop())
    assert isinstance(h.answer(p), CoordinatorNotAvailableError)
    assert h.group().state is GroupState.EMPTY and h.fetch() == {("t", 0): 10}


def test_delete_offsets_of_an_empty_group_kafka_offset_delete():
    h = Harness()
    assert isinstance(h.call("delete_offsets", group_id=G, partitions=[("t", 0)]), GroupIdNotFoundError)
    ids, gen = h.form(1)
    h.commit_offsets(ids[0], gen, offsets=[("t", 0, 30), ("t", 1, 7)])
    live = h.call("delete_offsets", group_id=G, partitions=[("t", 0)])
    assert [p["error"]["code"] for p in live["partitions"]] == ["GROUP_SUBSCRIBED_TO_TOPIC"]
    assert h.fetch() == {("t", 0): 30, ("t", 1): 7}
    h.call("leave_group", group_id=G, members=[(ids[0], None)])
    done = h.call("delete_offsets", group_id=G, partitions=[("t", 0), ("t", 5)])
    assert done == {"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 5}]}
    assert h.fetch() == {("t", 1): 7} and fetch_all(replay(h.log[P])) == {("t", 1): 7}


# ---- offset reset ----------------------------------------------------------------------



def test_reset_offsets_only_for_an_empty_group_with_dry_run():
    h = Harness()
    ids, gen = h.form(1)
    h.commit_offsets(ids[0], gen, offsets=[("t", 0, 30)])
    plan = {("t", 0): 5, ("t", 1): 0}
    assert isinstance(h.call("reset_offsets", group_id=G, offsets=plan), NonEmptyGroupError)
    h.call("leave_group", group_id=G, members=[(ids[0], None)])
    appended = len(h.log[P])
    dry = h.call("reset_offsets", group_id=G, offsets=plan, dry_run=True)
    assert dry == {"dry_run": True, "partitions": [
        {"topic": "t", "partition": 0, "previous_offset": 30, "offset": 5},
        {"topic": "t", "partition": 1, "previous_offset": -1, "offset": 0}]}
    assert len(h.log[P]) == appended and h.fetch() == {("t", 0): 30}
    done = h.call("reset_offsets", group_id=G, offsets=plan)
    assert done["dry_run"] is False and h.fetch() == {("t", 0): 5, ("t", 1): 0}
    assert fetch_all(replay(h.log[P])) == {("t", 0): 5, ("t", 1): 0}  # the lower offset stands


def test_errors_carry_wire_codes():
    h = Harness()
    r = h.join()
    assert isinstance(r, RaftlogError) and r.code == "MEMBER_ID_REQUIRED" and r.member_id
