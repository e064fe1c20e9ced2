"""The client's group state machine joins, syncs, heartbeats and rebalances correctly against the pure coordinator core, and GroupCore finds and re-finds the coordinator."""

import random

import pytest

from groupcoord.coordinator import CoordinatorConfig, GroupCoordinator, Pending
from raftlog.base.errors import (
    CoordinatorNotAvailableError,
    IllegalGenerationError,
    InvalidRequestError,
    MemberIdRequiredError,
    RaftlogError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    as_wire_error,
)
from raftlog.client.core import Send
from raftlog.client.group import (
    GroupCore,
    GroupMembership,
    ResetSpec,
    parse_offset_fetch,
    plan_offset_reset,
)

TOPIC_COUNTS = {"t": 6}


class FakeCoordinator:
    """The pure core behind a request/answer function, with appends committed at once."""

    def __init__(self):
        self.core = GroupCoordinator(CoordinatorConfig(group_min_session_timeout_ms=100,
                                                       group_initial_rebalance_delay_ms=0),
                                     random.Random(1))
        self.core.begin_load(self.core.partition_for("g"))
        self.core.finish_load(self.core.partition_for("g"), 0)
        self.answers = {}
        self.offset = 0

    def _apply(self, result, now):
        while True:
            for key, resp in result.completions:
                self.answers[key] = resp
            if not result.appends:
                return result.response
            resp = result.response
            for a in result.appends:
                r = self.core.on_append_committed(a.append_id, self.offset, now)
                self.offset += len(a.records)
                for key, answer in r.completions:
                    self.answers[key] = answer
            result = type(result)(resp, (), (), None)

    def call(self, req, now):
        op = req["op"]
        if op == "join_group":
            res = self.core.join_group(group_id=req["group_id"], member_id=req["member_id"],
                                       protocol_type=req["protocol_type"],
                                       protocols=[(p["name"], p["metadata"]) for p in req["protocols"]],
                                       session_timeout_ms=req["session_timeout_ms"],
                                       rebalance_timeout_ms=req["rebalance_timeout_ms"],
                                       group_instance_id=req["group_instance_id"], now_ms=now)
        elif op == "sync_group":
            plan = None if req["assignments"] is None else {a["member_id"]: a["assignment"] for a in req["assignments"]}
            res = self.core.sync_group(group_id=req["group_id"], member_id=req["member_id"],
                                       generation_id=req["generation_id"], assignments=plan, now_ms=now)
        elif op == "heartbeat":
            res = self.core.heartbeat(group_id=req["group_id"], member_id=req["member_id"],
                                      generation_id=req["generation_id"], now_ms=now)
        else:
            raise AssertionError(op)
        return self._apply(res, now)


def wire(resp):
    """A core response as the client sees it: a dict or a raised raftlog error."""
    if isinstance(resp, RaftlogError):
        raise as_wire_error(resp)
    return resp


def rebalance(coord, members, now, rounds=20):
    """Drive every member through join and sync until all are stable and none needs a rejoin."""
    pending = {}  # member -> join key still waited for (kept across rounds)
    for _ in range(rounds):
        if all(m.stable and not m.rejoin_needed for m in members):
            return
        for m in members:
            if m.stable and not m.rejoin_needed:
                try:
                    wire(coord.call(m.heartbeat_request(), now))
                except Exception as exc:  # noqa: BLE001 - sorted by the membership itself
                    m.on_heartbeat_error(exc, now)
            if m.rejoin_needed and m not in pending:
                if m.assignment and not m.cooperative:
                    m.revoke_all()
                resp = coord.call(m.join_request(), now)
                if isinstance(resp, Pending):
                    pending[m] = resp.key
                    continue
                try:
                    m.on_join_ok(wire(resp))
                except Exception as exc:  # noqa: BLE001 - sorted by the membership itself
                    m.on_join_error(exc)
                    continue
                pending[m] = None
        coord.core.tick(now)
        joined = []
        for m, key in list(pending.items()):
            resp = coord.answers.pop(key, None) if key is not None else "ok"
            if resp is None:
                continue
            del pending[m]
            if key is not None:
                try:
                    m.on_join_ok(wire(resp))
                except Exception as exc:  # noqa: BLE001
                    m.on_join_error(exc)
                    continue
            joined.append(m)
        leaders_first = sorted(joined, key=lambda m: not m.is_leader)
        keys = {}
        for m in leaders_first:
            plan = m.assign(TOPIC_COUNTS) if m.is_leader else None
            resp = coord.call(m.sync_request(plan), now)
            keys[m] = resp
        for m, resp in keys.items():
            if isinstance(resp, Pending):
                resp = coord.answers.pop(resp.key, None)
                if resp is None:
                    continue
            try:
                m.on_sync_ok(wire(resp), now)
            except Exception as exc:  # noqa: BLE001
                m.on_sync_error(exc)
    raise AssertionError("no stable group")


