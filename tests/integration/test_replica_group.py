"""Fast integration test of the data path: three ReplicaManagers in ONE trio process over real loopback peer/client listeners, temp dirs and a static metadata image (acks=all, failover, divergence, idempotent retries)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from types import MappingProxyType

import pytest
import trio

from metadata.image import BrokerRegistration, MetadataImage, PartitionState, TopicImage
from partition.batch import BatchBuilder, decode_batches
from partition.manager import ReplicaManager
from partition.replica_settings import ReplicaSettings
from raftlog.base.errors import (
    InvalidRequestError,
    NotControllerError,
    PeerUnavailableError,
    RaftlogError,
    RequestTimedOutError,
)
from raftlog.base.peer import PeerPool
from raftlog.base.protocol import PEER_MAX_FRAME_BYTES
from raftlog.node.authorize import Guard
from raftlog.node.native_partition import partition_handlers
from raftlog.node.config import NodeConfig
from raftlog.node.server import serve
from raftlog.node.settings import partition_settings

TOPIC = "events"
SETTINGS = ReplicaSettings(tick_ms=20, election_timeout_ms=300, fetch_max_wait_ms=100)
WAIT_S = 10.0


class FakeMetadata:
    """What ReplicaManager uses of the MetadataService, over a static image."""

    controller_id = None

    def __init__(self, group: "Group", node_id: int):
        self.group = group
        self.node_id = node_id
        self.reports: list[tuple[str, int, int, int]] = []
        self._next_pid = node_id * 1000
        self.controller_down: BaseException | None = None  # raised by allocate_producer_ids

    @property
    def image(self) -> MetadataImage:
        return self.group.image

    def peer_address(self, broker_id: int) -> str | None:
        return self.group.peer_addresses.get(broker_id)

    def client_address(self, broker_id: int) -> str | None:
        return self.group.client_addresses.get(broker_id)

    async def report_partition_leaders(self, reports, **kw):
        self.reports.extend((r.topic, r.partition, r.leader, r.leader_epoch) for r in reports)
        return [{"changed": True} for _ in reports]

    async def allocate_producer_ids(self, **kw):
        if self.controller_down is not None:
            raise self.controller_down
        first = self._next_pid
        self._next_pid += 10
        return first, 10


def _image(partitions: int, configs: dict | None = None) -> MetadataImage:
    brokers = {
        i: BrokerRegistration(i, f"inc{i}", "127.0.0.1", 1, "127.0.0.1", 1, None, False)
        for i in (1, 2, 3)
    }
    parts = tuple(PartitionState(p, (1, 2, 3), 1 + p % 3, -1, 0) for p in range(partitions))
    topic = TopicImage(TOPIC, "tid-1", False, partitions, MappingProxyType(configs or {}), parts)
    return MetadataImage(brokers=MappingProxyType(brokers),
                         topics=MappingProxyType({"tid-1": topic}),
                         topic_ids=MappingProxyType({TOPIC: "tid-1"}))


class Group:
    def __init__(self, tmp_path, nursery: trio.Nursery, client: PeerPool, partitions: int = 1,
                 configs: dict | None = None):
        self.tmp_path = tmp_path
        self.nursery = nursery
        self.client = client
        self.image = _image(partitions, configs)
        self.peer_addresses: dict[int, str] = {}
        self.client_addresses: dict[int, str] = {}
        self.managers: dict[int, ReplicaManager] = {}
        self.scopes: dict[int, trio.CancelScope] = {}
        self.stopped: dict[int, trio.Event] = {}

    async def start(self, i: int) -> None:
        self.managers[i] = await self.nursery.start(self._node, i)

    async def stop(self, i: int, *, forget_address: bool = True) -> None:
        """Stop node i; `forget_address=False` keeps its (now refusing) address in the image,
        as the metadata keeps a dead broker's until it re-registers."""
        self.scopes.pop(i).cancel()
        await self.stopped.pop(i).wait()
        self.managers.pop(i)
        if forget_address:
            self.peer_addresses.pop(i, None)
            self.client_addresses.pop(i, None)

    async def _node(self, i: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
        scope = self.scopes[i] = trio.CancelScope()
        stopped = self.stopped[i] = trio.Event()
        try:
            with scope:
                pool = PeerPool(i, backoff_max_s=0.2)
                settings = replace(partition_settings(NodeConfig(node_id=i, data_dir=self.tmp_path / f"node{i}")),
                                   replica=SETTINGS)
                mgr = ReplicaManager(settings, FakeMetadata(self, i), pool)
                async with trio.open_nursery() as n:
                    await n.start(pool.run)
                    listen = partial(serve, host="127.0.0.1", port=0, request_timeout_ms=10_000,
                                     max_frame_bytes=PEER_MAX_FRAME_BYTES)
                    peer_port = await n.start(partial(listen, mgr.peer_handlers, name="peer"))
                    client_port = await n.start(partial(listen, partition_handlers(mgr.port, Guard(None)), name="client"))
                    self.peer_addresses[i] = f"127.0.0.1:{peer_port}"
                    self.client_addresses[i] = f"127.0.0.1:{client_port}"
                    await n.start(mgr.run)
                    mgr.on_image(self.image)
                    task_status.started(mgr)
        finally:
            stopped.set()

    def leader(self, partition: int = 0) -> int | None:
        leaders = [i for i, m in self.managers.items()
                   if (r := m.replica(TOPIC, partition)) is not None and r.is_leader
                   and r.core.may_accept_writes]
        return leaders[0] if len(leaders) == 1 else None

    async def wait_leader(self, partition: int = 0, *, not_: int | None = None) -> int:
        with trio.fail_after(WAIT_S):
            while (leader := self.leader(partition)) is None or leader == not_:
                await trio.sleep(0.01)
        return leader

    async def call(self, i: int, op: str, **fields):
        return await self.client.call(self.client_addresses[i], op, fields, timeout_s=WAIT_S)

    async def produce(self, i: int, records: bytes, *, acks: int = -1, partition: int = 0,
                      timeout_ms: int = 5000) -> dict:
        r = await self.call(i, "produce", acks=acks, timeout_ms=timeout_ms,
                            partitions=[{"topic": TOPIC, "partition": partition,
                                         "records": records}])
        return r["partitions"][0]

    async def produce_to_leader(self, records: bytes, *, partition: int = 0) -> dict:
        """Produce to whoever leads `partition`, following a leader change (an election on a
        loaded machine) until WAIT_S; any other answer is returned."""
        with trio.fail_after(WAIT_S):
            while True:
                out = await self.produce(await self.wait_leader(partition), records,
                                         partition=partition)
                if out.get("error", {}).get("code") != "NOT_LEADER":
                    return out

    async def read_all(self, i: int, partition: int = 0) -> list[bytes]:
        values, offset = [], 0
        while True:
            r = await self.call(i, "fetch", max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                                partitions=[{"topic": TOPIC, "partition": partition,
                                             "fetch_offset": offset}])
            p = r["partitions"][0]
            assert "error" not in p, p
            if not p["records"]:
                return values
            for h, recs in decode_batches(p["records"]):
                if not h.is_control:
                    values += [rec.value for rec in recs if rec.offset >= offset]
                offset = h.next_offset


def _batch(*values: bytes, pid: int = -1, seq: int = -1) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq)
    for v in values:
        b.append(v, None, timestamp_ms=1_700_000_000_000)
    return b.build()


