"""The trio consumer's group half without a network: options and defaults match the blocking shell's, callbacks may be plain or async, positions come from the consumer core, and calls fail fast once the group's driver is gone."""

import inspect

import pytest
import trio

from raftlog import aio
from raftlog.client import Consumer
from raftlog.client.core import Call
from raftlog.client.errors import ClientClosedError
from raftlog.client.group_aio import TrioGroup, call_back

BOOT = "127.0.0.1:1"  # never connected to: nothing here does I/O
MEMBERSHIP_FIELDS = ("group_id", "assignors", "session_timeout_ms", "rebalance_timeout_ms",
                     "heartbeat_interval_ms", "group_instance_id", "client_id", "enable_auto_commit",
                     "auto_commit_interval_ms")


def membership_view(consumer) -> dict:
    m = consumer._group.membership
    return {f: getattr(m, f) for f in MEMBERSHIP_FIELDS}


@pytest.mark.parametrize("kw", [
    {},
    {"enable_auto_commit": False, "auto_commit_interval_ms": 700, "session_timeout_ms": 3000,
     "heartbeat_interval_ms": 300, "rebalance_timeout_ms": 9000, "group_instance_id": "i-1",
     "partition_assignment_strategy": ("cooperative-sticky",), "client_id": "me"},
    {"max_poll_interval_ms": 4000, "partition_assignment_strategy": "roundrobin"},
])
def test_group_options_and_defaults_match_the_blocking_consumer(kw):
    blocking = Consumer(BOOT, group_id="g", **kw)
    try:
        trio_side = aio.Consumer(BOOT, group_id="g", **kw)
        assert membership_view(trio_side) == membership_view(blocking)
    finally:
        blocking.close()


