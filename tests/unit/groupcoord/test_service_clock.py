"""On trio's MockClock, the group coordinator service's timers act at the virtual times Kafka's protocol says: the initial rebalance delay, session expiry of a silent member, the rebalance timeout of a member that never rejoins, and a waiting join's own timeout; and ownership follows a leadership change when the replicas report it. The transaction coordinator service, over the same in-memory port, keeps its state in its topic and a new one replays it (the shared partition_load loop)."""

from __future__ import annotations

import types
from typing import Any

import pytest
import trio
import trio.testing

from groupcoord.context import CoordinatorConfig
from groupcoord.service import LEADERSHIP_CHECK_S, GroupCoordinatorService
from groupcoord.settings import GroupCoordinatorSettings, TxnCoordinatorSettings
from groupcoord.txn_coordinator import TxnConfig
from groupcoord.txn_port import AddOffsetsToTxn, EndTxn, InitTxnProducerId, ProducerEpoch
from groupcoord.txn_service import TxnCoordinatorService
from metadata.image import MetadataImage
from groupcoord.state import GroupState
from partition.batch import read_header, stamp
from groupcoord.txn_records import TxnState
from raftlog.base.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    RequestTimedOutError,
    UnknownMemberIdError,
)
from raftlog.base.protocol import Request
from raftlog.node.authorize import Guard
from raftlog.node.native_groups import group_handlers
from raftlog.base.topics import (
    partition_for_group,
    OFFSETS_TOPIC,
    OFFSETS_TOPIC_PARTITIONS,
    TRANSACTION_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC_PARTITIONS,
)

GROUP = "clocked"
DELAY_S = 3.0          # group_initial_rebalance_delay_ms
SESSION_S = 10.0
REBALANCE_S = 20.0
TICK_SLACK_S = 0.01    # the timer loop wakes at the deadline; one event-loop pass later at most


class Committed:
    """An append that committed at once."""

    def __init__(self, first_offset: int) -> None:
        self.first_offset = first_offset

    async def wait_committed(self, deadline: float) -> None:
        await trio.lowlevel.checkpoint()


class MemoryPartition:
    """An internal topic's partition led here, as the service's `InternalPartition`
    (groupcoord/internal_topic.py): appends commit at once, reads return whole stamped batches.
    In memory, because a real replica fsyncs in worker threads, and MockClock would jump while
    they run."""

    def __init__(self) -> None:
        self.is_leader = True
        self.leader_epoch = 1
        self.batches: list[bytes] = []
        self.log_start_offset = 0
        self.log_end_offset = 0

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset

    async def append(self, batch: bytes) -> Committed:
        buf = bytearray(batch)
        first = self.log_end_offset
        stamp(buf, 0, first, self.leader_epoch)
        self.batches.append(bytes(buf))
        self.log_end_offset = read_header(buf).next_offset
        return Committed(first)

    async def read_committed(self, offset: int, max_bytes: int) -> bytes:
        out = b""
        for batch in self.batches:
            if read_header(batch).next_offset > offset and len(out) + len(batch) <= max_bytes:
                out += batch
        return out

    def watch(self, event: trio.Event) -> None:
        event.set()  # everything is committed already

    def unwatch(self, event: trio.Event) -> None:
        pass


class MemoryTopics:
    """A service's `InternalTopics`: every partition of its one topic, all led here."""

    def __init__(self, topic: str = OFFSETS_TOPIC, partitions: int = OFFSETS_TOPIC_PARTITIONS) -> None:
        self.topic = topic
        self.partitions = {p: MemoryPartition() for p in range(partitions)}
        self.listeners: list[Any] = []

    def partition(self, topic: str, partition: int) -> MemoryPartition | None:
        return self.partitions.get(partition) if topic == self.topic else None

    def high_watermark(self, topic: str, partition: int) -> int | None:
        part = self.partition(topic, partition)
        return None if part is None else part.high_watermark

    def add_leadership_listener(self, listener: Any) -> None:
        self.listeners.append(listener)

    def lose_leadership(self, partition: int, *, tell: bool = True) -> None:
        r = self.partitions[partition]
        r.is_leader = False
        if tell:
            for listener in self.listeners:
                listener(self.topic, partition)


class NoMetadata:
    """find_coordinator and commits of unknown topics are not exercised here."""

    @property
    def image(self) -> MetadataImage:
        raise AssertionError("the metadata image is not used by these tests")

    def client_address(self, broker_id: int) -> str | None:
        raise AssertionError("not used")


def trio_ms() -> int:
    return int(trio.current_time() * 1000)


