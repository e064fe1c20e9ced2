"""Consumer groups through the Kafka listener with real clients (confluent-kafka, kafka-python, aiokafka, kcat -G) on a three-node cluster: a group of two shares a topic with each record read once and hands over when one leaves, commits are resumed (across protocols too: a raftlog member and a Kafka member in one group), and groups are listed, described and deleted by each client's admin API."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from raftlog.base.errors import InvalidReplicationFactorError
from raftlog.base.topics import OFFSETS_TOPIC
from raftlog.client import Admin, Consumer, Producer
from raftlog.base.consumer_protocol import decode_assignment, decode_subscription
from raftlog.client.group_admin import GroupAdmin

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer as CKConsumer  # noqa: E402
from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException  # noqa: E402
from confluent_kafka import TopicPartition as CKTopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

import node_harness as harness  # noqa: E402

TIMEOUT_S = 60
PARTITIONS = 4
SESSION_MS = 6000
HEARTBEAT_MS = 500


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.NodeCluster]:
    with harness.NodeCluster(tmp_path_factory.mktemp("kafka-groups"), size=3) as c:
        c.start_all()
        c.wait_ready(timeout_s=60)
        wait_coordinators(c)
        yield c


def wait_coordinators(cluster) -> None:
    """Every group has a coordinator before the first client asks (librdkafka's admin client
    stalls on a FindCoordinator answered COORDINATOR_NOT_AVAILABLE at start-up)."""
    with Admin(cluster.bootstrap(), request_timeout_ms=15_000) as admin:
        cluster.wait_for(lambda: all(p.leader is not None for p in admin.describe_topics(
            [OFFSETS_TOPIC])[OFFSETS_TOPIC].partitions), 60, "__consumer_offsets leaders")


def create(cluster, name: str, partitions: int = PARTITIONS) -> None:
    with Admin(cluster.bootstrap(), request_timeout_ms=15_000) as admin:
        def created() -> bool:
            try:
                admin.create_topic(name, partitions, 3)
            except InvalidReplicationFactorError:  # a broker not unfenced yet: retry
                return False
            return True

        cluster.wait_for(created, 30, f"create {name}")
        cluster.wait_for(lambda: all(p.leader is not None for p in admin.describe_topics([name])[name].partitions),
                         20, f"leaders of {name}")


def produce(cluster, topic: str, values: list[str]) -> None:
    """Each value to partition i % PARTITIONS, acks=all (the native producer: the records are
    the same whichever protocol wrote them)."""
    with Producer(cluster.bootstrap(), acks="all") as p:
        futures = [p.send(topic, v.encode(), partition=i % PARTITIONS) for i, v in enumerate(values)]
        for f in futures:
            f.result(TIMEOUT_S)


def wait_until(predicate: Callable[[], Any], what: str, timeout_s: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# --------------------------------------------------------------------------- members


class Member:
    """One group member of some client library, polling in its own thread: records what it
    reads, commits synchronously after every poll that returned records, and on stop()
    commits, then closes (which leaves the group)."""

    kind = "?"

    def __init__(self, cluster, topic: str, group: str, name: str):
        self.cluster, self.topic, self.group, self.name = cluster, topic, group, name
        self.records: list[tuple[int, int, str]] = []      # (partition, offset, value)
        self.assigned: tuple[int, ...] = ()
        self.error: BaseException | None = None
        self.commit_errors: list[tuple[int, str]] = []  # (partition, error) of commits that failed
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> "Member":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        assert not self._thread.is_alive(), f"{self.name} did not close"
        if self.error is not None:
            raise self.error

    def values(self) -> list[str]:
        with self._lock:
            return [v for _, _, v in self.records]

    def _got(self, records: list[tuple[int, int, str]], assigned: Any) -> None:
        with self._lock:
            self.records.extend(records)
            self.assigned = tuple(sorted(assigned))

    def _main(self) -> None:
        try:
            self.run(self._stop)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def run(self, stop: threading.Event) -> None:
        raise NotImplementedError


class ConfluentMember(Member):
    kind = "confluent-kafka"

    def run(self, stop: threading.Event) -> None:
        c = CKConsumer({
            "bootstrap.servers": self.cluster.kafka_bootstrap(), "group.id": self.group,
            "client.id": self.name, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
        })  # fmt: skip
        c.subscribe([self.topic])
        try:
            while not stop.is_set():
                msgs = c.consume(100, 0.2)
                got = []
                for m in msgs:
                    if m.error() is not None:
                        if m.error().code() == KafkaError._PARTITION_EOF:
                            continue
                        raise KafkaException(m.error())
                    got.append((m.partition(), m.offset(), m.value().decode()))
                if got:
                    # A sync commit raises only when the whole request failed: a refused
                    # commit (e.g. REBALANCE_IN_PROGRESS) is in each partition's .error.
                    for tp in c.commit(asynchronous=False) or ():
                        if tp.error is not None:
                            self.commit_errors.append((tp.partition, tp.error.name()))
                self._got(got, [tp.partition for tp in c.assignment()])
        finally:
            c.close()


class NativeMember(Member):
    kind = "raftlog"

    def run(self, stop: threading.Event) -> None:
        c = Consumer(self.cluster.bootstrap(), group_id=self.group, client_id=self.name,
                     auto_offset_reset="earliest", enable_auto_commit=False,
                     session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS, max_wait_ms=200)
        c.subscribe([self.topic])
        try:
            while not stop.is_set():
                got = [(r.partition, r.offset, r.value.decode()) for r in c.poll(200)]
                if got:
                    c.commit()
                self._got(got, [p for _, p in c.assignment()])
        finally:
            c.close()


class KafkaPythonMember(Member):
    kind = "kafka-python"

    def run(self, stop: threading.Event) -> None:
        kafka = pytest.importorskip("kafka")
        c = kafka.KafkaConsumer(
            self.topic, bootstrap_servers=self.cluster.kafka_bootstrap(), group_id=self.group,
            client_id=self.name, enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
        )  # fmt: skip
        try:
            while not stop.is_set():
                batches = c.poll(timeout_ms=200)
                got = [(r.partition, r.offset, r.value.decode()) for rs in batches.values() for r in rs]
                if got:
                    c.commit()
                self._got(got, [tp.partition for tp in c.assignment()])
        finally:
            c.close()


class AIOKafkaMember(Member):
    kind = "aiokafka"

    def run(self, stop: threading.Event) -> None:
        aiokafka = pytest.importorskip("aiokafka")

        from aiokafka.coordinator.assignors.range import RangePartitionAssignor
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        async def main() -> None:
            # aiokafka offers only "roundrobin" by default; the others (and raftlog's consumer)
            # offer "range" first, and a group whose members share no protocol refuses the
            # newcomer (INCONSISTENT_GROUP_PROTOCOL, as Kafka does): offer both, as kafka-python
            # and librdkafka do by default.
            c = aiokafka.AIOKafkaConsumer(
                self.topic, bootstrap_servers=self.cluster.kafka_bootstrap(), group_id=self.group,
                client_id=self.name, enable_auto_commit=False, auto_offset_reset="earliest",
                session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                partition_assignment_strategy=(RangePartitionAssignor, RoundRobinPartitionAssignor),
            )  # fmt: skip
            await c.start()
            try:
                while not stop.is_set():
                    batches = await c.getmany(timeout_ms=200)
                    got = [(r.partition, r.offset, r.value.decode()) for rs in batches.values() for r in rs]
                    if got:
                        await c.commit()
                    self._got(got, [tp.partition for tp in c.assignment()])
            finally:
                await c.stop()

        asyncio.run(main())


KINDS: dict[str, type[Member]] = {
    "ck": ConfluentMember, "native": NativeMember, "kp": KafkaPythonMember, "aio": AIOKafkaMember,
}


def everything_once(members: list[Member], expected: list[str]) -> None:
    counts = Counter(v for m in members for v in m.values())
    twice = {v for v, n in counts.items() if n > 1}
    # Who read each record read twice, where, in reading order: what tells a re-read
    # partition (a lost commit, a reset position) from two owners at once.
    assert not twice, "records read twice: " + "; ".join(
        f"{m.name}: {[(p, o) for p, o, v in m.records if v in twice][:12]}, failed commits"
        f" {m.commit_errors[:6]}" for m in members)
    assert sorted(counts) == sorted(expected)


def split_between(a: Member, b: Member) -> bool:
    return (bool(a.assigned) and bool(b.assigned) and not set(a.assigned) & set(b.assigned)
            and set(a.assigned) | set(b.assigned) == set(range(PARTITIONS)))


@pytest.mark.parametrize("first, second, resumer", [
    ("ck", "ck", "ck"),
    ("kp", "kp", "kp"),
    ("aio", "aio", "aio"),
    ("ck", "native", "native"),   # Kafka leader assigns to a raftlog member; raftlog resumes Kafka's commits
    ("native", "ck", "ck"),       # raftlog leader assigns to a Kafka member; Kafka resumes raftlog's commits
    ("kp", "native", "native"),   # kafka-python leads a raftlog member
    ("native", "aio", "aio"),     # aiokafka (ConsumerProtocol v0 reader) follows a raftlog leader
])
def test_group_of_two_shares_hands_over_and_resumes(cluster, first, second, resumer):
    topic = group = f"grp-{first}-{second}"
    create(cluster, topic)
    a = KINDS[first](cluster, topic, group, f"{first}-a").start()
    b = None
    try:
        wait_until(lambda: a.assigned == tuple(range(PARTITIONS)), f"{a.name} owns every partition")
        b = KINDS[second](cluster, topic, group, f"{second}-b").start()
        wait_until(lambda: split_between(a, b), "the partitions split between the two members")
        wave1 = [f"w1-{i}" for i in range(400)]
        produce(cluster, topic, wave1)
        wait_until(lambda: len(a.values()) + len(b.values()) >= len(wave1), "wave 1 read")
        assert a.values() and b.values(), "both members read"
        everything_once([a, b], wave1)
        b.stop()  # commits and leaves: `a` takes its partitions from b's commits
        wait_until(lambda: a.assigned == tuple(range(PARTITIONS)), f"{a.name} owns every partition again")
        wave2 = [f"w2-{i}" for i in range(100)]
        produce(cluster, topic, wave2)
        wait_until(lambda: len(a.values()) + len(b.values()) >= len(wave1) + len(wave2), "wave 2 read")
        everything_once([a, b], wave1 + wave2)
    finally:
        a.stop()
        if b is not None and b._thread.is_alive():
            b.stop()
    # Commit and resume: a new member of the group starts where the group's commits are.
    c = KINDS[resumer](cluster, topic, group, f"{resumer}-c").start()
    try:
        wait_until(lambda: c.assigned == tuple(range(PARTITIONS)), f"{c.name} owns every partition")
        wave3 = [f"w3-{i}" for i in range(50)]
        produce(cluster, topic, wave3)
        wait_until(lambda: len(c.values()) >= len(wave3), "wave 3 read")
        assert sorted(c.values()) == sorted(wave3), "the resumed member re-read or skipped records"
    finally:
        c.stop()


# --------------------------------------------------------------------------- admin


@pytest.fixture(scope="module")
def busy_group(cluster) -> Iterator[tuple[str, str, list[Member]]]:
    """A group with a confluent-kafka member and a raftlog member, stable, with commits."""
    topic = group = "admin-grp"
    create(cluster, topic)
    members = [ConfluentMember(cluster, topic, group, "ck-admin").start()]
    wait_until(lambda: members[0].assigned, "the first member's assignment")
    members.append(NativeMember(cluster, topic, group, "native-admin").start())
    try:
        wait_until(lambda: split_between(*members), "the partitions split")
        produce(cluster, topic, [f"v{i}" for i in range(40)])
        wait_until(lambda: sum(len(m.values()) for m in members) >= 40, "the records read")
        yield topic, group, members
    finally:
        for m in members:
            if m._thread.is_alive():
                m.stop()


def _assignments_by_client(members: list[Member]) -> dict[str, set[int]]:
    return {m.name: set(m.assigned) for m in members}


def test_confluent_admin_lists_describes_and_deletes_groups(cluster, busy_group):
    topic, group, members = busy_group
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    listed = admin.list_consumer_groups().result(TIMEOUT_S)
    assert group in {g.group_id for g in listed.valid}
    desc = admin.describe_consumer_groups([group])[group].result(TIMEOUT_S)
    assert desc.state == ConsumerGroupState.STABLE and not desc.is_simple_consumer_group
    assert desc.partition_assignor == "range"
    # librdkafka decodes every member's assignment bytes, the raftlog member's too
    got = {m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in desc.members}
    assert got == _assignments_by_client(members)
    # Kafka's form of the member's address; a raftlog member's join carries no host
    assert {m.client_id: m.host.startswith("/") for m in desc.members} == {"ck-admin": True, "native-admin": False}
    offsets = admin.list_consumer_group_offsets(
        [confluent_kafka.ConsumerGroupTopicPartitions(group)])[group].result(TIMEOUT_S)
    assert sum(tp.offset for tp in offsets.topic_partitions if tp.offset >= 0) >= 40
    with pytest.raises(KafkaException) as refused:
        admin.delete_consumer_groups([group])[group].result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    # once every member left, the group and its offsets go
    for m in members:
        m.stop()
    admin.delete_consumer_groups([group])[group].result(TIMEOUT_S)
    wait_until(lambda: group not in {g.group_id for g in admin.list_consumer_groups().result(TIMEOUT_S).valid},
               "the group gone from the list")
    c = CKConsumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": group})
    try:
        committed = c.committed([CKTopicPartition(topic, p) for p in range(PARTITIONS)], timeout=TIMEOUT_S)
    finally:
        c.close()
    assert all(tp.offset < 0 for tp in committed), "offsets survived the delete"


def _run_group(cluster, topic: str, group: str) -> list[Member]:
    create(cluster, topic)
    members = [KafkaPythonMember(cluster, topic, group, "kp-admin").start()]
    wait_until(lambda: members[0].assigned, "the first member's assignment")
    members.append(NativeMember(cluster, topic, group, "native-admin").start())
    wait_until(lambda: split_between(*members), "the partitions split")
    produce(cluster, topic, [f"v{i}" for i in range(40)])
    wait_until(lambda: sum(len(m.values()) for m in members) >= 40, "the records read")
    return members


def test_kafka_python_admin_lists_describes_and_deletes_groups(cluster):
    kafka = pytest.importorskip("kafka")
    topic = group = "kp-admin-grp"
    members = _run_group(cluster, topic, group)
    admin = kafka.KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap())
    try:
        assert group in {g["group_id"] for g in admin.list_groups()}
        d = admin.describe_groups([group])[group]
        assert d["error"] is None and d["group_state"] == "Stable" and d["protocol_data"] == "range"
        got = {m["client_id"]: {p for t in m["member_assignment"]["assigned_partitions"] for p in t["partitions"]}
               for m in d["members"]}
        assert got == _assignments_by_client(members)
        offsets = admin.list_group_offsets({group: None})[group]
        assert sum(o.offset for o in offsets.values()) >= 40
        for m in members:
            m.stop()
        assert admin.delete_groups([group]) in ({group: None}, [(group, None)], {group: {"error": None}}) \
            or group not in {g["group_id"] for g in admin.list_groups()}
        wait_until(lambda: group not in {g["group_id"] for g in admin.list_groups()}, "the group gone")
    finally:
        admin.close()
        for m in members:
            if m._thread.is_alive():
                m.stop()


def test_aiokafka_admin_lists_and_describes_groups(cluster):
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.admin import AIOKafkaAdminClient
    topic = group = "aio-admin-grp"
    members = _run_group(cluster, topic, group)

    async def run() -> tuple[Any, Any, Any]:
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap())
        await admin.start()
        try:
            listed = await admin.list_consumer_groups()
            described = await admin.describe_consumer_groups([group])
            offsets = await admin.list_consumer_group_offsets(group)
            return listed, described, offsets
        finally:
            await admin.close()

    try:
        listed, described, offsets = asyncio.run(run())
    finally:
        for m in members:
            m.stop()
    assert group in {g[0] for g in listed}
    (response,) = described
    (g,) = response.groups
    error_code, group_id, state, protocol_type, protocol, raw_members = g[:6]
    assert (error_code, group_id, state, protocol_type, protocol) == (0, group, "Stable", "consumer", "range")
    # aiokafka hands back raw member tuples: (member_id, [instance id,] client_id, client_host,
    # metadata, assignment)
    got = {m[-4]: {p for _, p in decode_assignment(m[-1]).partitions} for m in raw_members}
    assert got == _assignments_by_client(members)
    assert sum(o.offset for o in offsets.values()) >= 40
    assert aiokafka.TopicPartition(topic, 0) in offsets


def test_groups_describe_reads_kafka_clients_assignments(cluster):
    """`raftlog groups describe` (GroupAdmin) decodes what librdkafka's leader assigned."""
    topic = group = "describe-grp"
    create(cluster, topic)
    a = ConfluentMember(cluster, topic, group, "ck-1").start()
    b = None
    try:
        wait_until(lambda: a.assigned, "the first assignment")
        b = ConfluentMember(cluster, topic, group, "ck-2").start()
        wait_until(lambda: split_between(a, b), "the partitions split")
        produce(cluster, topic, [f"v{i}" for i in range(20)])
        wait_until(lambda: len(a.values()) + len(b.values()) >= 20, "the records read")
        with GroupAdmin(cluster.bootstrap()) as ga:
            d = wait_until(lambda: (lambda d: d if d["state"] == "Stable" and all(
                r["committed_offset"] is not None for r in d["partitions"]) else None)(ga.describe_group(group)),
                "a stable description with commits")
        assert d["protocol_type"] == "consumer" and d["protocol"] == "range"
        owners = {m["client_id"]: {p for _, p in m["partitions"]} for m in d["members"]}
        assert owners == _assignments_by_client([a, b])
        assert all(m["assignment_readable"] and m["client_host"].startswith("/") for m in d["members"])
        assert all(r["lag"] == 0 for r in d["partitions"]), d["partitions"]
    finally:
        a.stop()
        if b is not None:
            b.stop()


