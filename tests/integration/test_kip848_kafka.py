"""KIP-848 consumer groups (`group.protocol=consumer`) with confluent-kafka on a three-node cluster: a group of three consumer processes, one SIGKILLed and one added, never has one partition with two owners at once and reads every record (twice only what the killed member read and had not committed), a new member resumes from the commits; a SIGKILLed coordinator's successor replays the group (same epochs, same members); a regex subscription follows new topics; a classic group upgrades online with its offsets, and a rolling restart of three classic members with group.protocol=consumer converts the group (and back) with every record read and no partition owned twice at a time; and bad input (stale epochs, a bad regex, a group of the other protocol) gets Kafka's error codes while the group keeps serving."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer as CKConsumer  # noqa: E402
from confluent_kafka import ConsumerGroupState, ConsumerGroupType  # noqa: E402
from confluent_kafka import Producer as CKProducer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from kafka.protocol.consumer.group import JoinGroupRequest, OffsetCommitRequest, OffsetFetchRequest  # noqa: E402

import node_harness as harness  # noqa: E402
from raftlog.node.kafka.schemas import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest  # noqa: E402
from test_kafka_groups import create, wait_coordinators, wait_until  # noqa: E402
from test_kafka_unsupported import call  # noqa: E402

CONSUMER = Path(__file__).with_name("kip848_consumer.py")
TIMEOUT_S = 90
SESSION_MS = 6000
PARTITIONS = 6
BAD_TOPIC = "kip848-bad-input"
FENCED_MEMBER_EPOCH, STALE_MEMBER_EPOCH, INVALID_REGULAR_EXPRESSION = 110, 113, 128
GROUP_ID_NOT_FOUND, INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID = 69, 23, 25


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.NodeCluster]:
    settings = {**harness.TEST_SETTINGS, "group_consumer_session_timeout_ms": SESSION_MS,
                "group_consumer_heartbeat_interval_ms": 500}
    with harness.NodeCluster(tmp_path_factory.mktemp("kip848"), size=3, settings=settings) as c:
        c.start_all()
        c.wait_ready(timeout_s=60)
        wait_coordinators(c)
        yield c


def produce(cluster, topic: str, values: list[str], partitions: int = PARTITIONS) -> None:
    p = CKProducer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all"})
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), partition=i % partitions)
    assert p.flush(TIMEOUT_S) == 0


class Proc:
    """One kip848_consumer.py process; its JSON events collected by a reader thread."""

    def __init__(self, cluster, group: str, name: str, *args: str):
        self.name = name
        self.events: list[dict[str, Any]] = []
        self.ended_at: float | None = None
        self.proc = subprocess.Popen([sys.executable, str(CONSUMER), cluster.kafka_bootstrap(), group,
                                      "--client-id", name, *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def owned(self) -> set[tuple[str, int]]:
        held: set[tuple[str, int]] = set()
        for e in list(self.events):
            if e["ev"] == "assigned":
                held |= {tuple(p) for p in e["partitions"]}
            elif e["ev"] == "revoked":
                held -= {tuple(p) for p in e["partitions"]}
        return held

    def values(self) -> list[str]:
        return [e["v"] for e in list(self.events) if e["ev"] == "rec"]

    def kill(self) -> None:
        self.ended_at = time.monotonic()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(TIMEOUT_S)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(TIMEOUT_S)
        self._reader.join(TIMEOUT_S)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        if self.ended_at is None:
            self.ended_at = time.monotonic()


def ownership(proc: Proc) -> dict[tuple[str, int], list[tuple[float, float]]]:
    """Partition -> the intervals during which `proc` owned it (assigned .. revoked / end)."""
    out: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
    since: dict[tuple[str, int], float] = {}
    for e in proc.events:
        if e["ev"] == "assigned":
            for p in e["partitions"]:
                since[tuple(p)] = e["t"]
        elif e["ev"] == "revoked":
            for p in e["partitions"]:
                if tuple(p) in since:
                    out[tuple(p)].append((since.pop(tuple(p)), e["t"]))
    assert proc.ended_at is not None
    for p, t in since.items():
        out[p].append((t, proc.ended_at))
    return out


def assert_one_owner_at_a_time(procs: list[Proc]) -> None:
    """Each partition had one owner at a time (ownership as the members' callbacks saw it)."""
    intervals = [(p.name, part, span) for p in procs for part, spans in ownership(p).items() for span in spans]
    for i, (a, pa, (s1, e1)) in enumerate(intervals):
        for b, pb, (s2, e2) in intervals[i + 1:]:
            if a != b and pa == pb:
                assert e1 <= s2 or e2 <= s1, f"{pa} owned by {a} {s1:.3f}..{e1:.3f} and {b} {s2:.3f}..{e2:.3f}"


def test_three_members_one_killed_one_added(cluster):
    topic, group = "kip848-orders", "kip848-app"
    create(cluster, topic, PARTITIONS)
    batch = [f"a{i}" for i in range(300)]
    produce(cluster, topic, batch)
    procs = [Proc(cluster, group, f"m{i}", "--topic", topic) for i in range(3)]
    try:
        wait_until(lambda: sorted(v for p in procs for v in p.values()) >= sorted(batch)
                   and all(p.owned() for p in procs), "three members sharing the topic", TIMEOUT_S)
        victim = procs[1]
        victim.kill()
        batch2 = [f"b{i}" for i in range(300)]
        produce(cluster, topic, batch2)
        survivors = [procs[0], procs[2]]
        wait_until(lambda: set(batch2) <= {v for p in survivors for v in p.values()}
                   and len(set().union(*(p.owned() for p in survivors))) == PARTITIONS,
                   "the survivors taking over the killed member's partitions", TIMEOUT_S)
        procs.append(Proc(cluster, group, "m3", "--topic", topic))
        wait_until(lambda: procs[3].owned(), "the new member's first partitions", TIMEOUT_S)
        batch3 = [f"c{i}" for i in range(300)]
        produce(cluster, topic, batch3)
        wait_until(lambda: set(batch3) <= {v for p in procs for v in p.values()}, "every record of the last batch",
                   TIMEOUT_S)
    finally:
        for p in procs:
            p.stop()
    assert_one_owner_at_a_time(procs)
    # Every record was read while its reader owned the partition.
    owned = {p.name: ownership(p) for p in procs}
    for p in procs:
        for e in p.events:
            if e["ev"] == "rec":
                assert any(s <= e["t"] <= end for s, end in owned[p.name][(e["topic"], e["p"])]), (p.name, e)
    # Every record read; twice only what the killed member read and had not committed.
    reads: dict[str, list[str]] = defaultdict(list)
    for p in procs:
        for v in p.values():
            reads[v].append(p.name)
    assert set(reads) == set(batch + batch2 + batch3)
    committed = {(e["topic"], e["p"], e["o"] - 1) for e in victim.events if e["ev"] == "committed"}
    uncommitted = {next(e["v"] for e in victim.events if e["ev"] == "rec" and (e["topic"], e["p"], e["o"]) == k)
                   for k in {(e["topic"], e["p"], e["o"]) for e in victim.events if e["ev"] == "rec"} - committed}
    twice = {v for v, readers in reads.items() if len(readers) > 1}
    assert twice <= uncommitted, twice - uncommitted
    assert all(len(r) <= 2 for r in reads.values())
    # The new member took partitions; the group is Stable with three members.
    assert procs[3].values()
    desc = describe(cluster, group)
    assert desc.error_code == 0 and desc.group_state == "Empty"  # every member left on close
    # Commit and resume: a new member reads only what came after the commits.
    produce(cluster, topic, ["d0", "d1", "d2"])
    late = Proc(cluster, group, "m4", "--topic", topic)
    try:
        wait_until(lambda: {"d0", "d1", "d2"} <= set(late.values()), "the resumed member's records", TIMEOUT_S)
    finally:
        late.stop()
    assert sorted(late.values()) == ["d0", "d1", "d2"]


def test_coordinator_failover_rebuilds_the_group(cluster):
    topic, group = "kip848-failover", "kip848-failover-app"
    create(cluster, topic, 4)
    procs = [Proc(cluster, group, f"f{i}", "--topic", topic) for i in range(2)]
    try:
        wait_until(lambda: all(p.owned() for p in procs), "two members sharing the topic")
        before = describe(cluster, group)
        node_id = cluster.call(1, "find_coordinator", group_id=group)["node_id"]
        cluster.kill(node_id)  # SIGKILL the coordinator: another node replays the group's records
        try:
            values = [f"f{i}" for i in range(40)]
            produce(cluster, topic, values, partitions=4)
            wait_until(lambda: set(values) <= {v for p in procs for v in p.values()}, "every record after failover")
            after = cluster.wait_for(lambda: (d := describe(cluster, group)).error_code == 0 and d, TIMEOUT_S,
                                     "the group at its new coordinator")
            assert after.group_epoch >= before.group_epoch and len(after.members) == 2
        finally:
            cluster.start(node_id)
    finally:
        for p in procs:
            p.stop()
    assert_one_owner_at_a_time(procs)


def test_a_mixed_group_survives_coordinator_failover(cluster):
    """Two classic members and one KIP-848 member (an upgrade under way); the coordinator is
    SIGKILLed: its successor replays the group with its classic members (their protocols and
    session timeouts are in the records), and every member keeps consuming."""
    topic, group = "kip848-mixed-failover", "kip848-mixed-failover-app"
    create(cluster, topic, 4)
    procs = [Proc(cluster, group, f"mc{i}", "--topic", topic, "--protocol", "classic") for i in range(2)]
    try:
        wait_until(lambda: all(p.owned() for p in procs), "two classic members sharing the topic")
        procs.append(Proc(cluster, group, "mk", "--topic", topic))
        before = wait_until(lambda: (d := describe(cluster, group)).error_code == 0 and d.group_state == "Stable"
                            and len(d.members) == 3 and all(p.owned() for p in procs) and d, "a Stable mixed group")
        assert sorted(m.member_type for m in before.members) == [0, 0, 1]
        text = subprocess.run([sys.executable, "-m", "raftlog.cli", "groups", "describe", group, "--bootstrap",
                               ",".join(cluster.bootstrap())], capture_output=True, text=True, timeout=60).stdout
        ids = {m.member_id: m.member_type for m in before.members}
        rows = {r[0]: r[1] for r in (line.split() for line in text.splitlines()) if r and r[0] in ids and len(r) > 2
                and r[1] in ("classic", "consumer")}  # the members table: MEMBER-ID PROTOCOL ...
        assert rows == {mid: "classic" if kind == 0 else "consumer" for mid, kind in ids.items()}, text
        node_id = cluster.call(1, "find_coordinator", group_id=group)["node_id"]
        cluster.kill(node_id)
        try:
            after = cluster.wait_for(lambda: (d := describe(cluster, group)).error_code == 0 and d, TIMEOUT_S,
                                     "the group at its new coordinator")
            assert {m.member_id: m.member_type for m in after.members} == {
                m.member_id: m.member_type for m in before.members}
            values = [f"mf{i}" for i in range(40)]
            produce(cluster, topic, values, partitions=4)
            wait_until(lambda: set(values) <= {v for p in procs for v in p.values()}, "every record after failover")
        finally:
            cluster.start(node_id)
            cluster.wait_ready(timeout_s=60)
    finally:
        for p in procs:
            p.stop()
    assert_one_owner_at_a_time(procs)


def coordinator(cluster, group: str) -> str:
    found = cluster.call(cluster.live()[0], "find_coordinator", group_id=group)
    return cluster.kafka(found["node_id"])


def raw(cluster, group: str, message, version: int) -> Any:
    host, _, port = coordinator(cluster, group).rpartition(":")
    with socket.create_connection((host, int(port)), timeout=15) as sock:
        return call(sock, message, version, 1)


def describe(cluster, group: str) -> Any:
    return raw(cluster, group, ConsumerGroupDescribeRequest[1](group_ids=[group], include_authorized_operations=False),
               1).groups[0]


def heartbeat(cluster, group: str, member_id: str, epoch: int, **fields: Any) -> Any:
    fields.setdefault("rebalance_timeout_ms", 30_000 if epoch == 0 else -1)
    fields.setdefault("subscribed_topic_names", [BAD_TOPIC] if epoch == 0 else None)
    fields.setdefault("topic_partitions", [] if epoch == 0 else None)
    return raw(cluster, group, ConsumerGroupHeartbeatRequest[1](
        group_id=group, member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
        subscribed_topic_regex=None, server_assignor=None, **fields), 1)


def test_regex_subscription_follows_new_topics(cluster):
    for t in ("kip848-rx-a", "kip848-rx-b", "kip848-other"):
        create(cluster, t, 2)
    proc = Proc(cluster, "kip848-rx", "rx", "--regex", "kip848-rx-.*")
    try:
        for t in ("kip848-rx-a", "kip848-rx-b", "kip848-other"):
            produce(cluster, t, [f"{t}-{i}" for i in range(10)], partitions=2)
        wait_until(lambda: len(proc.values()) >= 20, "the regex topics' records", TIMEOUT_S)
        create(cluster, "kip848-rx-c", 2)
        produce(cluster, "kip848-rx-c", [f"kip848-rx-c-{i}" for i in range(10)], partitions=2)
        wait_until(lambda: len(proc.values()) >= 30, "the new topic's records", TIMEOUT_S)
    finally:
        proc.stop()
    assert sorted(proc.values()) == sorted(f"kip848-rx-{x}-{i}" for x in "abc" for i in range(10))
    assert {t for t, _ in ownership(proc)} == {"kip848-rx-a", "kip848-rx-b", "kip848-rx-c"}


def test_classic_group_upgrades_online_with_its_offsets(cluster):
    topic, group = "kip848-upgrade", "kip848-upgrade-app"
    create(cluster, topic, 2)
    produce(cluster, topic, [f"old{i}" for i in range(20)], partitions=2)
    classic = CKConsumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": group,
                          "auto.offset.reset": "earliest", "enable.auto.commit": False})
    seen: list[str] = []
    try:
        classic.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT_S
        while len(seen) < 20 and time.monotonic() < deadline:
            m = classic.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(m.value().decode())
                classic.commit(message=m, asynchronous=False)
    finally:
        classic.close()
    assert sorted(seen) == sorted(f"old{i}" for i in range(20))
    produce(cluster, topic, [f"new{i}" for i in range(10)], partitions=2)
    proc = Proc(cluster, group, "upgraded", "--topic", topic)
    try:
        wait_until(lambda: len(proc.values()) >= 10, "the upgraded member's records", TIMEOUT_S)
        assert describe(cluster, group).group_state in ("Stable", "Reconciling", "Assigning")
        # raftlog groups describe: the protocol, the epochs, the member's current vs target.
        d = wait_until(lambda: cli_describe(cluster, group), "a Stable group in `raftlog groups describe`")
        assert d["type"] == "consumer" and d["group_epoch"] >= 1 and d["assignment_epoch"] == d["group_epoch"]
        (member,) = d["members"]
        assert member["partitions"] == member["target"] == [[topic, 0], [topic, 1]]
        assert [r["lag"] for r in d["partitions"]] == [0, 0]
        text = subprocess.run([sys.executable, "-m", "raftlog.cli", "groups", "describe", group, "--bootstrap",
                               ",".join(cluster.bootstrap())], capture_output=True, text=True, timeout=60).stdout
        assert "protocol: consumer (KIP-848)" in text and "TARGET" in text, text
        listed = subprocess.run([sys.executable, "-m", "raftlog.cli", "groups", "list", "--json", "--bootstrap",
                                 ",".join(cluster.bootstrap())], capture_output=True, text=True, timeout=60).stdout
        assert {g["group_id"]: g["type"] for g in json.loads(listed)}[group] == "consumer"
        # confluent-kafka's admin client: ListGroups v5 by type, ConsumerGroupDescribe.
        admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
        typed = admin.list_consumer_groups(request_timeout=30, types={ConsumerGroupType.CONSUMER}).result()
        assert group in {g.group_id for g in typed.valid}
        classic_only = admin.list_consumer_groups(request_timeout=30, types={ConsumerGroupType.CLASSIC}).result()
        assert group not in {g.group_id for g in classic_only.valid}
        described = admin.describe_consumer_groups([group], request_timeout=30)[group].result()
        assert described.type == ConsumerGroupType.CONSUMER and described.state == ConsumerGroupState.STABLE
        assert sorted(tp.partition for tp in described.members[0].assignment.topic_partitions) == [0, 1]
        # /metrics of the coordinator: the group's epochs, its member by state, its state.
        node_id = cluster.call(1, "find_coordinator", group_id=group)["node_id"]
        with urllib.request.urlopen(f"http://{cluster.http(node_id)}/metrics", timeout=30) as answer:
            metrics = answer.read().decode()
        assert f'raftlog_consumer_group_epoch{{epoch="assignment",group="{group}"}}' in metrics
        assert f'raftlog_consumer_group_members{{group="{group}",state="stable"}} 1.0' in metrics
        assert f'raftlog_group_state{{group="{group}",state="Stable"}} 1.0' in metrics
    finally:
        proc.stop()
    assert sorted(proc.values()) == sorted(f"new{i}" for i in range(10))