async def started_service(nursery: trio.Nursery) -> GroupCoordinatorService:
    settings = GroupCoordinatorSettings(node_id=1, request_timeout_ms=60_000, coordinator=CoordinatorConfig(
        partitions=OFFSETS_TOPIC_PARTITIONS, group_min_session_timeout_ms=1_000,
        group_max_session_timeout_ms=300_000, group_initial_rebalance_delay_ms=int(DELAY_S * 1000)))
    service = GroupCoordinatorService(settings, NoMetadata(), MemoryTopics(), clock_ms=trio_ms)
    await nursery.start(service.run)
    with trio.fail_after(5):  # virtual seconds: the leadership poll loads all 16 partitions
        while len(service.health()["partitions_active"]) < OFFSETS_TOPIC_PARTITIONS:
            await trio.sleep(0.05)
    return service


class Client:
    """One group member calling the service's handlers as the client listener would."""

    def __init__(self, service: GroupCoordinatorService, name: str) -> None:
        self.service, self.name = service, name
        self.handlers = group_handlers(service, Guard(None))  # the native adapter on the group port
        self.member_id = ""
        self.generation = -1
        self._ids = iter(range(1, 1_000_000))

    async def call(self, op: str, **fields: Any) -> dict[str, Any]:
        return await self.handlers[op](Request(next(self._ids), op, {"group_id": GROUP, **fields}))

    async def join(self, timeout_ms: int = 50_000) -> dict[str, Any]:
        fields = dict(protocol_type="consumer", protocols=[{"name": "range", "metadata": self.name.encode()}],
                      session_timeout_ms=int(SESSION_S * 1000), rebalance_timeout_ms=int(REBALANCE_S * 1000),
                      client_id=self.name, timeout_ms=timeout_ms)
        if not self.member_id:
            with pytest.raises(MemberIdRequiredError) as info:
                await self.call("join_group", member_id="", **fields)
            self.member_id = info.value.member_id
        answer = await self.call("join_group", member_id=self.member_id, **fields)
        self.generation = answer["generation_id"]
        return answer

    async def sync(self, assignments: dict[str, bytes] | None = None) -> dict[str, Any]:
        plan = None if assignments is None else [{"member_id": m, "assignment": a} for m, a in assignments.items()]
        return await self.call("sync_group", member_id=self.member_id, generation_id=self.generation,
                               assignments=plan)

    async def heartbeat(self) -> dict[str, Any]:
        return await self.call("heartbeat", member_id=self.member_id, generation_id=self.generation)


async def form_group(service: GroupCoordinatorService, *names: str) -> list[Client]:
    clients = [Client(service, n) for n in names]
    answers: dict[str, dict[str, Any]] = {}

    async def join(c: Client) -> None:
        answers[c.name] = await c.join()

    async with trio.open_nursery() as nursery:
        for c in clients:
            nursery.start_soon(join, c)
    leader = next(c for c in clients if answers[c.name]["leader"] == c.member_id)
    async with trio.open_nursery() as nursery:
        for c in clients:
            plan = {m["member_id"]: b"part-" + m["member_id"].encode() for m in answers[c.name]["members"]}
            nursery.start_soon(c.sync, plan if c is leader else None)
    return clients


async def test_the_first_join_waits_exactly_the_initial_rebalance_delay(autojump_clock):
    async with trio.open_nursery() as nursery:
        service = await started_service(nursery)
        a = Client(service, "a")
        start = trio.current_time()
        answer = await a.join()
        waited = trio.current_time() - start
        assert DELAY_S <= waited <= DELAY_S + TICK_SLACK_S, waited
        assert answer["generation_id"] == 1 and answer["leader"] == a.member_id
        nursery.cancel_scope.cancel()


async def test_a_silent_member_expires_after_its_session_timeout(autojump_clock):
    async with trio.open_nursery() as nursery:
        service = await started_service(nursery)
        a, b = await form_group(service, "a", "b")
        b_last_seen = trio.current_time()  # b's SyncGroup: its last sign of life
        # a heartbeats every second; b says nothing more.
        while True:
            await trio.sleep(1.0)
            try:
                await a.heartbeat()
            except RebalanceInProgressError:
                break
        noticed = trio.current_time() - b_last_seen
        assert SESSION_S <= noticed <= SESSION_S + 1.0 + TICK_SLACK_S, noticed
        assert service.core.group(GROUP).members.keys() == {a.member_id}  # b was removed
        # a, the only member left, rejoins: the rebalance completes at once, without b.
        rejoined = await a.join()
        assert rejoined["generation_id"] == 2 and [m["member_id"] for m in rejoined["members"]] == [a.member_id]
        with pytest.raises(UnknownMemberIdError):
            await b.heartbeat()
        nursery.cancel_scope.cancel()