@pytest.fixture
def configs():
    return {}


@pytest.fixture
async def group(tmp_path, nursery, configs):
    client = PeerPool(0, backoff_max_s=0.2)
    await nursery.start(client.run)
    g = Group(tmp_path, nursery, client, configs=configs)
    for i in (1, 2, 3):
        await g.start(i)
    yield g
    for i in list(g.scopes):
        await g.stop(i)


def _whole_log(log) -> bytes:
    """Every batch from the log start (log.read stops at a segment end)."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 30)
        out.append(data)
        offset = [h for h in decode_batches(data)][-1][0].next_offset
    return b"".join(out)


async def _wait_logs_equal(g: Group, nodes, partition: int = 0) -> None:
    with trio.fail_after(WAIT_S):
        while True:
            reps = [g.managers[i].replica(TOPIC, partition) for i in nodes]
            if None in reps:  # still opening
                await trio.sleep(0.02)
                continue
            ends = {r.log.log_end_offset for r in reps}
            if len(ends) == 1 and all(r.core.flushed_offset == r.log.log_end_offset for r in reps):
                datas = {_whole_log(r.log) for r in reps}
                if len(datas) == 1:
                    return
            await trio.sleep(0.02)


async def test_acks_all_produce_is_read_back_and_replicated_byte_for_byte(group):
    leader = await group.wait_leader()
    assert leader == 1  # the preferred leader of a new partition runs at once
    out = await group.produce(leader, _batch(b"a", b"b", b"c"))
    assert out["base_offset"] == 0  # a new partition's leader writes no control batch
    out = await group.produce(leader, _batch(b"d"), acks=1)
    assert out["base_offset"] == 3
    out = await group.produce(leader, _batch(b"e"))  # commits everything before it too
    assert out["base_offset"] == 4
    assert await group.read_all(leader) == [b"a", b"b", b"c", b"d", b"e"]
    await _wait_logs_equal(group, (1, 2, 3))
    follower = 2 if leader != 2 else 3
    entry = await group.produce(follower, _batch(b"x"))
    assert entry["error"]["code"] == "NOT_LEADER" and entry["error"]["leader_id"] == leader
    assert entry["error"]["leader"] == group.client_addresses[leader]
    assert group.managers[leader].metadata.reports[-1][2:] == (leader, 1)


async def test_leader_loss_elects_a_new_leader_that_keeps_acked_writes_and_dedupes_retries(group):
    leader = await group.wait_leader()
    first = await group.produce(leader, _batch(b"p0", pid=77, seq=0))
    await group.produce(leader, _batch(b"w1"))
    await group.stop(leader)
    new = await group.wait_leader(not_=leader)
    # The retry of an acknowledged idempotent batch gets its original offset from the new
    # leader (producer state came with the replicated headers), and nothing is appended.
    end_before = group.managers[new].replica(TOPIC, 0).log.log_end_offset
    again = await group.produce(new, _batch(b"p0", pid=77, seq=0))
    assert again["base_offset"] == first["base_offset"]
    assert group.managers[new].replica(TOPIC, 0).log.log_end_offset == end_before
    nxt = await group.produce(new, _batch(b"p1", pid=77, seq=1))
    assert nxt["base_offset"] >= end_before
    gap = await group.produce(new, _batch(b"p9", pid=77, seq=9))
    assert gap["error"]["code"] == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert await group.read_all(new) == [b"p0", b"w1", b"p1"]
    await group.start(leader)  # the old leader comes back as a follower and catches up
    others = tuple(group.managers)
    await _wait_logs_equal(group, others)
    assert group.managers[leader].replica(TOPIC, 0).is_leader is False


async def test_followers_of_a_stopped_leader_hear_its_port_refuse_and_elect(group):
    leader = await group.wait_leader()
    await group.produce(leader, _batch(b"before"))
    followers = [i for i in group.managers if i != leader]
    await group.stop(leader, forget_address=False)  # its listeners close: connections are refused
    new = await group.wait_leader(not_=leader)
    assert new in followers
    # The refused fetches reached the followers' cores (partition/raft.py leader_unreachable).
    assert sum(group.managers[i].replica(TOPIC, 0).core.leader_unreachable_signals for i in followers) >= 1
    await group.produce(new, _batch(b"after"))
    assert await group.read_all(new) == [b"before", b"after"]


async def test_a_broker_the_controller_fences_wakes_every_follower_of_it(group):
    # Issue 46: the controller's fence is a real death's second sign beside a refused
    # connection (a paused or cut-off process refuses nothing): every follower of the fenced
    # broker drops its lease and runs soon, quiescent or not. Here the fenced leader still
    # answers, so the pre-vote may keep it; either way one leader takes writes after.
    leader = await group.wait_leader()
    await group.produce(leader, _batch(b"before"))
    followers = [i for i in group.managers if i != leader]

    def signals() -> int:
        return sum(group.managers[i].replica(TOPIC, 0).core.leader_unreachable_signals for i in followers)

    before = signals()
    brokers = dict(group.image.brokers)
    brokers[leader] = replace(brokers[leader], fenced=True)
    group.image = replace(group.image, brokers=MappingProxyType(brokers))
    for i in followers:
        group.managers[i].on_image(group.image)
    with trio.fail_after(WAIT_S):
        while signals() < before + len(followers):
            await trio.sleep(0.01)
    out = await group.produce_to_leader(_batch(b"after"))
    assert "error" not in out, out
    assert await group.read_all(await group.wait_leader()) == [b"before", b"after"]


async def test_a_follower_that_diverged_is_truncated_to_the_new_leaders_log(group):
    leader = await group.wait_leader()
    await group.produce(leader, _batch(b"committed"))
    await _wait_logs_equal(group, (1, 2, 3))
    followers = [i for i in (1, 2, 3) if i != leader]
    for i in followers:
        await group.stop(i)
    # Appended on the old leader only (acks=1): never committed.
    out = await group.produce(leader, _batch(b"lost-1", b"lost-2"), acks=1)
    lost_at = out["base_offset"]
    timed_out = await group.produce(leader, _batch(b"lost-3"), acks=-1, timeout_ms=200)
    assert timed_out["error"]["code"] == "REQUEST_TIMED_OUT"  # no majority: unknown outcome
    await group.stop(leader)
    for i in followers:
        await group.start(i)
    new = await group.wait_leader()
    assert new in followers
    await group.produce(new, _batch(b"after"))
    await group.start(leader)
    await _wait_logs_equal(group, (1, 2, 3))
    old = group.managers[leader].replica(TOPIC, 0)
    assert old.log.log_end_offset > lost_at
    assert await group.read_all(new) == [b"committed", b"after"]


async def test_idempotent_duplicates_and_bad_input_get_their_errors(group):
    leader = await group.wait_leader()
    a = await group.produce(leader, _batch(b"x", pid=5, seq=0))
    b = await group.produce(leader, _batch(b"x", pid=5, seq=0))
    assert a["base_offset"] == b["base_offset"]
    bad = bytearray(_batch(b"y"))
    bad[-1] ^= 0xFF
    assert (await group.produce(leader, bytes(bad)))["error"]["code"] == "CORRUPT_MESSAGE"
    big = _batch(b"z" * (2 << 20))
    assert (await group.produce(leader, big))["error"]["code"] == "MESSAGE_TOO_LARGE"
    r = await group.call(leader, "fetch", max_wait_ms=0, partitions=[
        {"topic": TOPIC, "partition": 0, "fetch_offset": 999}])
    assert r["partitions"][0]["error"]["code"] == "OFFSET_OUT_OF_RANGE"
    r = await group.call(leader, "list_offsets", partitions=[
        {"topic": TOPIC, "partition": 0, "timestamp": -2},
        {"topic": TOPIC, "partition": 0, "timestamp": -1},
        {"topic": TOPIC, "partition": 0, "timestamp": 0},
        {"topic": TOPIC, "partition": 0, "timestamp": 2**62}])
    assert [p["offset"] for p in r["partitions"]] == [0, 1, 0, -1]  # one record, at offset 0
    pid = await group.call(leader, "init_producer_id")
    assert pid == {"producer_id": leader * 1000, "producer_epoch": 0}
    # Another broker, with no producer id block yet, while the controller cannot be reached:
    # an error the producer retries (NOT_CONTROLLER and PEER_UNAVAILABLE would fail its
    # records), then an id once the controller answers.
    other = next(i for i in group.managers if i != leader)
    for down in (PeerUnavailableError("127.0.0.1:1: cannot connect"), NotControllerError("none known"),
                 RequestTimedOutError("no answer")):
        group.managers[other].metadata.controller_down = down
        with pytest.raises(RaftlogError) as err:
            await group.call(other, "init_producer_id")
        assert err.value.code == "COORDINATOR_LOAD_IN_PROGRESS" and err.value.retriable
    group.managers[other].metadata.controller_down = None
    assert await group.call(other, "init_producer_id") == {"producer_id": other * 1000, "producer_epoch": 0}
    r = await group.call(leader, "fetch", partitions=[{"topic": "nope", "partition": 0,
                                                       "fetch_offset": 0}], max_wait_ms=0)
    assert r["partitions"][0]["error"]["code"] == "UNKNOWN_TOPIC_OR_PARTITION"
    with pytest.raises(RaftlogError) as err:
        await group.call(leader, "produce", acks=2, partitions=[])
    assert err.value.code == "INVALID_REQUEST"


async def test_fetch_long_poll_returns_when_data_is_committed(group):
    leader = await group.wait_leader()
    got = []

    async def poll():
        got.append(await group.call(leader, "fetch", max_wait_ms=30_000, min_bytes=1,
                                    partitions=[{"topic": TOPIC, "partition": 0,
                                                 "fetch_offset": 0}]))

    async with trio.open_nursery() as n:
        n.start_soon(poll)
        replica = group.managers[leader].replica(TOPIC, 0)
        with trio.fail_after(WAIT_S):
            while not replica._watchers:  # the fetch is parked
                await trio.sleep(0.005)
        start = trio.current_time()
        await group.produce(leader, _batch(b"wake"))
    assert trio.current_time() - start < 15  # woken by the append, not by max_wait_ms (30 s)
    [p] = got[0]["partitions"]
    assert [rec.value for _, recs in decode_batches(p["records"]) for rec in recs] == [b"wake"]


async def test_a_follower_with_a_torn_tail_cuts_it_at_start_and_refetches(group):
    leader = await group.wait_leader()
    for i in range(5):
        await group.produce(leader, _batch(b"r%d" % i))
    await _wait_logs_equal(group, (1, 2, 3))
    victim = next(i for i in (1, 2, 3) if i != leader)
    directory = group.managers[victim].replica(TOPIC, 0).directory
    await group.stop(victim)
    [segment] = sorted(directory.glob("*.log"))
    data = bytearray(segment.read_bytes())
    data[-3] ^= 0xFF  # damage the last batch: recovery must cut it
    segment.write_bytes(bytes(data))
    await group.start(victim)
    await _wait_logs_equal(group, (1, 2, 3))
    assert group.managers[victim].replica(TOPIC, 0).log.recovery.segment is not None


@pytest.mark.parametrize("configs", [{"segment_bytes": "4096", "retention_bytes": "0"}])
async def test_a_follower_behind_the_leaders_log_start_restarts_from_it(group):
    leader = await group.wait_leader()
    victim = next(i for i in (1, 2, 3) if i != leader)
    await group.stop(victim)
    for i in range(12):
        await group.produce(leader, _batch(b"%d" % i + b"x" * 1000))
    for i in group.managers:  # retention now, not after MAINTAIN_INTERVAL_S
        await group.managers[i].replica(TOPIC, 0).maintain()
    start = group.managers[leader].replica(TOPIC, 0).log.log_start_offset
    assert start > 0  # beyond everything the stopped follower has (nothing)
    await group.start(victim)
    await _wait_logs_equal(group, (1, 2, 3))
    follower = group.managers[victim].replica(TOPIC, 0)
    assert follower.log.log_start_offset == start
    await group.produce(leader, _batch(b"more"))
    await _wait_logs_equal(group, (1, 2, 3))


async def test_transfer_leadership_moves_the_leader_to_the_target(group):
    # An election on a loaded machine may move the leader at any point: produce to whoever
    # leads, then take the leader of the moment.
    assert "error" not in await group.produce_to_leader(_batch(b"before"))
    leader = await group.wait_leader()
    target = next(i for i in (1, 2, 3) if i != leader)
    # The leader refuses a target that has not fetched up to the high watermark yet (it may
    # lag a fetch on a loaded machine): ask again until it accepts.
    with trio.fail_after(WAIT_S):
        while True:
            try:
                await group.client.call(group.peer_addresses[leader], "transfer_leadership",
                                        {"topic": TOPIC, "partition": 0, "target": target},
                                        timeout_s=WAIT_S)
                break
            except InvalidRequestError as e:
                assert "is behind" in str(e), e
                await trio.sleep(0.05)
    assert await group.wait_leader(not_=leader) == target
    assert "error" not in await group.produce_to_leader(_batch(b"after"))
    assert await group.read_all(await group.wait_leader()) == [b"before", b"after"]
    with pytest.raises(RaftlogError) as err:  # only the leader can hand leadership over
        await group.client.call(group.peer_addresses[leader], "transfer_leadership",
                                {"topic": TOPIC, "partition": 0, "target": leader},
                                timeout_s=WAIT_S)
    assert err.value.code == "NOT_LEADER"


async def test_delete_records_moves_every_replicas_log_start_and_survives_failover(group):
    leader = await group.wait_leader()
    out = await group.produce(leader, _batch(*[b"r%d" % i for i in range(10)]))
    assert out["base_offset"] == 0
    r = await group.call(leader, "delete_records", partitions=[
        {"topic": TOPIC, "partition": 0, "offset": 6}, {"topic": "nope", "partition": 0, "offset": 1}])
    assert r["partitions"][0] == {"topic": TOPIC, "partition": 0, "low_watermark": 6}
    assert r["partitions"][1]["error"]["code"] == "UNKNOWN_TOPIC_OR_PARTITION"
    past = await group.call(leader, "delete_records", partitions=[{"topic": TOPIC, "partition": 0, "offset": 11}])
    assert past["partitions"][0]["error"]["code"] == "OFFSET_OUT_OF_RANGE"  # beyond the high watermark
    follower = next(i for i in (1, 2, 3) if i != leader)
    assert (await group.call(follower, "delete_records", partitions=[
        {"topic": TOPIC, "partition": 0, "offset": 7}]))["partitions"][0]["error"]["code"] == "NOT_LEADER"
    # Every replica follows (a majority at the answer; all once they fetch).
    with trio.fail_after(WAIT_S):
        while {group.managers[i].replica(TOPIC, 0).log.log_start_offset for i in (1, 2, 3)} != {6}:
            await trio.sleep(0.01)
    fetched = await group.call(leader, "fetch", max_wait_ms=0, partitions=[
        {"topic": TOPIC, "partition": 0, "fetch_offset": 5}])
    assert fetched["partitions"][0]["error"]["code"] == "OFFSET_OUT_OF_RANGE"
    earliest = await group.call(leader, "list_offsets", partitions=[{"topic": TOPIC, "partition": 0, "timestamp": -2}])
    assert earliest["partitions"][0]["offset"] == 6
    # -1: up to the high watermark. Then the leader goes; the next one keeps the deletion.
    r = await group.call(leader, "delete_records", partitions=[{"topic": TOPIC, "partition": 0, "offset": -1}])
    assert r["partitions"][0]["low_watermark"] == 10
    await group.stop(leader)
    new = await group.wait_leader(not_=leader)
    await group.produce(new, _batch(b"after"))
    # The new leader raises its log start when its high watermark covers what a voter
    # reported (raft.py "Log start"): right after the produce's answer, in the same effects.
    with trio.fail_after(WAIT_S):
        while group.managers[new].replica(TOPIC, 0).log.log_start_offset != 10:
            await trio.sleep(0.01)
    r = await group.call(new, "fetch", max_wait_ms=0, partitions=[{"topic": TOPIC, "partition": 0, "fetch_offset": 10}])
    values = [rec.value for h, recs in decode_batches(r["partitions"][0]["records"]) if not h.is_control for rec in recs]
    assert values == [b"after"]
