"""Issue 14 case 5: PySyncObj's follower deletes every entry after an append's prevLogIdx (its CRITICAL "truncating already-applied log entries"), so a rewound, shorter re-send took away entries it had acknowledged; trim_append_entries makes it delete only from a real conflict, and caps the acknowledgement and the commit index at what the leader vouched for."""

from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.node.bridge import trim_append_entries


def log_of(terms, first=1):
    return [(b"c%d" % (first + k), first + k, t) for k, t in enumerate(terms)]


def pysyncobj_follower(entries, message):
    """What PySyncObj 0.3.17's follower does with a regular append (syncobj.py ~980-1030):
    refuse on a prevLogIdx mismatch, else delete everything after prevLogIdx, add the
    message's entries, acknowledge last new index + 1, commit min(leader's, log end)."""
    first = entries[0][1]
    prev = message["prevLogIdx"]
    if prev < first or prev > entries[-1][1] or entries[prev - first][2] != message["prevLogTerm"]:
        return entries, None, None
    kept = entries[: prev - first + 1] + list(message["entries"])
    nxt = (message["entries"][-1][1] if message["entries"] else prev) + 1
    return kept, nxt, min(message["commit_index"], kept[-1][1])


def message(leader, prev, count, commit):
    first = leader[0][1]
    return {"type": "append_entries", "term": 9, "commit_index": commit, "prevLogIdx": prev,
            "prevLogTerm": leader[prev - first][2], "entries": leader[prev - first + 1: prev - first + 1 + count]}


def test_a_rewound_short_resend_no_longer_drops_acknowledged_entries():
    leader = log_of([1, 1, 2, 2, 2, 2])
    follower = list(leader)  # acknowledged everything
    m = message(leader, 2, 1, 6)  # the leader rewound to 3 and re-sends one entry
    before, _, _ = pysyncobj_follower(follower, m)
    assert len(before) == 3  # what PySyncObj alone does: entries 4..6 are gone
    trimmed, cap = trim_append_entries(m, follower)
    after, ack, commit = pysyncobj_follower(follower, trimmed)
    assert after == follower  # nothing deleted
    assert min(ack, cap) == 4 and commit == 3  # only what the message covered is vouched for


def test_a_real_conflict_is_still_cut_from_the_conflict_on():
    follower = log_of([1, 1, 2, 2])
    leader = log_of([1, 1, 3, 3, 3])
    m = message(leader, 1, 4, 5)
    trimmed, cap = trim_append_entries(m, follower)
    after, ack, _ = pysyncobj_follower(follower, trimmed)
    assert after == leader and ack == 6 and cap is None


def test_a_message_it_cannot_judge_is_left_as_it_is():
    follower = log_of([1, 1])
    leader = log_of([1, 2, 2])
    m = message(leader, 2, 1, 3)  # prevLogTerm 2 at index 2: we hold term 1 there
    assert trim_append_entries(m, follower) == (m, None)
    chunked = {"type": "append_entries", "term": 9, "transmission": "start", "data": b"",
               "prevLogIdx": 1, "prevLogTerm": 1, "commit_index": 1}
    assert trim_append_entries(chunked, follower) == (chunked, None)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_trimmed_appends_keep_every_entry_that_matches_the_leader(data):
    # Logs that obey Raft's Log Matching: a shared prefix, the leader's tail (terms 5, 6),
    # the follower holding some of that tail and then entries of a term the leader lacks.
    shared = data.draw(st.integers(1, 8))
    terms = sorted(data.draw(st.lists(st.integers(1, 3), min_size=shared, max_size=shared)))
    lead_tail = sorted(data.draw(st.lists(st.integers(5, 6), max_size=6)))
    held = data.draw(st.integers(0, len(lead_tail)))
    stale = data.draw(st.integers(0, 4))
    leader = log_of(terms + lead_tail)
    follower = log_of(terms + lead_tail[:held] + [4 if held == 0 else 7] * stale)
    prev = data.draw(st.integers(1, len(leader)))
    count = data.draw(st.integers(0, len(leader) - prev))
    commit = data.draw(st.integers(0, len(leader)))
    m = message(leader, prev, count, commit)
    trimmed, cap = trim_append_entries(m, follower)
    after, ack, new_commit = pysyncobj_follower(follower, trimmed)
    plain, plain_ack, _ = pysyncobj_follower(follower, m)
    if plain_ack is None:
        assert ack is None and after == follower
        return
    # Raft §5.3: the result is the follower's log with the message applied, deleting only
    # from the first conflict; every entry matching the leader at its index survives.
    matching = 0
    while matching < min(len(after), len(leader)) and after[matching] == leader[matching]:
        matching += 1
    for k, entry in enumerate(follower):
        if k < len(leader) and entry == leader[k] and all(follower[j] == leader[j] for j in range(k)):
            assert after[k] == entry
    vouched = prev + count
    ack_claim = min(ack, cap) if cap is not None else ack
    assert ack_claim == vouched + 1 == plain_ack  # the same claim as before, never more
    assert matching >= vouched  # the ack never claims an entry that differs from the leader's
    assert new_commit <= vouched  # nothing past what the leader vouched for is applied