async def test_a_member_that_never_rejoins_is_dropped_at_the_rebalance_timeout(autojump_clock):
    async with trio.open_nursery() as nursery:
        service = await started_service(nursery)
        (a,) = await form_group(service, "a")
        c = Client(service, "c")
        answers: list[dict[str, Any]] = []

        async def join_c() -> None:
            answers.append(await c.join())

        start = trio.current_time()
        async with trio.open_nursery() as inner:
            inner.start_soon(join_c)
            await trio.testing.wait_all_tasks_blocked()  # c waits in the join phase
            assert service.core.group(GROUP).state is GroupState.PREPARING_REBALANCE
            # a stays alive (heartbeats within its session) but never rejoins: only the
            # rebalance timeout ends the join phase.
            for _ in range(int(REBALANCE_S) - 1):
                with pytest.raises(RebalanceInProgressError):
                    await a.heartbeat()
                await trio.sleep(1.0)
            assert not answers  # 19 s in: still waiting for a
        (answer,) = answers
        waited = trio.current_time() - start
        assert REBALANCE_S <= waited <= REBALANCE_S + TICK_SLACK_S, waited
        assert answer["generation_id"] == 2 and answer["leader"] == c.member_id
        assert service.core.group(GROUP).members.keys() == {c.member_id}
        nursery.cancel_scope.cancel()


async def test_a_waiting_join_gives_up_at_its_own_timeout_and_the_core_forgets_it(autojump_clock):
    async with trio.open_nursery() as nursery:
        service = await started_service(nursery)
        (a,) = await form_group(service, "a")
        c = Client(service, "c")
        start = trio.current_time()
        with pytest.raises(RequestTimedOutError):
            await c.join(timeout_ms=5_000)  # the rebalance needs a, who does not rejoin
        waited = trio.current_time() - start
        assert 5.0 <= waited <= 5.0 + TICK_SLACK_S, waited
        assert service.core.pending_count() == 0 and service.health()["waiters"] == 0
        nursery.cancel_scope.cancel()


async def _until_unloaded(service: GroupCoordinatorService, partition: int) -> float:
    start = trio.current_time()
    with trio.fail_after(5):  # virtual seconds
        while partition in service.health()["partitions_active"]:
            await trio.sleep(0.001)
    return trio.current_time() - start


async def test_ownership_follows_a_reported_leadership_change_at_once(autojump_clock):
    async with trio.open_nursery() as nursery:
        service = await started_service(nursery)
        service.topics.lose_leadership(3)
        assert await _until_unloaded(service, 3) <= TICK_SLACK_S
        # A change nobody reports is still noticed, by the watcher's slow check.
        service.topics.lose_leadership(4, tell=False)
        assert TICK_SLACK_S < await _until_unloaded(service, 4) <= LEADERSHIP_CHECK_S + TICK_SLACK_S
        nursery.cancel_scope.cancel()


class LaggingPartition(MemoryPartition):
    """A partition newly led here whose high watermark lags its log end until `catch_up()`:
    its load waits (partition_load.wait_caught_up)."""

    def __init__(self, epoch: int, batches: list[bytes], end: int) -> None:
        super().__init__()
        self.leader_epoch, self.batches, self.log_end_offset = epoch, batches, end
        self.hw = 0
        self.watching: list[trio.Event] = []

    @property
    def high_watermark(self) -> int:
        return self.hw

    def watch(self, event: trio.Event) -> None:
        self.watching.append(event)

    def catch_up(self) -> None:
        self.hw = self.log_end_offset
        for event in self.watching:
            event.set()


