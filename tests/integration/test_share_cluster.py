"""Share groups (KIP-932) on a real three-node cluster with raftlog's ShareConsumer processes: five consumers on three partitions acknowledge each record once, a SIGKILLed member's records are redelivered after the lock, a poison record is archived at the delivery limit, a SIGKILLed share-partition leader loses no acknowledgement, and bad requests get Kafka's errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import node_harness as harness
from raftlog.base.errors import (
    FencedMemberEpochError,
    GroupIdNotFoundError,
    InvalidRecordStateError,
    InvalidRequestError,
    MemberIdRequiredError,
    UnknownMemberIdError,
)
from raftlog.base.topics import OFFSETS_TOPIC, partition_for_group
from raftlog.client import Admin, Producer

pytestmark = pytest.mark.cluster

CONSUMER = Path(__file__).with_name("share_consumer.py")
LOCK_MS = 3000
LIMIT = 3


@pytest.fixture(scope="module")
def share_cluster(tmp_path_factory):
    """Three nodes with short share locks and a low delivery limit (the defaults are 30 s and 5)."""
    settings = {**harness.TEST_SETTINGS, "group_share_record_lock_duration_ms": LOCK_MS,
                "group_share_delivery_count_limit": LIMIT}
    with harness.NodeCluster(tmp_path_factory.mktemp("share"), size=3, settings=settings) as c:
        c.start_all()
        c.wait_ready(timeout_s=60)
        yield c


class Proc:
    """One share_consumer.py process; its JSON lines collected by a reader thread."""

    def __init__(self, cluster, topic: str, group: str, name: str, mode: str = "accept", max_poll_records: int = 20):
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self.stderr = open(cluster.root / f"{name}.err", "w")
        self.proc = subprocess.Popen(
            [sys.executable, str(CONSUMER), ",".join(cluster.bootstrap()), topic, group, "--mode", mode,
             "--name", name, "--max-poll-records", str(max_poll_records)],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self._lock:
                self.events.append(json.loads(line))

    def records(self) -> list[dict]:
        with self._lock:
            return [e for e in self.events if e["ev"] == "rec"]

    def has(self, ev: str) -> bool:
        with self._lock:
            return any(e["ev"] == ev for e in self.events)

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self._reader.join(timeout=30)
        self.proc.stdout.close()
        self.stderr.close()


def make_topic(cluster, name: str, partitions: int, count: int) -> list[str]:
    with Admin(cluster.bootstrap()) as admin:
        admin.create_topic(name, partitions, 3)
    values = [f"{name}-{i}" for i in range(count)]
    with Producer(cluster.bootstrap(), acks="all", linger_ms=2) as p:
        for i, v in enumerate(values):
            p.send(name, v.encode(), partition=i % partitions)
        p.flush(timeout=60)
    return values


def test_five_consumers_acknowledge_each_record_once(share_cluster):
    values = make_topic(share_cluster, "sq5", 3, 300)
    procs = [Proc(share_cluster, "sq5", "g5", f"c{i}") for i in range(5)]
    try:
        def seen():
            return [r["v"] for p in procs for r in p.records()]
        share_cluster.wait_for(lambda: set(values) <= set(seen()), 120, "all 300 records consumed")
    finally:
        for p in procs:
            p.stop()
    got = seen()
    dup = {v for v in got if got.count(v) > 1}
    assert not dup, f"delivered twice: {sorted(dup)[:10]}"
    assert sum(1 for p in procs if p.records()) >= 2, "the records were shared between members"


def test_killed_member_records_are_redelivered_after_the_lock(share_cluster):
    values = make_topic(share_cluster, "sqk", 1, 20)
    holder = Proc(share_cluster, "sqk", "gk", "holder", mode="hold")
    try:
        share_cluster.wait_for(lambda: holder.has("holding"), 60, "the holder has records in flight")
        held = {r["v"] for r in holder.records()}
        assert held
    finally:
        holder.stop(signal.SIGKILL)
    other = Proc(share_cluster, "sqk", "gk", "other")
    try:
        share_cluster.wait_for(lambda: set(values) <= {r["v"] for r in other.records()}, 90,
                               "every record reached the second member")
        again = [r for r in other.records() if r["v"] in held]
        assert again and all(r["n"] == 2 for r in again), again[:5]
    finally:
        other.stop()


def test_poison_record_is_archived_at_the_delivery_limit(share_cluster):
    make_topic(share_cluster, "sqp", 1, 1)
    poison = Proc(share_cluster, "sqp", "gp", "poison", mode="poison")
    try:
        share_cluster.wait_for(lambda: len(poison.records()) >= LIMIT, 60, "the limit of deliveries")
        with Admin(share_cluster.bootstrap()) as admin:
            share_cluster.wait_for(lambda: admin.request(
                {"op": "share_group_offsets", "group_id": "gp", "topic": "sqp", "partition": 0},
                route=("sqp", 0))["start_offset"] == 1, 30, "the record archived (start offset past it)")
    finally:
        poison.stop()
    assert [r["n"] for r in poison.records()] == list(range(1, LIMIT + 1))


def _member(admin, group: str, topics: list[str]) -> dict:
    return admin.request({"op": "share_group_heartbeat", "group_id": group, "member_id": "", "member_epoch": 0,
                          "subscribed_topic_names": topics}, route=(OFFSETS_TOPIC, partition_for_group(group)))


def test_bad_requests_get_kafkas_errors_and_change_nothing(share_cluster):
    make_topic(share_cluster, "sqb", 1, 3)
    make_topic(share_cluster, "sqb2", 1, 1)
    with Admin(share_cluster.bootstrap()) as admin:
        coord = (OFFSETS_TOPIC, partition_for_group("gb"))
        m = _member(admin, "gb", ["sqb"])
        fetch = {"op": "share_fetch", "group_id": "gb", "member_id": m["member_id"], "topic": "sqb", "partition": 0,
                 "max_records": 1, "auto_offset_reset": "earliest"}
        got = admin.request(fetch, route=("sqb", 0))
        assert got["acquired"] == [[0, 0, 1]]
        with pytest.raises(InvalidRecordStateError):  # offset 1 is not held by this member
            admin.request({**fetch, "op": "share_acknowledge", "acknowledgements": [[0, 1, 1]]}, route=("sqb", 0))
        # In a fetch, a refused acknowledgement is answered beside the records, the fetch goes on.
        both = admin.request({**fetch, "acknowledgements": [[0, 1, 1]]}, route=("sqb", 0))
        assert both["acknowledge_error"]["code"] == "INVALID_RECORD_STATE" and both["acquired"] == [[1, 1, 1]]
        admin.request({**fetch, "op": "share_acknowledge", "acknowledgements": [[1, 1, 2]]}, route=("sqb", 0))
        with pytest.raises(InvalidRequestError):  # sqb2 is not assigned to the member
            admin.request({**fetch, "topic": "sqb2"}, route=("sqb2", 0))
        with pytest.raises(FencedMemberEpochError):
            admin.request({"op": "share_group_heartbeat", "group_id": "gb", "member_id": m["member_id"],
                           "member_epoch": m["member_epoch"] + 5}, route=coord)
        join = {"op": "join_group", "group_id": "classic-g", "member_id": "", "protocol_type": "consumer",
                "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
                "protocols": [{"name": "range", "metadata": b""}]}
        try:
            admin.request(join, route=(OFFSETS_TOPIC, partition_for_group("classic-g")))
        except MemberIdRequiredError as exc:  # the first join is told its member id
            admin.request({**join, "member_id": exc.details["member_id"]},
                          route=(OFFSETS_TOPIC, partition_for_group("classic-g")))
        with pytest.raises(GroupIdNotFoundError):
            _member(admin, "classic-g", ["sqb"])
        with pytest.raises(InvalidRequestError):  # a key __share_group_state's replay would refuse
            admin.request({"op": "share_group_reset", "group_id": "g" * 300, "topic": "sqb", "partition": 0,
                           "offset": 0}, route=("sqb", 0))
        # Nothing was lost: the held record is still the member's to accept.
        admin.request({**fetch, "op": "share_acknowledge", "acknowledgements": [[0, 0, 1]]}, route=("sqb", 0))
        offsets = admin.request({"op": "share_group_offsets", "group_id": "gb", "topic": "sqb", "partition": 0},
                                route=("sqb", 0))
        assert offsets["start_offset"] == 1


def test_killed_share_partition_leader_loses_no_acknowledgement(share_cluster):
    values = make_topic(share_cluster, "sql", 1, 200)
    c = Proc(share_cluster, "sql", "gl", "acker", mode="ack")
    leader = None
    try:
        share_cluster.wait_for(lambda: len(c.records()) >= 40, 60, "some records acknowledged")
        with Admin(share_cluster.bootstrap()) as admin:  # the leader now (an election may have moved it)
            leader = share_cluster.wait_for(lambda: admin.describe_topics(["sql"])["sql"].partitions[0].leader,
                                            60, "sql-0 has a leader")
        share_cluster.kill(leader)
        share_cluster.wait_for(lambda: set(values) <= {r["v"] for r in c.records()}, 120,
                               "every record delivered after the failover")
    finally:
        c.stop()
        if leader is not None:
            share_cluster.start(leader)
            share_cluster.wait_ready(timeout_s=90)  # the later tests create topics of RF 3
    with c._lock:
        events = list(c.events)
    acked: set[int] = set()
    for e in events:  # in the order the consumer saw them
        if e["ev"] == "acked":
            acked.update(e["offsets"])
        elif e["ev"] == "rec":
            assert e["o"] not in acked, f"offset {e['o']} delivered again after its acknowledgement was durable"
    assert all(r["n"] <= LIMIT for r in c.records())


def cli(cluster, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "raftlog.cli", *args, "--bootstrap", ",".join(cluster.bootstrap())],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cli_consume_share_group_and_share_groups_commands(share_cluster):
    values = make_topic(share_cluster, "sqc", 2, 10)
    out = cli(share_cluster, "consume", "sqc", "--share-group", "gc", "--from-beginning", "--max-messages", "10")
    assert sorted(out.split()) == sorted(values)
    assert "gc" in [g["group_id"] for g in json.loads(cli(share_cluster, "share-groups", "list", "--json"))]
    d = json.loads(cli(share_cluster, "share-groups", "describe", "gc", "--json"))
    assert d["state"] == "Empty" and d["members"] == []  # the consumer left when it closed
    assert "dry run" in cli(share_cluster, "share-groups", "reset-offsets", "gc", "--topic", "sqc", "--to-earliest")
    cli(share_cluster, "share-groups", "reset-offsets", "gc", "--topic", "sqc", "--to-earliest", "--execute")
    again = cli(share_cluster, "consume", "sqc", "--share-group", "gc", "--max-messages", "10")
    assert sorted(again.split()) == sorted(values)  # read again from the start
    cli(share_cluster, "share-groups", "delete", "gc")
    assert "gc" not in [g["group_id"] for g in json.loads(cli(share_cluster, "share-groups", "list", "--json"))]


async def test_trio_share_consumers_split_the_records(share_cluster):
    """Two trio members share a topic; every record is accepted exactly once. A commit may be
    refused when a lock ran out first (3 s here, and a loaded machine can take that long
    between poll and commit): the record comes back to some member, and only the commits
    that held count as accepted."""
    import trio

    from raftlog import aio

    values = set(make_topic(share_cluster, "sqa", 3, 60))
    accepted: dict[str, list[str]] = {"a": [], "b": []}

    def done() -> bool:
        return set(accepted["a"]) | set(accepted["b"]) == values

    async def member(name: str) -> None:
        async with aio.ShareConsumer(share_cluster.bootstrap(), "ga", acknowledgement_mode="explicit",
                                     auto_offset_reset="earliest", max_poll_records=5) as c:
            c.subscribe(["sqa"])
            with trio.move_on_after(90):
                while not done():
                    polled = await c.poll(timeout_ms=500)
                    for r in polled:
                        c.acknowledge(r, "accept")
                    results = await c.commit_sync()
                    refused = {tp: e for tp, e in results.items() if e is not None}
                    assert all(isinstance(e, InvalidRecordStateError) for e in refused.values()), refused
                    accepted[name] += [r.value.decode() for r in polled
                                       if (r.topic, r.partition) in results and (r.topic, r.partition) not in refused]

    async with trio.open_nursery() as nursery:
        nursery.start_soon(member, "a")
        nursery.start_soon(member, "b")
    everything = accepted["a"] + accepted["b"]
    assert set(everything) == values and len(everything) == len(values), "each record accepted once"


def test_coordinator_failover_keeps_the_share_group(share_cluster):
    """Membership is persisted: after the coordinator is SIGKILLed, the new one accepts the
    member's next heartbeat with the epoch it had (no UNKNOWN_MEMBER_ID, no rejoin)."""
    make_topic(share_cluster, "sqf", 2, 1)
    with Admin(share_cluster.bootstrap()) as admin:
        m = _member(admin, "gf", ["sqf"])
        p = partition_for_group("gf")
        coordinator = admin.describe_topics([OFFSETS_TOPIC])[OFFSETS_TOPIC].partitions[p].leader
    beat = {"op": "share_group_heartbeat", "group_id": "gf", "member_id": m["member_id"],
            "member_epoch": m["member_epoch"]}
    share_cluster.kill(coordinator)
    try:
        with Admin(share_cluster.bootstrap()) as admin:
            def heartbeat():
                try:
                    return admin.request(beat, route=(OFFSETS_TOPIC, p))
                except UnknownMemberIdError as exc:  # the group was lost: fail now, not at the deadline
                    return {"lost": str(exc)}
            answer = share_cluster.wait_for(heartbeat, 90, "a heartbeat answered by the new coordinator")
            assert "lost" not in answer, answer
            assert answer["member_epoch"] == m["member_epoch"]
            (described,) = admin.request({"op": "share_group_describe", "group_ids": ["gf"]},
                                         route=(OFFSETS_TOPIC, p))["groups"]
            assert [x["member_id"] for x in described["members"]] == [m["member_id"]]
            assert described["members"][0]["assignment"] == [{"topic": "sqf", "partitions": [0, 1]}]
    finally:
        share_cluster.start(coordinator)
        share_cluster.wait_ready(timeout_s=90)
