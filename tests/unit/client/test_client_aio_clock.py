"""On trio's MockClock against a fake broker over in-memory streams, the trio shell long-polls no longer than a poll may wait, gives up an unanswered request at its deadline and reconnects, backs produce retries off exponentially within their jitter bounds and stops at delivery_timeout_ms, and keeps group heartbeats on their interval, rejoining with a fresh member id after its session expired."""

from __future__ import annotations

import contextlib
import random
from typing import Any

import pytest
import trio
import trio.testing

from partition.batch import BatchBuilder, iter_headers, read_header, stamp
from raftlog import aio
from raftlog.base.errors import (
    NotEnoughReplicasError,
    RaftlogError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from raftlog.base.protocol import FrameDecoder, encode_frame

BOOT = "broker:9092"  # never resolved: every connection goes through FakeBroker.connect
TOPIC = "t"


class FakeBroker:
    """One broker (id 1): leader of every partition of TOPIC and coordinator of every group,
    reached through `connect` over in-memory streams. Each request is answered in its own
    task (a long-poll does not hold up the others) by the handler named after its op;
    a handler returns the answer's fields or raises a RaftlogError. Every request is kept in
    `log` as (mock time, op, request)."""

    def __init__(self, nursery: trio.Nursery, partitions: int = 1):
        self.nursery = nursery
        self.partitions = partitions
        self.log: list[tuple[float, str, dict]] = []
        self.connections = 0
        self.batches: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        self.next_offset = {p: 0 for p in range(partitions)}
        self.appended = trio.Event()
        self.produce_errors: list[RaftlogError] = []  # answers for the next produce requests
        self.hang_fetches = False
        # Group state: one member at most; its session runs on the broker's clock.
        self.member_id = ""
        self.generation = 0
        self.members_seen = 0
        self.last_heartbeat = 0.0
        self.session_timeout_s = 0.0
        self.dark_until = 0.0  # heartbeats arriving before this are never answered
        self.handlers = {
            "metadata": self.metadata, "init_producer_id": self.init_producer_id,
            "produce": self.produce, "fetch": self.fetch, "list_offsets": self.list_offsets,
            "find_coordinator": self.find_coordinator, "join_group": self.join_group,
            "sync_group": self.sync_group, "heartbeat": self.heartbeat,
            "offset_fetch": self.offset_fetch, "offset_commit": self.offset_commit,
            "leave_group": self.leave_group,
        }  # fmt: skip

    # ---- transport ----

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        assert (host, port) == ("broker", 9092)
        client, server = trio.testing.memory_stream_pair()
        self.connections += 1
        self.nursery.start_soon(self._serve, server)
        return client

    async def _serve(self, stream: trio.abc.Stream) -> None:
        decoder = FrameDecoder()
        send_lock = trio.Lock()
        async with trio.open_nursery() as answers:
            try:
                while data := await stream.receive_some(1 << 16):
                    decoder.feed(data)
                    while (req := decoder.next_frame()) is not None:
                        answers.start_soon(self._answer, stream, send_lock, req)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self.log.append((trio.current_time(), "<broken>", {"error": repr(exc)}))
            self.log.append((trio.current_time(), "<closed>", {}))
            answers.cancel_scope.cancel()  # the client hung up: unanswered requests die with it

    async def _answer(self, stream: trio.abc.Stream, send_lock: trio.Lock, req: dict) -> None:
        self.log.append((trio.current_time(), req["op"], req))
        try:
            resp = {**await self.handlers[req["op"]](req), "id": req["id"], "ok": True}
        except RaftlogError as exc:
            resp = {"id": req["id"], "error": exc.to_wire()}
        async with send_lock:
            try:
                await stream.send_all(encode_frame(resp))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.log.append((trio.current_time(), "<answer lost>", req))

    def times(self, op: str) -> list[float]:
        return [t for t, o, _ in self.log if o == op]

    def requests(self, op: str) -> list[dict]:
        return [r for _, o, r in self.log if o == op]

    # ---- data ----

    def append(self, partition: int, values: list[bytes]) -> None:
        b = BatchBuilder(base_offset=self.next_offset[partition], partition_leader_epoch=1)
        for v in values:
            b.append(v, key=None, timestamp_ms=1_000)
        self.batches[partition].append(b.build())
        self.next_offset[partition] += len(values)
        self.appended.set()
        self.appended = trio.Event()

    async def metadata(self, req: dict) -> dict:
        topics = []
        for name in req.get("topics") or [TOPIC]:
            if name != TOPIC:
                topics.append({"name": name, "error": UnknownTopicOrPartitionError(name).to_wire()})
                continue
            topics.append({"name": TOPIC, "partitions": [
                {"partition": p, "leader": 1, "leader_epoch": 0, "replicas": [1]}
                for p in range(self.partitions)]})
        return {"cluster_id": "fake", "controller_id": 1,
                "brokers": [{"id": 1, "host": "broker", "port": 9092}], "topics": topics}

    async def init_producer_id(self, req: dict) -> dict:
        return {"producer_id": 7, "producer_epoch": 0}

    async def produce(self, req: dict) -> dict:
        if self.produce_errors:
            raise self.produce_errors.pop(0)
        out = []
        for p in req["partitions"]:
            buf = bytearray(p["records"])
            base = self.next_offset[p["partition"]]
            for pos, h in list(iter_headers(buf)):
                stamp(buf, pos, self.next_offset[p["partition"]], 0)
                self.next_offset[p["partition"]] += h.last_offset_delta + 1
            self.batches[p["partition"]].append(bytes(buf))
            out.append({"topic": p["topic"], "partition": p["partition"], "base_offset": base})
        return {"partitions": out}

    async def fetch(self, req: dict) -> dict:
        """A long poll: answers as soon as there is data past a fetch offset, else after
        max_wait_ms."""
        if self.hang_fetches:
            await trio.sleep_forever()

        def ready() -> list[dict]:
            out = []
            for p in req["partitions"]:
                data = b"".join(b for b in self.batches[p["partition"]]
                                if read_header(b).next_offset > p["fetch_offset"])
                out.append({"topic": p["topic"], "partition": p["partition"], "records": data,
                            "high_watermark": self.next_offset[p["partition"]], "log_start_offset": 0})
            return out

        with trio.move_on_after(req["max_wait_ms"] / 1000):
            while not any(r["records"] for r in ready()):
                await self.appended.wait()
        return {"partitions": ready()}

    async def list_offsets(self, req: dict) -> dict:
        return {"partitions": [
            {"topic": p["topic"], "partition": p["partition"], "timestamp": -1,
             "offset": 0 if p["timestamp"] == -2 else self.next_offset[p["partition"]]}
            for p in req["partitions"]]}

    # ---- group coordinator (one member) ----

    async def find_coordinator(self, req: dict) -> dict:
        return {"node_id": 1, "host": "broker", "port": 9092}

    async def join_group(self, req: dict) -> dict:
        if req["member_id"] != self.member_id or not self.member_id:
            self.members_seen += 1
            self.member_id = f"m{self.members_seen}"
        self.generation += 1
        self.session_timeout_s = req["session_timeout_ms"] / 1000
        self.last_heartbeat = trio.current_time()
        meta = req["protocols"][0]["metadata"]
        return {"member_id": self.member_id, "generation_id": self.generation,
                "protocol_name": req["protocols"][0]["name"], "leader": self.member_id,
                "members": [{"member_id": self.member_id, "group_instance_id": None, "metadata": meta}]}

    async def sync_group(self, req: dict) -> dict:
        mine = [a["assignment"] for a in req["assignments"] or () if a["member_id"] == self.member_id]
        return {"assignment": mine[0] if mine else b""}

    async def heartbeat(self, req: dict) -> dict:
        now = trio.current_time()
        if now < self.dark_until:
            await trio.sleep_forever()  # a coordinator that has gone quiet
        if now - self.last_heartbeat > self.session_timeout_s:
            self.member_id = ""  # the session expired: the member is gone
        if req["member_id"] != self.member_id or req["generation_id"] != self.generation:
            raise UnknownMemberIdError(f"{req['member_id']} is not a member")
        self.last_heartbeat = now
        return {}

    async def offset_fetch(self, req: dict) -> dict:
        return {"partitions": [{"topic": p["topic"], "partition": p["partition"], "offset": -1}
                               for p in req["partitions"] or ()]}

    async def offset_commit(self, req: dict) -> dict:
        return {"partitions": [{"topic": o["topic"], "partition": o["partition"]} for o in req["offsets"]]}

    async def leave_group(self, req: dict) -> dict:
        self.member_id = ""
        return {}


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 3) for a, b in zip(times, times[1:])]


