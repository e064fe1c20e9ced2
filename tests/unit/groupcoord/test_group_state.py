"""The group state machine allows exactly Kafka's transitions, votes a protocol deterministically, and keeps its member indexes consistent."""

import pytest

from groupcoord.state import Group, GroupState, IllegalStateTransition, Member

S = GroupState
ALLOWED = {
    (S.EMPTY, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.PREPARING_REBALANCE, S.EMPTY),
    (S.COMPLETING_REBALANCE, S.STABLE),
    (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.STABLE, S.PREPARING_REBALANCE),
} | {(s, S.DEAD) for s in S}


def member(mid, protocols=(("range", b"r"),), instance=None, awaiting=False):
    return Member(mid, "client", "host", 10_000, 30_000, "consumer", tuple(protocols), instance, awaiting_join=awaiting)


@pytest.mark.parametrize("src", list(S))
@pytest.mark.parametrize("dst", list(S))
def test_transition_table(src, dst):
    g = Group("g", state=src)
    if (src, dst) in ALLOWED:
        g.transition_to(dst, 5)
        assert g.state is dst and g.state_timestamp_ms == 5
    else:
        with pytest.raises(IllegalStateTransition):
            g.transition_to(dst, 5)
        assert g.state is src


def test_first_member_sets_type_and_leader_and_leader_moves_on_removal():
    g = Group("g")
    g.add(member("a", awaiting=True))
    g.add(member("b", instance="i-b"))
    assert g.protocol_type == "consumer" and g.leader_id == "a"
    assert g.static_members == {"i-b": "b"} and g.num_awaiting_join == 1
    g.remove("a")
    assert g.leader_id == "b" and g.num_awaiting_join == 0
    g.remove("b")
    assert g.leader_id is None and g.static_members == {}
    g.check()


@pytest.mark.parametrize(
    "prefs, expected",
    [
        ([["range", "roundrobin"], ["roundrobin", "range"], ["roundrobin", "range"]], "roundrobin"),
        ([["range", "roundrobin"], ["roundrobin", "range"]], "range"),            # tie: leader's order
        ([["roundrobin", "range"], ["range", "roundrobin"]], "roundrobin"),       # tie: leader's order
        ([["sticky", "range"], ["range"], ["sticky", "range"]], "range"),          # only common ones count
    ],
)
def test_protocol_vote(prefs, expected):
    g = Group("g")
    for i, names in enumerate(prefs):
        g.add(member(f"m{i}", [(n, b"") for n in names]))
    assert g.select_protocol() == expected


def test_supports_protocols():
    g = Group("g")
    assert g.supports_protocols("consumer", ("range",))
    assert not g.supports_protocols("", ("range",))
    assert not g.supports_protocols("consumer", ())
    g.add(member("a", [("range", b""), ("sticky", b"")]))
    g.add(member("b", [("sticky", b""), ("range", b"")]))
    assert g.supports_protocols("consumer", ("roundrobin", "sticky"))
    assert not g.supports_protocols("consumer", ("roundrobin",))
    assert not g.supports_protocols("connect", ("range",))


def test_join_bookkeeping():
    g = Group("g", state=S.PREPARING_REBALANCE)
    a, b = member("a"), member("b")
    g.add(a)
    g.add(b)
    assert not g.has_all_members_joined() and g.not_yet_rejoined() == ["a", "b"]
    g.set_awaiting_join(a, True)
    g.set_awaiting_join(a, True)  # idempotent
    assert g.num_awaiting_join == 1
    g.maybe_elect_joined_leader()
    assert g.leader_id == "a"
    g.set_awaiting_join(b, True)
    g.pending_members["p"] = 100
    assert not g.has_all_members_joined()
    del g.pending_members["p"]
    assert g.has_all_members_joined()
    g.check()


def test_joined_member_becomes_leader_when_the_leader_did_not_rejoin():
    g = Group("g")
    g.add(member("a"))
    g.add(member("b", awaiting=True))
    g.maybe_elect_joined_leader()
    assert g.leader_id == "b"


def test_next_generation():
    g = Group("g", state=S.PREPARING_REBALANCE, generation_id=4)
    g.add(member("a", awaiting=True))
    g.init_next_generation(9)
    assert (g.state, g.generation_id, g.protocol_name) == (S.COMPLETING_REBALANCE, 5, "range")
    g.remove("a")
    g.transition_to(S.PREPARING_REBALANCE, 10)
    g.init_next_generation(11)
    assert (g.state, g.generation_id, g.protocol_name) == (S.EMPTY, 6, None)
    g.check()


def test_replace_static_member_keeps_place_leadership_and_assignment():
    g = Group("g", state=S.STABLE, generation_id=1, protocol_name="range")
    old = member("old", instance="i")
    old.assignment = b"A"
    g.add(old)
    g.add(member("b"))
    m = g.replace_static_member("i", "old", "new")
    assert list(g.members) == ["new", "b"] and g.leader_id == "new"
    assert m.member_id == "new" and m.assignment == b"A" and g.static_members == {"i": "new"}
    assert g.is_static_member_fenced("old", "i") and not g.is_static_member_fenced("new", "i")
    assert not g.is_static_member_fenced("x", None)
    g.check()