def member(strategy="range", **kw):
    return GroupMembership("g", assignors=(strategy,), session_timeout_ms=1000, heartbeat_interval_ms=100,
                           rebalance_timeout_ms=1000, **kw)


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "sticky", "cooperative-sticky"])
def test_three_members_split_six_partitions_then_a_fourth_joins(strategy):
    coord = FakeCoordinator()
    ms = [member(strategy) for _ in range(3)]
    for m in ms:
        m.subscribe(["t"])
    rebalance(coord, ms, 0)
    owned = [set(m.assignment) for m in ms]
    assert all(len(o) == 2 for o in owned)
    assert set().union(*owned) == {("t", p) for p in range(6)}
    # A fourth member: everyone learns of the rebalance through its heartbeat.
    ms.append(member(strategy))
    ms[-1].subscribe(["t"])
    rebalance(coord, ms, 10)
    owned = [set(m.assignment) for m in ms]
    assert sorted(len(o) for o in owned) == [1, 1, 2, 2]
    assert sum(len(o) for o in owned) == 6 and set().union(*owned) == {("t", p) for p in range(6)}
    generations = {m.generation_id for m in ms}
    assert len(generations) == 1


def test_member_id_required_is_adopted_and_stale_members_reset():
    m = member()
    m.subscribe(["t"])
    assert m.on_join_error(MemberIdRequiredError("rejoin", member_id="abc")) == "rejoin"
    assert m.member_id == "abc" and m.join_request()["member_id"] == "abc"
    m.generation_id = 4
    assert m.on_join_error(UnknownMemberIdError("gone")) == "rejoin"
    assert (m.member_id, m.generation_id) == ("", -1)
    with pytest.raises(ValueError):
        GroupMembership("g", assignors=("nope",))


def test_heartbeat_errors_and_auto_commit_timing():
    m = member(enable_auto_commit=True, auto_commit_interval_ms=500)
    m.subscribe(["t"])
    m.member_id, m.generation_id = "m1", 3
    added, revoked = m.on_sync_ok({"assignment": b""}, 1000)
    assert (added, revoked) == ([], [])
    assert not m.heartbeat_due(1050) and m.heartbeat_due(1100)
    assert not m.auto_commit_due(1499) and m.auto_commit_due(1500)
    m.auto_committed(1500)
    assert not m.auto_commit_due(1999)
    m.on_heartbeat_error(RebalanceInProgressError("x"), 1200)
    assert m.rejoin_needed and m.member_id == "m1"
    m.rejoin_needed = False
    m.on_heartbeat_error(IllegalGenerationError("x"), 1300)
    assert m.rejoin_needed and not m.stable
    m.on_heartbeat_error(UnknownMemberIdError("x"), 1300)
    assert m.member_id == "" and m.generation_id == -1
    req = m.commit_request({("t", 1): 7})
    assert req["generation_id"] == -1 and req["offsets"] == [{"topic": "t", "partition": 1, "offset": 7, "metadata": ""}]


def test_cooperative_revocation_asks_for_another_round():
    m = member("cooperative-sticky")
    m.subscribe(["t"])
    m.protocol_name = "cooperative-sticky"
    from raftlog.client.assignor import Assignment, encode_assignment
    m.on_sync_ok({"assignment": encode_assignment(Assignment((("t", 0), ("t", 1))))}, 0)
    assert not m.rejoin_needed
    added, revoked = m.on_sync_ok({"assignment": encode_assignment(Assignment((("t", 1),)))}, 0)
    assert revoked == [("t", 0)] and added == [] and m.rejoin_needed
    assert m.join_request()["protocols"][0]["name"] == "cooperative-sticky"


def _sends(core, now):
    return [a for a in core.poll(now) if isinstance(a, Send)]


def test_group_core_finds_and_refinds_the_coordinator():
    core = GroupCore(["127.0.0.1:1"], "g", rng=random.Random(0), request_timeout_ms=5000)
    call = core.coord_call({"op": "heartbeat", "group_id": "g"}, 0, 10_000)
    first = _sends(core, 0)
    assert [s.request["op"] for s in first] == ["find_coordinator"]
    core.on_response(first[0].broker_id, {"id": first[0].request["id"], "ok": True, "node_id": 2,
                                          "host": "h", "port": 9}, 1)
    assert core.address(2) == ("h", 9)
    sent = _sends(core, 2)
    assert [(s.broker_id, s.request["op"]) for s in sent] == [(2, "heartbeat")]
    core.on_response(2, {"id": sent[0].request["id"], "error": {"code": "NOT_COORDINATOR", "message": ""}}, 3)
    assert core.coordinator_id is None and not call.done
    again = []
    now = 3
    while not again and now < 5000:
        now += 50
        again = _sends(core, now)
    assert again and again[0].request["op"] == "find_coordinator"
    core.on_response(again[0].broker_id, {"id": again[0].request["id"], "ok": True, "node_id": 3,
                                          "host": "h3", "port": 9}, now)
    sent = []
    while not sent:
        now += 50
        sent = _sends(core, now)
    assert sent[0].broker_id == 3
    core.on_response(3, {"id": sent[0].request["id"], "error": {"code": "UNKNOWN_MEMBER_ID", "message": ""}}, now)
    assert call.done and isinstance(call.error, UnknownMemberIdError)