async def test_a_group_op_waits_for_its_partitions_load_and_an_empty_partition_loads_at_once(autojump_clock):
    """Issue 46: FindCoordinator names a new partition's first leader before it leads, so a
    group op may reach a coordinator that is loading: it waits for the load (at most
    LOAD_WAIT_MS) instead of answering COORDINATOR_LOAD_IN_PROGRESS; a partition led with an
    empty log (a new one) has nothing to load and is active in the same check."""
    async with trio.open_nursery() as nursery:
        service = await started_service(nursery)
        topics = service.topics
        p = partition_for_group(GROUP)
        # Led in a new epoch, its log ending past the high watermark (what an earlier leader
        # wrote and a majority may have committed): its load waits for the high watermark.
        lagging = topics.partitions[p] = LaggingPartition(2, [], 1)
        for listener in topics.listeners:
            listener(OFFSETS_TOPIC, p)
        with trio.fail_after(TICK_SLACK_S):
            while p not in service.health()["partitions_loading"]:
                await trio.sleep(0)
        answered: list[Any] = []
        done = trio.Event()

        async def fetch() -> None:
            answered.append(await Client(service, "reader").call("offset_fetch", partitions=None))
            done.set()

        nursery.start_soon(fetch)
        await trio.testing.wait_all_tasks_blocked()  # the op waits: the load waits for the high watermark
        assert answered == []
        lagging.catch_up()
        with trio.fail_after(1):
            await done.wait()
        assert answered[0]["partitions"] == []  # answered after the load, not COORDINATOR_LOAD_IN_PROGRESS
        assert p in service.health()["partitions_active"]
        # A new, empty partition led here: loaded at once, nothing to wait for.
        q = (p + 1) % OFFSETS_TOPIC_PARTITIONS
        topics.partitions[q] = fresh = MemoryPartition()
        fresh.leader_epoch = 7
        assert q in service.health()["partitions_active"]  # epoch 1 still
        for listener in topics.listeners:
            listener(OFFSETS_TOPIC, q)
        with trio.fail_after(TICK_SLACK_S):  # virtual time: no load task, no high watermark wait
            while service._owned.get(q) != 7 or q not in service.health()["partitions_active"]:
                await trio.sleep(0)
        nursery.cancel_scope.cancel()


class ProducerIds:
    """The node's producer id source (partition port's init_producer_id): 1000, 1001, ..."""

    def __init__(self) -> None:
        self.next_id = 1000

    async def __call__(self) -> Any:
        self.next_id += 1
        return types.SimpleNamespace(producer_id=self.next_id - 1, producer_epoch=0)


async def started_txn_service(nursery: trio.Nursery, topics: MemoryTopics) -> TxnCoordinatorService:
    settings = TxnCoordinatorSettings(node_id=1, coordinator=TxnConfig(
        partitions=TRANSACTION_STATE_TOPIC_PARTITIONS, max_timeout_ms=60_000))
    service = TxnCoordinatorService(settings, NoMetadata(), topics, new_producer_id=ProducerIds(), clock_ms=trio_ms)
    await nursery.start(service.run)
    with trio.fail_after(5):  # virtual seconds
        while len(service.health()["txn_partitions"]) < TRANSACTION_STATE_TOPIC_PARTITIONS:
            await trio.sleep(0.05)
    return service


async def init_producer(service: TxnCoordinatorService, timeout_ms: int) -> dict[str, Any]:
    done = await service.init_txn_producer_id(InitTxnProducerId("app", timeout_ms))
    return {"producer_id": done.producer_id, "producer_epoch": done.producer_epoch}


async def test_the_transaction_service_keeps_its_state_in_its_topic_and_a_new_leader_replays_it(autojump_clock):
    topics = MemoryTopics(TRANSACTION_STATE_TOPIC, TRANSACTION_STATE_TOPIC_PARTITIONS)
    async with trio.open_nursery() as nursery:
        first = await started_txn_service(nursery, topics)
        with pytest.raises(InvalidTransactionTimeoutError):  # over the settings' max, nothing written
            await init_producer(first, 60_001)
        assert sum(p.log_end_offset for p in topics.partitions.values()) == 0
        answer = await init_producer(first, 30_000)
        assert answer["producer_id"] == 1000
        nursery.cancel_scope.cancel()
    assert sum(p.log_end_offset for p in topics.partitions.values()) == 1  # one state record
    async with trio.open_nursery() as nursery:
        second = await started_txn_service(nursery, topics)
        described = second.core.describe("app")
        assert (described["producer_id"], described["producer_epoch"], described["timeout_ms"]) == (
            1000, answer["producer_epoch"], 30_000)
        nursery.cancel_scope.cancel()


async def test_timed_out_transactions_are_looked_for_at_kafkas_interval(autojump_clock):
    """Kafka aborts a timed-out transaction at its next scan (transaction.abort.timed.out.
    transaction.cleanup.interval.ms, 10 s), not at the timeout: KafkaJS's tests give a
    100 ms timeout and still commit a few hundred ms later. raftlog scans as often, no oftener."""
    topics = MemoryTopics(TRANSACTION_STATE_TOPIC, TRANSACTION_STATE_TOPIC_PARTITIONS)
    async with trio.open_nursery() as nursery:
        service = await started_txn_service(nursery, topics)
        answer = await init_producer(service, 100)
        await service.add_offsets_to_txn(AddOffsetsToTxn("app", answer["producer_id"], answer["producer_epoch"], "g"))
        began = trio.current_time()
        await trio.sleep(2)  # virtual time: twenty timeouts, no scan yet
        assert service.core.describe("app")["state"] == TxnState.ONGOING.value
        with trio.fail_after(15):  # virtual seconds
            while service.core.describe("app")["state"] == TxnState.ONGOING.value:
                await trio.sleep(0.1)
        assert 2 < trio.current_time() - began <= 10.5
        nursery.cancel_scope.cancel()