def test_every_clients_subscription_decodes_natively(cluster):
    """The strict native codec reads the JoinGroup metadata each Kafka client really sends."""
    topic = "subs"
    create(cluster, topic, 1)
    for kind in ("ck", "kp", "aio"):
        group = f"subs-{kind}"
        m = KINDS[kind](cluster, topic, group, f"{kind}-subs").start()
        try:
            wait_until(lambda: m.assigned, f"{kind} assigned")
            with GroupAdmin(cluster.bootstrap()) as ga:
                raw = ga._coord(group, {"op": "describe_groups", "group_ids": [group]})["groups"][0]
        finally:
            m.stop()
        (member,) = raw["members"]
        assert decode_subscription(member["metadata"]).topics == (topic,), kind
        assert decode_assignment(member["assignment"]).partitions == ((topic, 0),), kind


# --------------------------------------------------------------------------- kcat -G


class KcatMember:
    """`kcat -G GROUP TOPIC`: a balanced consumer process; SIGTERM makes it close (leave)."""

    def __init__(self, cluster, topic: str, group: str, name: str, log_dir: Path):
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self.stderr = open(log_dir / f"{name}.err", "w")
        self.proc = subprocess.Popen(
            ["kcat", "-b", cluster.kafka_bootstrap(), "-G", group, topic, "-u", "-q", "-f", "%p:%o:%s\n",
             "-X", f"client.id={name}", "-X", f"session.timeout.ms={SESSION_MS}",
             "-X", f"heartbeat.interval.ms={HEARTBEAT_MS}", "-X", "auto.offset.reset=earliest",
             "-X", "auto.commit.interval.ms=200"],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def values(self) -> list[str]:
        with self._lock:
            return [line.split(":", 2)[2] for line in self.lines]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(TIMEOUT_S)
        self._reader.join(TIMEOUT_S)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.stderr.close()
        return code


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (scripts/test installs it)")
def test_kcat_balanced_consumers_share_and_hand_over(cluster, tmp_path):
    topic = group = "kcat-grp"
    create(cluster, topic)
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})

    def members() -> dict[str, set[int]]:
        try:
            d = admin.describe_consumer_groups([group])[group].result(TIMEOUT_S)
        except KafkaException as exc:
            if exc.args[0].code() in (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
                                      KafkaError.COORDINATOR_NOT_AVAILABLE):  # a young cluster
                return {}
            raise
        if d.state != ConsumerGroupState.STABLE:
            return {}
        return {m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in d.members}

    a = KcatMember(cluster, topic, group, "kcat-a", tmp_path)
    b = None
    try:
        wait_until(lambda: members() == {"kcat-a": set(range(PARTITIONS))}, "kcat-a owns every partition")
        b = KcatMember(cluster, topic, group, "kcat-b", tmp_path)
        wait_until(lambda: (lambda m: set(m) == {"kcat-a", "kcat-b"} and all(m.values()))(members()),
                   "the partitions split between the two kcat members")
        wave1 = [f"w1-{i}" for i in range(200)]
        produce(cluster, topic, wave1)
        wait_until(lambda: len(a.values()) + len(b.values()) >= len(wave1), "wave 1 read")
        assert a.values() and b.values(), "both kcat members read"
        assert sorted(a.values() + b.values()) == sorted(wave1)
        # kcat commits every 200 ms (auto commit) and once more as it closes on SIGTERM
        b.stop()
        wait_until(lambda: members() == {"kcat-a": set(range(PARTITIONS))}, "kcat-a owns every partition again")
        wave2 = [f"w2-{i}" for i in range(100)]
        produce(cluster, topic, wave2)
        wait_until(lambda: len(a.values()) + len(b.values()) >= len(wave1) + len(wave2), "wave 2 read")
        counts = Counter(a.values() + b.values())
        assert sorted(counts) == sorted(wave1 + wave2)
        assert not [v for v, n in counts.items() if n > 1], "a record was read twice"
    finally:
        a.stop()
        if b is not None and b.proc.poll() is None:
            b.stop()