# ---------------------------------------------------------------- fetch long-polls


async def test_a_poll_long_polls_no_longer_than_it_may_wait(autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = FakeBroker(nursery)
        async with aio.Consumer(BOOT, connect=broker.connect, max_wait_ms=500) as consumer:
            consumer.assign([(TOPIC, 0)])
            consumer.seek((TOPIC, 0), 0)
            # A short poll asks the broker to wait no longer than the poll itself.
            t0 = trio.current_time()
            assert await consumer.poll(timeout_ms=200) == []
            assert trio.current_time() - t0 == pytest.approx(0.2, abs=0.002)
            assert [r["max_wait_ms"] for r in broker.requests("fetch")] == [200]
            # A long poll with nothing to read: one fetch per max_wait_ms until its end.
            t0, before = trio.current_time(), len(broker.requests("fetch"))
            assert await consumer.poll(timeout_ms=5000) == []
            assert trio.current_time() - t0 == pytest.approx(5.0, abs=0.002)
            fetches = broker.requests("fetch")[before:]
            assert 9 <= len(fetches) <= 11 and {r["max_wait_ms"] for r in fetches} == {500}
            assert all(g == pytest.approx(0.5, abs=0.002) for g in gaps(broker.times("fetch")[before:]))
            # Records that arrive during a long poll come back at once, not at the poll's end.
            t0 = trio.current_time()

            async def produce_later() -> None:
                await trio.sleep(1.3)
                broker.append(0, [b"a", b"b"])

            nursery.start_soon(produce_later)
            records = await consumer.poll(timeout_ms=5000)
            assert [(r.offset, r.value) for r in records] == [(0, b"a"), (1, b"b")]
            assert trio.current_time() - t0 == pytest.approx(1.3, abs=0.002)
        nursery.cancel_scope.cancel()


async def test_an_unanswered_fetch_is_given_up_at_its_deadline_and_the_connection_replaced(autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = FakeBroker(nursery)
        broker.hang_fetches = True
        async with aio.Consumer(BOOT, connect=broker.connect, max_wait_ms=500,
                                request_timeout_ms=3000) as consumer:
            consumer.assign([(TOPIC, 0)])
            consumer.seek((TOPIC, 0), 0)
            with trio.move_on_after(20):
                while len(broker.requests("fetch")) < 2:
                    assert await consumer.poll(timeout_ms=1000) == []
            first, second = broker.times("fetch")[:2]
            connections_at_second = broker.connections
        # The fetch may take request_timeout_ms + its long poll + 1 s of slack; then the
        # connection is closed (a late answer could not be matched) and a new one opened
        # after the reconnect backoff (50 ms +- 20 %).
        assert 3.0 + 0.5 + 1.0 <= second - first <= 4.5 + 0.06 + 0.002
        assert connections_at_second >= 3  # bootstrap, broker 1, broker 1 again
        closed = [t for t, op, _ in broker.log if op == "<closed>"]
        assert closed and closed[0] == pytest.approx(first + 4.5, abs=0.002)
        nursery.cancel_scope.cancel()


# ---------------------------------------------------------------- retry backoff


async def test_produce_retries_back_off_exponentially_within_the_jitter(autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = FakeBroker(nursery)
        broker.produce_errors = [NotEnoughReplicasError("isr shrank") for _ in range(5)]
        async with aio.Producer(BOOT, connect=broker.connect, linger_ms=0, retry_backoff_ms=100,
                                retry_backoff_max_ms=1000, rng=random.Random(5)) as producer:
            handle = await producer.send(TOPIC, b"v")
            assert await handle == (0, 0)
        attempts = broker.times("produce")
        assert len(attempts) == 6
        for n, gap in enumerate(gaps(attempts), start=1):
            base_s = min(1000, 100 * 2 ** (n - 1)) / 1000
            assert 0.8 * base_s - 0.002 <= gap <= min(1.0, 1.2 * base_s) + 0.002, (n, gaps(attempts))
        # The retried batch is the same bytes every time (same producer id and sequence).
        assert len({bytes(r["partitions"][0]["records"]) for r in broker.requests("produce")}) == 1
        nursery.cancel_scope.cancel()


async def test_produce_retries_stop_at_the_delivery_timeout(autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = FakeBroker(nursery)
        broker.produce_errors = [NotEnoughReplicasError("isr shrank") for _ in range(100)]
        async with aio.Producer(BOOT, connect=broker.connect, linger_ms=0, retry_backoff_ms=100,
                                retry_backoff_max_ms=1000, request_timeout_ms=1000,
                                delivery_timeout_ms=3000) as producer:
            t0 = trio.current_time()
            handle = await producer.send(TOPIC, b"v")
            with pytest.raises(NotEnoughReplicasError):  # definite: every attempt was refused
                await handle
            elapsed = trio.current_time() - t0
        # Backoffs of about 0.1, 0.2, 0.4, 0.8 and 1.0 s fit in 3 s; the next would not.
        assert 2.0 <= elapsed < 3.0
        assert 5 <= len(broker.times("produce")) <= 7
        assert broker.next_offset[0] == 0
        nursery.cancel_scope.cancel()


# ---------------------------------------------------------------- group heartbeats and session expiry


async def joined_consumer(broker: FakeBroker, stack: contextlib.AsyncExitStack, **kw: Any) -> tuple[aio.Consumer, dict]:
    seen: dict[str, list] = {"assigned": [], "revoked": []}
    consumer = aio.Consumer(BOOT, connect=broker.connect, group_id="g", session_timeout_ms=3000,
                            heartbeat_interval_ms=1000, enable_auto_commit=False, **kw)
    await stack.enter_async_context(consumer)
    consumer.subscribe([TOPIC], on_assigned=lambda p: seen["assigned"].append(sorted(p)),
                       on_revoked=lambda p: seen["revoked"].append(sorted(p)))
    await consumer.poll(timeout_ms=100)
    assert seen["assigned"] == [[(TOPIC, 0)]]
    return consumer, seen


async def test_heartbeats_keep_their_interval(autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = FakeBroker(nursery)
        async with contextlib.AsyncExitStack() as stack:
            consumer, _seen = await joined_consumer(broker, stack)
            joined_at = broker.times("sync_group")[-1]
            await trio.sleep(10)  # no poll meanwhile: the heartbeat task alone keeps the member alive
            beats = broker.times("heartbeat")
            assert 9 <= len(beats) <= 11
            assert beats[0] == pytest.approx(joined_at + 1.0, abs=0.002)
            assert all(g == pytest.approx(1.0, abs=0.002) for g in gaps(beats))
            meta = consumer.group_metadata()
            assert (meta.member_id, meta.generation_id, meta.assignment) == ("m1", 1, ((TOPIC, 0),))
        assert broker.requests("leave_group")[-1]["members"][0]["member_id"] == "m1"
        nursery.cancel_scope.cancel()


async def test_after_its_session_expired_the_member_rejoins_with_a_fresh_id(autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = FakeBroker(nursery)
        async with contextlib.AsyncExitStack() as stack:
            consumer, seen = await joined_consumer(broker, stack)
            await trio.sleep(2.5)  # heartbeats at 1 s and 2 s answered
            dark_from = trio.current_time()
            broker.dark_until = dark_from + 4  # the coordinator goes quiet for longer than the session
            await trio.sleep(7)
            log = "\n".join(f"{t:.3f} {op}" for t, op, _ in broker.log)
            # The heartbeat sent into the quiet spell is given up at its deadline (its
            # request's 3 s plus 1 s of slack), on a connection then replaced; the next one,
            # 200 ms later, learns that the session expired (UNKNOWN_MEMBER_ID).
            quiet = [t for t in broker.times("heartbeat") if dark_from <= t < broker.dark_until]
            late = [t for t in broker.times("heartbeat") if t >= broker.dark_until]
            assert len(quiet) == 1 and len(late) == 1, log
            closed = [t for t, op, _ in broker.log if op == "<closed>" and t > quiet[0]]
            assert closed[0] == pytest.approx(quiet[0] + 4.0, abs=0.002), log
            assert late[0] == pytest.approx(closed[0] + 0.2, abs=0.002), log
            # The member knows it is gone: no more heartbeats, a rejoin due at the next poll.
            meta = consumer.group_metadata()
            assert meta.member_id == "" and meta.generation_id == -1
            await consumer.poll(timeout_ms=100)  # the rejoin
            meta = consumer.group_metadata()
            assert (meta.member_id, meta.generation_id, meta.assignment) == ("m2", 2, ((TOPIC, 0),))
            assert seen == {"assigned": [[(TOPIC, 0)], [(TOPIC, 0)]], "revoked": [[(TOPIC, 0)]]}
            await trio.sleep(1.5)
            assert broker.requests("heartbeat")[-1]["member_id"] == "m2"
        nursery.cancel_scope.cancel()