class HeldPartition(MemoryPartition):
    """A partition whose appends, while `hold` is set, are in the log but not committed (a leader
    cut off from its followers): `wait_committed` times out, the outcome unknown; `release`
    commits them (the followers are back)."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.committed = 0
        self.released = trio.Event()
        self.watchers: list[trio.Event] = []

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset if not self.hold else self.committed

    async def append(self, batch: bytes) -> Any:
        if not self.hold:
            self.committed = self.log_end_offset + 1
            return await super().append(batch)
        appended = await super().append(batch)
        released = self.released

        class Held:
            first_offset = appended.first_offset

            async def wait_committed(self, deadline: float) -> None:
                with trio.move_on_at(deadline):
                    await released.wait()
                    return
                raise RequestTimedOutError("not replicated to a majority in time; it may still be committed")

        return Held()

    def release(self) -> None:
        self.hold = False
        self.committed = self.log_end_offset
        self.released.set()
        for event in self.watchers:
            event.set()

    def watch(self, event: trio.Event) -> None:
        if self.hold:
            self.watchers.append(event)
        else:
            event.set()

    def unwatch(self, event: trio.Event) -> None:
        if event in self.watchers:
            self.watchers.remove(event)


async def test_an_end_txn_whose_write_outcome_is_unknown_is_retriable_and_its_retry_gets_what_the_log_holds(
        autojump_clock):
    """Issue 42: EndTxn(commit) whose PrepareCommit timed out used to answer REQUEST_TIMED_OUT, an
    abortable error to librdkafka, whose abort then met the commit that had gone through
    (INVALID_TXN_STATE, fatal). Now it answers COORDINATOR_NOT_AVAILABLE (Kafka's answer to a
    timed-out append; clients retry), the partition is replayed once the record's fate is known,
    and the retried commit succeeds with the markers of the one PrepareCommit in the log."""
    topics = MemoryTopics(TRANSACTION_STATE_TOPIC, TRANSACTION_STATE_TOPIC_PARTITIONS)
    markers: list[Any] = []
    async with trio.open_nursery() as nursery:
        settings = TxnCoordinatorSettings(node_id=1, coordinator=TxnConfig(
            partitions=TRANSACTION_STATE_TOPIC_PARTITIONS, max_timeout_ms=600_000))

        async def write_markers(m: Any) -> None:
            markers.append(m)

        service = TxnCoordinatorService(settings, NoMetadata(), topics, new_producer_id=ProducerIds(),
                                        write_markers=write_markers, clock_ms=trio_ms)
        p = service.core.partition_for("app")
        held = topics.partitions[p] = HeldPartition()
        held.leader_epoch = 7  # the markers' coordinator epoch: this partition's leader epoch
        await nursery.start(service.run)
        with trio.fail_after(5):
            while len(service.health()["txn_partitions"]) < TRANSACTION_STATE_TOPIC_PARTITIONS:
                await trio.sleep(0.05)
        pid = (await init_producer(service, 300_000))["producer_id"]

        async def end_txn(commit: bool) -> ProducerEpoch:
            return await service.end_txn(EndTxn("app", pid, 0, commit))

        await service.add_offsets_to_txn(AddOffsetsToTxn("app", pid, 0, "g"))
        held.hold = True
        with pytest.raises(CoordinatorNotAvailableError):
            await end_txn(True)
        assert held.log_end_offset == held.committed + 1  # the PrepareCommit, fate unknown
        with pytest.raises(CoordinatorLoadInProgressError):  # replaying once its fate is known
            await end_txn(True)
        assert markers == []
        held.release()
        with trio.fail_after(5):
            while service.core.txns.get("app") is None or service.core.txns["app"].state is not TxnState.COMPLETE_COMMIT:
                await trio.sleep(0.05)
        assert [(m.commit, m.producer_id, m.coordinator_epoch) for m in markers] == [(True, pid, 7)]
        assert await end_txn(True) == ProducerEpoch(pid, 0)  # the retry: success, as Kafka's
        with pytest.raises(InvalidTxnStateError):
            await end_txn(False)
        assert held.log_end_offset == 4  # Empty, Ongoing, PrepareCommit, CompleteCommit: nothing else
        nursery.cancel_scope.cancel()
