"""SHELL SMOKE TEST ONLY: both client shells produce and consume through a tiny in-memory trio server (not a broker; real nodes get integration tests)."""

import pytest
import trio

from partition.batch import iter_headers, read_header, stamp
from raftlog import aio
from raftlog.client import Admin, Consumer, Producer
from raftlog.base.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from raftlog.node.server import serve

PARTITIONS = 2


class InMemoryBroker:
    """Just enough of the ops for the shells: one broker (id 1) leading every partition."""

    def __init__(self):
        self.port = None
        self.logs = {("t", p): [] for p in range(PARTITIONS)}  # list of stamped batch bytes
        self.next_offset = {tp: 0 for tp in self.logs}
        self.produce_requests = 0

    def handlers(self):
        return {
            "metadata": self.metadata, "init_producer_id": self.init_producer_id,
            "produce": self.produce, "fetch": self.fetch, "list_offsets": self.list_offsets,
            "create_topic": self.create_topic, "cluster_status": self.cluster_status,
        }

    async def create_topic(self, req):
        if req.fields["name"] == "t":
            raise TopicAlreadyExistsError("t exists")
        return {"name": req.fields["name"], "partitions": [
            {"partition": p, "leader": 1, "leader_epoch": 0, "replicas": [1], "preferred_leader": 1}
            for p in range(req.fields["partitions"])]}

    async def cluster_status(self, req):
        return {"cluster_id": "smoke", "controller_id": 1, "controller_epoch": 1, "commit_index": 9,
                "voters": [{"id": 1, "address": f"127.0.0.1:{self.port}", "leader": True}],
                "brokers": [{"id": 1, "host": "127.0.0.1", "port": self.port, "fenced": False,
                             "last_heartbeat_age_ms": 0}]}

    async def metadata(self, req):
        topics = []
        for name in req.fields.get("topics") or ["t"]:
            if name != "t":
                topics.append({"name": name, "error": "UNKNOWN_TOPIC_OR_PARTITION"})
                continue
            topics.append({"name": "t", "internal": False, "configs": {}, "partitions": [
                {"partition": p, "leader": 1, "leader_epoch": 0, "replicas": [1], "preferred_leader": 1}
                for p in range(PARTITIONS)]})
        return {"cluster_id": "smoke", "controller_id": 1,
                "brokers": [{"id": 1, "host": "127.0.0.1", "port": self.port, "fenced": False}],
                "topics": topics}

    async def init_producer_id(self, req):
        return {"producer_id": 1000, "producer_epoch": 0}

    async def produce(self, req):
        self.produce_requests += 1
        out = []
        for p in req.fields["partitions"]:
            tp = (p["topic"], p["partition"])
            buf = bytearray(p["records"])
            base = self.next_offset[tp]
            for pos, h in list(iter_headers(buf)):
                stamp(buf, pos, self.next_offset[tp], 0)
                self.next_offset[tp] += h.last_offset_delta + 1
            self.logs[tp].append(bytes(buf))
            out.append({"topic": tp[0], "partition": tp[1], "base_offset": base, "log_append_time": -1})
        return {"partitions": out}

    async def fetch(self, req):
        out = []
        for p in req.fields["partitions"]:
            tp = (p["topic"], p["partition"])
            data = b"".join(b for b in self.logs[tp] if read_header(b).next_offset > p["fetch_offset"])
            out.append({"topic": tp[0], "partition": tp[1], "high_watermark": self.next_offset[tp],
                        "log_start_offset": 0, "records": data})
        return {"partitions": out}

    async def list_offsets(self, req):
        out = []
        for p in req.fields["partitions"]:
            tp = (p["topic"], p["partition"])
            off = 0 if p["timestamp"] == -2 else self.next_offset[tp]
            out.append({"topic": tp[0], "partition": tp[1], "offset": off, "timestamp": -1})
        return {"partitions": out}


async def start_broker(nursery):
    broker = InMemoryBroker()
    broker.port = await nursery.start(
        lambda task_status: serve(broker.handlers(), "127.0.0.1", 0, max_frame_bytes=1 << 24,
                                  request_timeout_ms=5000, task_status=task_status))
    return broker


async def test_trio_shell_produces_and_consumes():
    async with trio.open_nursery() as nursery:
        broker = await start_broker(nursery)
        boot = f"127.0.0.1:{broker.port}"
        with trio.fail_after(20):
            async with aio.Producer(boot, linger_ms=2) as producer:
                handles = [await producer.send("t", b"v%d" % i, key=b"k%d" % i) for i in range(300)]
                await producer.flush()
                results = [await h for h in handles]
            assert sorted(o for p, o in results if p == 0) == list(range(broker.next_offset[("t", 0)]))
            assert sum(broker.next_offset.values()) == 300
            async with aio.Consumer(boot) as consumer:
                consumer.assign([("t", 0), ("t", 1)])
                consumer.seek_to_beginning()
                got = []
                while len(got) < 300:
                    got += await consumer.poll(500)
                assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(300))
                assert await consumer.position(("t", 0)) == broker.next_offset[("t", 0)]
        nursery.cancel_scope.cancel()


async def test_blocking_shell_produces_and_consumes():
    async with trio.open_nursery() as nursery:
        broker = await start_broker(nursery)
        boot = f"127.0.0.1:{broker.port}"

        def client_side():
            with Producer(boot, linger_ms=2, max_block_ms=1500) as producer:
                futs = [producer.send("t", b"w%d" % i, partition=1) for i in range(200)]
                producer.flush(timeout=10)
                offsets = [f.result(timeout=10) for f in futs]
                try:
                    producer.send("nope", b"x")
                    raise AssertionError("send to a missing topic should fail")
                except UnknownTopicOrPartitionError:
                    pass
            with Consumer(boot, auto_offset_reset="earliest") as consumer:
                consumer.assign([("t", 1)])
                consumer.seek(("t", 1), 150)
                got = []
                while len(got) < 50:
                    got += consumer.poll(500)
            return offsets, got

        with trio.fail_after(30):
            offsets, got = await trio.to_thread.run_sync(client_side)
        assert offsets == [(1, i) for i in range(200)]
        assert [r.offset for r in got] == list(range(150, 200))
        assert got[0].value == b"w150" and got[0].topic == "t"
        nursery.cancel_scope.cancel()


async def test_admin_shells_call_and_map_errors():
    async with trio.open_nursery() as nursery:
        broker = await start_broker(nursery)
        boot = f"127.0.0.1:{broker.port}"
        with trio.fail_after(20):
            async with aio.Admin(boot) as admin:
                info = await admin.create_topic("u", 3, 1)
                assert info.name == "u" and [p.partition for p in info.partitions] == [0, 1, 2]
                with pytest.raises(TopicAlreadyExistsError):
                    await admin.create_topic("t", 1, 1)
                assert (await admin.cluster_status()).commit_index == 9
                assert await admin.list_topics() == ["t"]

            def blocking_side():
                with Admin(boot) as admin:
                    return admin.cluster_status().controller_id, admin.describe_topics(["t"])["t"]

            controller_id, t = await trio.to_thread.run_sync(blocking_side)
            assert controller_id == 1 and len(t.partitions) == PARTITIONS
        nursery.cancel_scope.cancel()
