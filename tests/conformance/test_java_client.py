"""Apache Kafka's own Java client (4.x, the reference implementation of the protocol) sees the
same records, offsets, errors and group behaviour on raftlog as on the reference Kafka: the
producer with acks 0/1/all (idempotent with all) and every compression; the consumer's assign,
seek, seekToBeginning/End and offsetsForTimes; a classic group of three with the
cooperative-sticky assignor, one member killed, commit and resume."""

from __future__ import annotations

import queue
import subprocess
import time

import pytest

from differential import JAVA_CLIENT as SOURCE
from differential import Sides, assert_same, java_client
from json_lines import read_json_lines
from kafka_ref import java_client_argv

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_producer_acks_and_compression(sides: Sides, compression: str) -> None:
    def scenario(bootstrap: str) -> dict:
        return {acks: java_client("produce", bootstrap, f"java-produce-{compression}-{acks}", acks, compression, "60")
                for acks in ("0", "1", "all")}

    answers = sides.run(scenario)
    for side in answers.values():  # acks=0 is at most once: Kafka itself dropped some at CI's load
        side["0"]["read"] = _at_most_once(side["0"]["read"])
    same = assert_same(answers, f"Java producer, compression {compression}")
    for acks, answer in same.items():
        if acks != "0":
            assert len(answer["read"]) == 60, f"acks={acks}: every record read back"
            assert len({row["partition"] for row in answer["read"]}) > 1, "keys spread over the partitions"


def _at_most_once(read: list[dict]) -> str:
    """What acks=0 promises, as one comparable answer: every record read was sent (value
    `value-<i>-...` with header `i=<i>`), once, and each partition's in the order sent. A leader
    moving under a fire-and-forget producer loses records on Kafka too (no answer tells it),
    so how many arrive is not compared."""
    seen: set[int] = set()
    last: dict[int, int] = {}
    for row in read:
        i = int(row["headers"][0].removeprefix("i="))
        if not row["value"].startswith(f"value-{i}-") or row["key"] != f"k{i % 7}" or i in seen or i >= 60:
            return f"not sent or twice: {row}"
        if i < last.get(row["partition"], -1):
            return f"out of order in partition {row['partition']}: {row}"
        seen.add(i)
        last[row["partition"]] = i
    return "each record read was sent, once, in order per partition"


def test_consumer_assign_seek_offsets_for_times(sides: Sides) -> None:
    same = assert_same(sides.run(lambda b: java_client("seek", b, "java-seek")), "Java consumer seek/offsetsForTimes")
    assert same["end"] == 20 and same["offsets_for_times"]["2500"] == [3, 3000]