def test_group_core_gives_up_at_the_deadline():
    core = GroupCore(["127.0.0.1:1"], "g", rng=random.Random(0), request_timeout_ms=1000)
    call = core.coord_call({"op": "heartbeat", "group_id": "g"}, 0, 300)
    now = 0
    while not call.done and now < 2000:
        for s in _sends(core, now):
            core.on_response(s.broker_id, {"id": s.request["id"],
                                           "error": {"code": "COORDINATOR_NOT_AVAILABLE", "message": ""}}, now)
        now += 20
    assert call.done and now <= 400
    with pytest.raises(Exception):
        call.value()
    assert parse_offset_fetch({"partitions": [{"topic": "t", "partition": 0, "offset": -1},
                                              {"topic": "t", "partition": 1, "offset": 5}]}) == {
        ("t", 0): None, ("t", 1): 5}
    assert CoordinatorNotAvailableError.retriable



def _commit_answered(core, call, answers):
    """Find coordinator 2, then answer each commit the core sends with the next of `answers`
    (a list of per-partition error codes, None = ok); returns how many commits were sent."""
    now, sent = 0, 0
    while not call.done and now < 20_000:
        for s in _sends(core, now):
            if s.request["op"] == "find_coordinator":
                core.on_response(s.broker_id, {"id": s.request["id"], "ok": True, "node_id": 2,
                                               "host": "h", "port": 9}, now)
                continue
            codes = answers[min(sent, len(answers) - 1)]
            sent += 1
            core.on_response(2, {"id": s.request["id"], "ok": True, "partitions": [
                {"topic": "t", "partition": p, **({} if c is None else {"error": {"code": c, "message": ""}})}
                for p, c in enumerate(codes)]}, now)
        now += 20
    return sent


def test_a_sync_commit_is_retried_while_its_partitions_fail_only_with_coordinator_errors():
    def commit(retry_commit):
        core = GroupCore(["127.0.0.1:1"], "g", rng=random.Random(0), request_timeout_ms=5000)
        return core, core.coord_call({"op": "offset_commit", "group_id": "g"}, 0, 5000, retry_commit=retry_commit)

    # The append did not land (the coordinator moved, then timed out): sent again, then ok.
    core, call = commit(True)
    sent = _commit_answered(core, call, [["NOT_COORDINATOR", "NOT_COORDINATOR"],
                                         ["COORDINATOR_NOT_AVAILABLE", None], [None, None]])
    assert sent == 3 and call.value()["partitions"][0].get("error") is None
    # An async commit (no retry_commit) ends with the answer, errors and all.
    core, call = commit(False)
    assert _commit_answered(core, call, [["COORDINATOR_NOT_AVAILABLE", None], [None, None]]) == 1
    assert call.value()["partitions"][0]["error"]["code"] == "COORDINATOR_NOT_AVAILABLE"
    # A partition error a resend cannot cure ends a sync commit at once.
    core, call = commit(True)
    assert _commit_answered(core, call, [["COORDINATOR_NOT_AVAILABLE", "OFFSET_METADATA_TOO_LARGE"],
                                         [None, None]]) == 1
    # Retried until the call's deadline, then the coordinator error is the call's error.
    core, call = commit(True)
    assert _commit_answered(core, call, [["REQUEST_TIMED_OUT", None]]) > 2
    with pytest.raises(RaftlogError) as failed:
        call.value()
    assert failed.value.code == "REQUEST_TIMED_OUT"


# ---- offset reset planning (the admin's side) ------------------------------------------


BOUNDS = {("t", 0): (5, 50), ("t", 1): (0, 8)}


@pytest.mark.parametrize(
    "spec, ts, expected",
    [
        (ResetSpec("earliest"), None, {("t", 0): 5, ("t", 1): 0}),
        (ResetSpec("latest"), None, {("t", 0): 50, ("t", 1): 8}),
        (ResetSpec("offset", 7), None, {("t", 0): 7, ("t", 1): 7}),
        (ResetSpec("offset", 1), None, {("t", 0): 5, ("t", 1): 1}),      # clamped to log start
        (ResetSpec("offset", 99), None, {("t", 0): 50, ("t", 1): 8}),    # clamped to log end
        (ResetSpec("timestamp", 1000), {("t", 0): 20, ("t", 1): None}, {("t", 0): 20, ("t", 1): 8}),
    ],
)
def test_plan_offset_reset(spec, ts, expected):
    assert plan_offset_reset(spec, BOUNDS, ts) == expected


def test_plan_offset_reset_rejections():
    with pytest.raises(InvalidRequestError):
        ResetSpec("shift")
    with pytest.raises(InvalidRequestError):
        ResetSpec("offset")
    with pytest.raises(InvalidRequestError):
        plan_offset_reset(ResetSpec("timestamp", 5), BOUNDS, {})