def test_constructor_names_the_group_options_and_rejects_bad_ones():
    params = inspect.signature(aio.Consumer.__init__).parameters
    for name in ("group_id", "enable_auto_commit", "auto_commit_interval_ms", "session_timeout_ms",
                 "heartbeat_interval_ms", "rebalance_timeout_ms", "partition_assignment_strategy",
                 "group_instance_id"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["group_id"].default is None and params["enable_auto_commit"].default is True
    with pytest.raises(ValueError, match="heartbeat_interval_ms"):
        aio.Consumer(BOOT, group_id="g", session_timeout_ms=1000, heartbeat_interval_ms=1000)
    with pytest.raises(ValueError, match="partition_assignment_strategy"):
        aio.Consumer(BOOT, group_id="g", partition_assignment_strategy="nope")


async def test_without_a_group_there_is_nothing_to_subscribe_or_commit():
    c = aio.Consumer(BOOT)
    assert c._group is None and c.subscription() == ()
    with pytest.raises(ValueError, match="group_id"):
        c.subscribe(["t"])
    with pytest.raises(ClientClosedError):  # not entered: closed before any group question
        await c.commit()


async def test_callbacks_may_be_plain_or_async():
    seen = []

    def plain(parts):
        seen.append(("plain", parts))

    async def asynchronous(parts):
        await trio.lowlevel.checkpoint()
        seen.append(("async", parts))

    await call_back(plain, [("t", 0)])
    await call_back(asynchronous, [("t", 1)])
    await call_back(None, [("t", 2)])
    assert seen == [("plain", [("t", 0)]), ("async", [("t", 1)])]


def test_subscription_and_positions_come_from_the_membership_and_the_core():
    c = aio.Consumer(BOOT, group_id="g")
    g = c._group
    c.subscribe("t")
    assert c.subscription() == ("t",)
    with pytest.raises(ValueError):
        g.subscribe(["t"], "t.*")  # topics or a pattern, not both
    # As after a sync: the membership owns t-0 and t-1; the core knows where t-0 stands.
    g.membership.assignment = (("t", 0), ("t", 1))
    c._core.assign(g.membership.assignment)
    c._core.seek("t", 0, 42)
    assert g.positions() == {("t", 0): 42}  # t-1 has no position yet: nothing to commit
    assert g.positions(only=[("t", 1)]) == {}


async def test_calls_fail_fast_once_the_driver_is_gone():
    g = TrioGroup(aio.Consumer(BOOT)._core, BOOT, group_id="g")
    call = Call({"op": "heartbeat"}, None, 0)
    with trio.fail_after(1):
        with pytest.raises(ClientClosedError):
            await g._wait(call)
    await g.aclose()  # never started: closes without I/O, and twice is harmless
    await g.aclose()
    assert g.membership.member_id == "" and not g.membership.stable
    g.commit_async({("t", 0): 1})  # closed: dropped, not queued
    assert g.async_commits == []


class ScriptedCoordinator:
    """Stands in for TrioGroup._run/_any: one member that leads a one-member group and is
    given t-0 and t-1; t-0 has a committed offset (7), t-1 none. It can cancel the joining
    task at its first offset_fetch, as a poll cancelled mid-rebalance would be."""

    def __init__(self, strategy: str):
        self.strategy = strategy
        self.generation = 0
        self.cancel_at_fetch: trio.CancelScope | None = None

    async def run(self, req, timeout_ms=None, *, retry_commit=False):
        from raftlog.client.assignor import Assignment, encode_assignment

        await trio.lowlevel.checkpoint()
        if req["op"] == "join_group":
            self.generation += 1
            meta = req["protocols"][0]["metadata"]
            return {"member_id": "m1", "generation_id": self.generation, "protocol_name": self.strategy,
                    "leader": "m1", "members": [{"member_id": "m1", "metadata": meta}]}
        if req["op"] == "sync_group":
            assert req["assignments"] is not None  # the leader sends the plan
            return {"assignment": encode_assignment(Assignment((("t", 0), ("t", 1))))}
        if req["op"] == "offset_fetch":
            if self.cancel_at_fetch is not None:
                scope, self.cancel_at_fetch = self.cancel_at_fetch, None
                scope.cancel()
                await trio.sleep_forever()
            return {"partitions": [{"topic": "t", "partition": 0, "offset": 7},
                                   {"topic": "t", "partition": 1, "offset": -1}]}
        raise AssertionError(req["op"])

    async def any(self, req, timeout_ms=None):
        await trio.lowlevel.checkpoint()
        assert req["op"] == "metadata"
        return {"brokers": [], "topics": [{"name": "t", "partitions": [
            {"partition": p, "leader": 1, "leader_epoch": 0, "replicas": [1]} for p in range(2)]}]}


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
async def test_a_join_cancelled_before_positions_is_redone_from_committed_offsets(strategy):
    c = aio.Consumer(BOOT, group_id="g", auto_offset_reset="earliest", partition_assignment_strategy=strategy)
    g = c._group
    coord = ScriptedCoordinator(strategy)
    g._run, g._any = coord.run, coord.any
    assigned = []
    c.subscribe(["t"], on_assigned=lambda parts: assigned.append(sorted(parts)))
    with trio.CancelScope() as scope:
        coord.cancel_at_fetch = scope
        await g.before_poll()
    assert scope.cancelled_caught
    # Synced, but the consumer never got its committed offsets: the next poll joins again.
    assert g.membership.rejoin_needed and assigned == []
    assert g.unpositioned == {("t", 0), ("t", 1)}
    await g.before_poll()
    assert not g.membership.rejoin_needed and coord.generation == 2
    assert assigned == [[("t", 0), ("t", 1)]]
    assert c._core.position("t", 0) == 7  # the committed offset, not auto_offset_reset
    assert c._core._assigned[("t", 1)].fetch_position is None  # none committed: reset applies
    assert g.unpositioned == set()


def test_group_metadata_is_public_in_both_shells():
    blocking = Consumer(BOOT, group_id="g", group_instance_id="i-1")
    try:
        for c in (blocking, aio.Consumer(BOOT, group_id="g", group_instance_id="i-1")):
            meta = c.group_metadata()
            assert (meta.group_id, meta.generation_id, meta.member_id, meta.group_instance_id,
                    meta.assignment) == ("g", -1, "", "i-1", ())
            c._group.membership.generation_id = 7  # as a completed join leaves it
            assert c.group_metadata().generation_id == 7
        assert aio.Consumer(BOOT).group_metadata() is None
    finally:
        blocking.close()
    plain = Consumer(BOOT)
    try:
        assert plain.group_metadata() is None
    finally:
        plain.close()