def group_type(bootstrap: str, group: str) -> str | None:
    """The group's type as ListGroups v5 gives it ("classic" / "consumer"), None if not listed."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = {g.group_id: g.type for g in admin.list_consumer_groups(request_timeout=30).result().valid}
    kind = listed.get(group)
    return None if kind is None else kind.name.lower()


def rolling_upgrade(side, topic: str, group: str, after_step: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Kafka 4's online upgrade as users run it, on the broker behind `side` (anything with
    kafka_bootstrap()): a classic group of three kip848_consumer.py processes consuming `topic`
    (made beforehand, PARTITIONS partitions), restarted one member at a time with
    group.protocol=consumer, then back to classic the same way, records produced at every
    step. Returns what a test compares: the group's type after each step, and whether every
    record was read, commits never went back, no partition had two owners at once, and the
    committed offsets are every partition's end at the end."""
    every = {(topic, p) for p in range(PARTITIONS)}
    values: list[str] = []
    facts: dict[str, Any] = {"types": []}

    def more(n: int) -> None:
        batch = [f"roll{len(values) + i}" for i in range(n)]
        produce(side, topic, batch)
        values.extend(batch)

    def read_all() -> bool:
        return set(values) <= {v for p in all_procs for v in p.values()}

    more(60)
    procs = [Proc(side, group, f"classic-{i}", "--topic", topic, "--protocol", "classic") for i in range(3)]
    all_procs = list(procs)
    try:
        wait_until(lambda: all(p.owned() for p in procs) and read_all(), "a Stable classic group reading", TIMEOUT_S)
        for step, protocol in enumerate(["consumer"] * 3 + ["classic"] * 3):
            old = procs.pop(0)
            old.stop()
            wait_until(lambda: set().union(*(p.owned() for p in procs)) == every,
                       f"the others own every partition after {old.name} left", TIMEOUT_S)
            new = Proc(side, group, f"{protocol}-{step}", "--topic", topic, "--protocol", protocol)
            procs.append(new)
            all_procs.append(new)
            more(30)
            wait_until(lambda: new.owned() and set().union(*(p.owned() for p in procs)) == every and read_all(),
                       f"{new.name} consuming beside the others", TIMEOUT_S)
            if after_step is not None:
                after_step(step)
            want = "consumer" if step < 5 else "classic"
            facts["types"].append(wait_until(lambda: group_type(side.kafka_bootstrap(), group) == want and want,
                                             f"a {want} group after step {step}", TIMEOUT_S))
    finally:
        for p in all_procs:
            p.stop()
    try:
        assert_one_owner_at_a_time(all_procs)
        facts["one_owner_at_a_time"] = True
    except AssertionError:
        facts["one_owner_at_a_time"] = False
    facts["all_read"] = read_all()
    commits: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for p in all_procs:
        for e in p.events:
            if e["ev"] == "committed":
                commits[e["p"]].append((e["t"], e["o"]))
    facts["commits_never_go_back"] = all([o for _, o in sorted(seq)] == sorted(o for _, o in seq)
                                         for seq in commits.values())
    produced: dict[int, int] = defaultdict(int)
    for i in range(len(values)):
        produced[i % PARTITIONS] += 1
    c = CKConsumer({"bootstrap.servers": side.kafka_bootstrap(), "group.id": group})
    try:  # the offsets survived both conversions
        kept = c.committed([confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        c.close()
    facts["offsets_at_the_end"] = {tp.partition: tp.offset for tp in kept} == dict(produced)
    return facts


def test_rolling_upgrade_to_the_consumer_protocol_and_back(cluster):
    """Kafka 4's online upgrade: a classic group of three restarted one member at a time with
    group.protocol=consumer converts (its classic members served by the server assignor
    meanwhile), then back to classic the same way; every record read, commits never go back,
    no partition with two owners at once, the offsets kept."""
    topic, group = "kip848-rolling", "kip848-rolling-app"
    create(cluster, topic, PARTITIONS)

    def member_types(step: int) -> None:
        if step < 5:  # ConsumerGroupDescribe v1 tells classic members (type 0) from KIP-848 ones (1)
            d = wait_until(lambda: (g := describe(cluster, group)).group_state == "Stable" and g,
                           "a Stable consumer group", TIMEOUT_S)
            new_protocol = (1, 2, 3, 2, 1)[step]  # members on the consumer protocol after this step
            assert d.error_code == 0
            assert sorted(m.member_type for m in d.members) == [0] * (3 - new_protocol) + [1] * new_protocol
        else:
            assert describe(cluster, group).error_code == GROUP_ID_NOT_FOUND  # no longer a consumer group

    facts = rolling_upgrade(cluster, topic, group, member_types)
    assert facts == {"types": ["consumer"] * 5 + ["classic"], "one_owner_at_a_time": True, "all_read": True,
                     "commits_never_go_back": True, "offsets_at_the_end": True}


def cli_describe(cluster, group: str) -> dict[str, Any] | None:
    out = subprocess.run([sys.executable, "-m", "raftlog.cli", "groups", "describe", group, "--json",
                          "--bootstrap", ",".join(cluster.bootstrap())], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        return None
    d = json.loads(out.stdout)
    if d.get("state") != "Stable" or any(r["lag"] != 0 for r in d["partitions"]):
        return None
    return d


def test_bad_input_gets_kafka_errors_and_the_group_keeps_serving(cluster):
    group = "kip848-bad"
    create(cluster, BAD_TOPIC, 2)
    joined = heartbeat(cluster, group, "member-a", 0)
    assert joined.error_code == 0 and joined.member_epoch > 0
    stale = heartbeat(cluster, group, "member-a", joined.member_epoch + 7)
    assert stale.error_code == FENCED_MEMBER_EPOCH and stale.member_epoch == -1
    assert heartbeat(cluster, group, "nobody", 3).error_code == UNKNOWN_MEMBER_ID
    bad_regex = heartbeat(cluster, group, "member-b", 0, subscribed_topic_names=None)
    assert bad_regex.error_code != 0  # a join without a subscription: INVALID_REQUEST
    rx = raw(cluster, group, ConsumerGroupHeartbeatRequest[1](
        group_id=group, member_id="member-c", member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30_000, subscribed_topic_names=None, subscribed_topic_regex="kip848-(",
        server_assignor=None, topic_partitions=[]), 1)
    assert rx.error_code == INVALID_REGULAR_EXPRESSION and "does not compile" in rx.error_message
    commit = OffsetCommitRequest[9](
        group_id=group, generation_id_or_member_epoch=joined.member_epoch + 1, member_id="member-a",
        group_instance_id=None, topics=[OffsetCommitRequest[9].OffsetCommitRequestTopic(
            name=BAD_TOPIC, partitions=[OffsetCommitRequest[9].OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])])
    answer = raw(cluster, group, commit, 9)
    assert answer.topics[0].partitions[0].error_code == STALE_MEMBER_EPOCH
    F = OffsetFetchRequest[9]
    fetch = F(groups=[F.OffsetFetchRequestGroup(group_id=group, member_id="member-a",
                                                member_epoch=joined.member_epoch + 1, topics=None)],
              require_stable=False)
    assert raw(cluster, group, fetch, 9).groups[0].error_code == STALE_MEMBER_EPOCH
    join = JoinGroupRequest[9](group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
                               group_instance_id=None, protocol_type="consumer", reason=None,
                               protocols=[JoinGroupRequest[9].JoinGroupRequestProtocol(name="range", metadata=b"")])
    assert raw(cluster, group, join, 9).error_code == INCONSISTENT_GROUP_PROTOCOL
    # The group still serves its member: a heartbeat at its epoch is answered.
    again = heartbeat(cluster, group, "member-a", joined.member_epoch)
    assert again.error_code == 0 and again.member_epoch >= joined.member_epoch
    assert heartbeat(cluster, group, "member-a", -1).error_code == 0
    # A classic group with members of another protocol type (Kafka Connect's) does not convert.
    connect = JoinGroupRequest[3](group_id="kip848-connect", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                                  member_id="", protocol_type="connect",
                                  protocols=[JoinGroupRequest[3].JoinGroupRequestProtocol(name="sessioned", metadata=b"")])
    assert raw(cluster, "kip848-connect", connect, 3).error_code == 0  # after the initial delay: a member
    assert heartbeat(cluster, "kip848-connect", "x", 0).error_code == GROUP_ID_NOT_FOUND