class Member:
    """One ConformanceClient `group-member` JVM; its JSON events are read by a thread."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str):
        self.name = name
        self.proc = subprocess.Popen(java_client_argv(SOURCE, "group-member", bootstrap, topic, group, name),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        self.events: queue.Queue[dict] = queue.Queue(maxsize=100_000)
        self.assignment: list[int] = []
        self.records: list[tuple[int, int, str]] = []
        self.closed = False
        self.reader = read_json_lines(self.proc, self.events)

    def drain(self) -> None:
        while True:
            try:
                e = self.events.get_nowait()
            except queue.Empty:
                return
            if e["event"] == "assignment":
                self.assignment = e["partitions"]
            elif e["event"] == "record":
                self.records.append((e["partition"], e["offset"], e["value"]))
            elif e["event"] == "closed":
                self.closed = True

    def close(self, timeout_s: float = 60.0) -> int:
        """End stdin (the member commits, leaves and exits); SIGKILL by PID if it does not."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            return self.proc.wait(timeout_s)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            self.proc.kill()
            return self.proc.wait()
        finally:
            self._release()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._release()

    def _release(self) -> None:
        """After the process ended: the reader has seen EOF; close the pipes, keep the events."""
        self.reader.join(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                try:
                    pipe.close()
                except BrokenPipeError:
                    pass
        self.drain()


def _wait(members: list[Member], predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for m in members:
            m.drain()
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s; assignments "
                         f"{[(m.name, m.assignment) for m in members]}")


def _produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(start, start + count):
        p.produce(topic, key=f"k{i}", value=f"v{i}")
    assert p.flush(60) == 0


def test_classic_group_cooperative_sticky_member_killed_commit_resume(sides: Sides) -> None:
    def scenario(bootstrap: str) -> dict:
        topic, group = "java-group", "java-group-g"
        java_client("produce", bootstrap, topic, "all", "none", "0")  # creates the topic: 6 partitions, RF 3
        members = [Member(bootstrap, topic, group, f"m{i}") for i in range(3)]
        out: dict = {}
        try:
            def covered(ms: list[Member]) -> bool:
                parts = [p for m in ms for p in m.assignment]
                return sorted(parts) == list(range(6)) and all(m.assignment for m in ms)

            _wait(members, lambda: covered(members), 120, "three members share six partitions")
            out["three_members"] = sorted(len(m.assignment) for m in members)
            _produce(bootstrap, topic, 0, 120)
            _wait(members, lambda: sum(len(m.records) for m in members) >= 120, 120, "120 records read")
            before = {m.name: list(m.assignment) for m in members}
            members[0].kill()
            alive = members[1:]
            _wait(alive, lambda: covered(alive), 120, "two members take over the killed one's partitions")
            # Cooperative-sticky: a survivor keeps every partition it had.
            out["sticky"] = all(set(before[m.name]) <= set(m.assignment) for m in alive)
            out["two_members"] = sorted(len(m.assignment) for m in alive)
            _produce(bootstrap, topic, 120, 60)
            _wait(alive, lambda: {v for m in members for _, _, v in m.records} >= {f"v{i}" for i in range(180)},
                  120, "every record read once the group settled")
            out["all_read"] = True
            out["closed"] = [m.close() for m in alive]
            resumed = Member(bootstrap, topic, group, "m-resumed")
            try:
                _wait([resumed], lambda: len(resumed.assignment) == 6, 120, "a new member takes all six")
                _produce(bootstrap, topic, 180, 12)
                _wait([resumed], lambda: len(resumed.records) >= 12, 120, "the resumed member reads the new records")
                # It resumed from the committed offsets: only the records produced after it joined.
                out["resumed_read"] = sorted(v for _, _, v in resumed.records)
            finally:
                resumed.close()
        finally:
            for m in members:
                if m.proc.poll() is None:
                    m.kill()
        return out

    same = assert_same(sides.run(scenario), "Java classic group, cooperative-sticky, member killed, resume")
    assert same["three_members"] == [2, 2, 2] and same["sticky"]
    assert same["resumed_read"] == sorted(f"v{i}" for i in range(180, 192))


def test_transactions_read_committed_and_fencing(sides: Sides) -> None:
    """Issue 42 with Kafka's Java client: committed, aborted and open transactions as read_committed
    and read_uncommitted readers see them (records, offsets with the markers, the LSO as end
    offset), consume-transform-produce with sendOffsetsToTransaction, and a zombie fenced: its
    late writes never visible, its send and commit refused with Kafka's exception (both brokers
    at transaction.version 2, KIP-890 part 2: no AddPartitionsToTxn, an epoch per transaction)."""
    answers = sides.run(lambda b: java_client("transactions", b, "java-txn"))
    for broker, a in answers.items():
        committed = {row[2] for row in a["read_committed_open"]["records"]}
        assert committed == {f"c{i}" for i in range(9)}, f"{broker}: no aborted or open record under read_committed"
        assert a["read_committed_open"]["end_offsets"] == [7, 7, 7], f"{broker}: the LSO is the open transaction's first offset"
        assert len(a["read_uncommitted_open"]["records"]) == 18, broker
        assert len(a["read_committed_after"]["records"]) == 12, broker
        assert a["ctp_output"] == sorted(f"in{i}!" for i in range(12)), broker
        assert a["ctp_group_offsets"] == {f"java-txn-in-{p}": 4 for p in range(3)}, broker
        assert a["zombie_topic_read_committed"] == ["new"], broker
        assert "error" in a["zombie_send"] and "error" in a["zombie_commit"], f"{broker}: the zombie is refused"
    assert_same(answers, "Java transactions")
