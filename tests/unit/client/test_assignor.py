"""The assignors give every subscribed partition to exactly one subscribed member, balance, stay sticky across membership changes, and cooperative-sticky never hands over a partition its owner has not revoked."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.client.assignor import (
    ASSIGNORS,
    Assignment,
    Subscription,
    assign,
    cooperative_sticky_assign,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
    roundrobin_assign,
    sticky_assign,
)

TOPICS = {"t0": 3, "t1": 3}


def subs(members, topics=("t0", "t1"), owned=None, generation=1):
    owned = owned or {}
    return {m: Subscription(tuple(topics), tuple(owned.get(m, ())), generation) for m in members}


def flat(result):
    return sorted(tp for tps in result.values() for tp in tps)


# ---- encodings -------------------------------------------------------------------------


def test_subscription_and_assignment_round_trip():
    s = Subscription(("b", "a"), (("a", 1), ("a", 0)), 4, b"ud")
    back = decode_subscription(encode_subscription(s), "inst")
    assert back.topics == ("a", "b") and back.owned_partitions == (("a", 0), ("a", 1))
    assert back.generation == 4 and back.user_data == b"ud" and back.group_instance_id == "inst"
    a = Assignment((("t", 2), ("t", 0)))
    assert decode_assignment(encode_assignment(a)) == Assignment((("t", 0), ("t", 2)))
    assert decode_assignment(b"") == Assignment(())


# ---- known answers (Kafka's javadoc examples) -------------------------------------------


def test_range_known_answer():
    assert range_assign(TOPICS, subs(["C0", "C1"])) == {
        "C0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)],
        "C1": [("t0", 2), ("t1", 2)],
    }


def test_roundrobin_known_answer():
    assert roundrobin_assign(TOPICS, subs(["C0", "C1"])) == {
        "C0": [("t0", 0), ("t0", 2), ("t1", 1)],
        "C1": [("t0", 1), ("t1", 0), ("t1", 2)],
    }


def test_roundrobin_skips_members_not_subscribed():
    s = {"C0": Subscription(("t0",)), "C1": Subscription(("t0", "t1")), "C2": Subscription(("t0", "t1", "t2"))}
    out = roundrobin_assign({"t0": 1, "t1": 2, "t2": 3}, s)
    assert out == {"C0": [("t0", 0)], "C1": [("t1", 0)], "C2": [("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)]}


def test_range_orders_static_members_by_instance_id():
    s = {"z-member": Subscription(("t0",), group_instance_id="a"), "a-member": Subscription(("t0",), group_instance_id="b")}
    assert range_assign({"t0": 3}, s)["z-member"] == [("t0", 0), ("t0", 1)]


def test_unknown_topics_are_left_out_and_leader_helper_encodes():
    meta = {"m1": (None, encode_subscription(Subscription(("t0", "nope"))))}
    out = assign("range", {"t0": 2}, meta)
    assert decode_assignment(out["m1"]).partitions == (("t0", 0), ("t0", 1))


# ---- properties --------------------------------------------------------------------------


@st.composite
def uniform_cases(draw):
    topics = {f"t{i}": draw(st.integers(1, 8)) for i in range(draw(st.integers(1, 3)))}
    members = [f"m{i:02d}" for i in range(draw(st.integers(1, 7)))]
    return topics, members


@st.composite
def mixed_cases(draw):
    topics = {f"t{i}": draw(st.integers(1, 6)) for i in range(draw(st.integers(1, 4)))}
    n = draw(st.integers(1, 6))
    s = {f"m{i}": Subscription(tuple(draw(st.lists(st.sampled_from(sorted(topics)), min_size=1, unique=True))))
         for i in range(n)}
    return topics, s


def check_valid(topics, s, out, complete=True):
    assert set(out) == set(s)
    seen = flat(out)
    assert len(seen) == len(set(seen)), "a partition assigned twice"
    for m, tps in out.items():
        assert all(t in s[m].topics for t, _ in tps), "assigned outside the subscription"
    wanted = sorted((t, p) for t in {t for x in s.values() for t in x.topics} if t in topics for p in range(topics[t]))
    if complete:
        assert seen == wanted


@settings(max_examples=80, deadline=None)
@given(mixed_cases(), st.sampled_from(sorted(ASSIGNORS)))
def test_every_partition_goes_to_exactly_one_subscribed_member(case, name):
    topics, s = case
    check_valid(topics, s, ASSIGNORS[name](topics, s))


@settings(max_examples=80, deadline=None)
@given(uniform_cases(), st.sampled_from(["roundrobin", "sticky", "cooperative-sticky"]))
def test_uniform_subscriptions_are_balanced_within_one(case, name):
    topics, members = case
    out = ASSIGNORS[name](topics, subs(members, topics))
    counts = [len(v) for v in out.values()]
    assert max(counts) - min(counts) <= 1


@settings(max_examples=80, deadline=None)
@given(uniform_cases())
def test_range_is_balanced_per_topic(case):
    topics, members = case
    out = range_assign(topics, subs(members, topics))
    for t in topics:
        counts = [sum(1 for tt, _ in tps if tt == t) for tps in out.values()]
        assert max(counts) - min(counts) <= 1


@settings(max_examples=100, deadline=None)
@given(uniform_cases(), st.integers(0, 3), st.integers(0, 3), st.randoms(use_true_random=False))
def test_sticky_keeps_the_optimum_across_a_membership_change(case, joining, leaving, rnd):
    topics, members = case
    before = sticky_assign(topics, subs(members, topics))
    leaving = min(leaving, len(members) - 1) if joining == 0 else min(leaving, len(members))
    survivors = sorted(rnd.sample(members, len(members) - leaving))
    newcomers = [f"n{i}" for i in range(joining)]
    after_members = survivors + newcomers
    if not after_members:
        return
    s = subs(after_members, topics, owned={m: before[m] for m in survivors}, generation=1)
    after = sticky_assign(topics, s)
    check_valid(topics, s, after)
    counts = [len(v) for v in after.values()]
    assert max(counts) - min(counts) <= 1
    kept = sum(len(set(before[m]) & set(after[m])) for m in survivors)
    total = sum(topics.values())
    min_q, num_max = divmod(total, len(after_members))
    owned = [len(before[m]) for m in survivors]
    optimum = sum(min(o, min_q) for o in owned) + min(num_max, sum(1 for o in owned if o > min_q))
    assert kept >= optimum


@settings(max_examples=100, deadline=None)
@given(uniform_cases(), st.integers(1, 3))
def test_cooperative_sticky_revokes_before_handing_over(case, joining):
    topics, members = case
    before = cooperative_sticky_assign(topics, subs(members, topics))
    everyone = members + [f"n{i}" for i in range(joining)]
    s1 = subs(everyone, topics, owned=before)
    round1 = cooperative_sticky_assign(topics, s1)
    check_valid(topics, s1, round1, complete=False)
    owner = {tp: m for m, tps in before.items() for tp in tps}
    for m, tps in round1.items():
        for tp in tps:
            assert owner.get(tp, m) == m, f"{tp} given to {m} while {owner[tp]} still owns it"
    # Owners revoke what they lost and rejoin: the second rebalance completes the move.
    s2 = subs(everyone, topics, owned=round1, generation=2)
    round2 = cooperative_sticky_assign(topics, s2)
    check_valid(topics, s2, round2)
    counts = [len(v) for v in round2.values()]
    assert max(counts) - min(counts) <= 1
    assert all(set(round1[m]) <= set(round2[m]) for m in everyone)  # nothing revoked twice


def test_sticky_conflicting_claims_go_to_the_higher_generation():
    s = {"a": Subscription(("t",), (("t", 0),), 3), "b": Subscription(("t",), (("t", 0),), 5)}
    assert sticky_assign({"t": 2}, s) == {"a": [("t", 1)], "b": [("t", 0)]}


def test_sticky_general_case_is_balanced_where_it_can_be():
    s = {"a": Subscription(("t0", "t1")), "b": Subscription(("t0",)), "c": Subscription(("t1",))}
    out = sticky_assign({"t0": 4, "t1": 2}, s)
    check_valid({"t0": 4, "t1": 2}, s, out)
    assert sorted(len(v) for v in out.values()) == [2, 2, 2]
