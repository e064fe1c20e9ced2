"""Consumer groups on a real three-node cluster: balanced assignment, rebalances without double ownership, SIGKILLed members and coordinators, at-least-once with no skipped record, independent groups, compacted offsets, and `raftlog groups describe` lag."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


from raftlog.base.topics import partition_for_group
from partition.batch import decode_batches

import node_harness as harness

CONSUMER = Path(__file__).with_name("group_consumer.py")
TOPIC = "gt"
GROUP = "g-main"
OTHER = "g-other"
SESSION_MS = 3000
OFFSETS = "__consumer_offsets"


class ConsumerProc:
    """One group_consumer.py process; its JSON events collected by a reader thread."""

    def __init__(self, bootstrap: list[str], group: str, name: str, log_dir: Path):
        self.name = name
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self.stderr = open(log_dir / f"{name}.err", "w")
        self.proc = subprocess.Popen(
            [sys.executable, str(CONSUMER), ",".join(bootstrap), TOPIC, group, "--session-ms", str(SESSION_MS),
             "--client-id", name],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                self.events.append(ev)

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.events)

    def latest_assignment(self) -> tuple[int, frozenset] | None:
        got = [e for e in self.snapshot() if e["ev"] == "assigned"]
        return (got[-1]["gen"], frozenset(tuple(p) for p in got[-1]["partitions"])) if got else None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait(10)
        self._reader.join(5)
        self.proc.stdout.close()
        self.stderr.close()


def values_seen(procs: list[ConsumerProc]) -> set[int]:
    return {int(e["v"]) for c in procs for e in c.snapshot() if e["ev"] == "rec"}


def balanced(procs: list[ConsumerProc], sizes: list[int]):
    """The live members' latest assignments: one generation, disjoint, covering all 6."""
    got = [c.latest_assignment() for c in procs]
    if any(g is None for g in got) or len({g[0] for g in got}) != 1:
        return None
    parts = [g[1] for g in got]
    if sorted(len(p) for p in parts) != sizes or frozenset().union(*parts) != {(TOPIC, p) for p in range(6)}:
        return None
    return got[0][0]


def test_groups_end_to_end(tmp_path):
    logs = tmp_path / "consumers"
    logs.mkdir()
    procs: list[ConsumerProc] = []
    with harness.NodeCluster(tmp_path, size=3) as cluster:
        try:
            _scenario(cluster, procs, logs, tmp_path)
        finally:
            for c in procs:
                c.stop()


def _produce(bootstrap, start: int, end: int) -> None:
    from raftlog.client import Producer

    with Producer(bootstrap, linger_ms=2) as p:
        futures = [p.send(TOPIC, str(i).encode(), partition=i % 6) for i in range(start, end)]
        p.flush(30)
        for f in futures:  # flush waits for failures too: each record must be acked
            f.result(0)


def _committed(cluster, node: int, group: str) -> dict[int, int]:
    r = cluster.call(node, "offset_fetch", group_id=group, partitions=None)
    return {e["partition"]: e["offset"] for e in r["partitions"] if e["topic"] == TOPIC and e["offset"] >= 0}


def _scenario(cluster, procs, logs, tmp_path):
    cluster.start_all()
    cluster.wait_ready(60)
    cluster.call(1, "create_topic", name=TOPIC, partitions=6, replication_factor=3, configs={})
    for n in (1, 2, 3):
        cluster.wait_for(lambda n=n: cluster.call(n, "find_coordinator", group_id=GROUP), 30, "a coordinator")
    # Small segments for the offsets topic, so commits roll segments that compaction can clean.
    cluster.call(1, "alter_configs", name=OFFSETS, set={"segment_bytes": "4096"}, delete=[])
    boot = cluster.bootstrap()
    _produce(boot, 0, 300)

    # Three members split six partitions two each.
    for i in range(3):
        procs.append(ConsumerProc(boot, GROUP, f"m{i}", logs))
    cluster.wait_for(lambda: balanced(procs, [2, 2, 2]), 40, "three members with two partitions each")
    other = ConsumerProc(boot, OTHER, "other", logs)
    procs.append(other)
    members = procs[:3]

    # A fourth member: the assignment rebalances to 1,1,2,2.
    _produce(boot, 300, 600)
    members.append(ConsumerProc(boot, GROUP, "m3", logs))
    procs.append(members[-1])
    cluster.wait_for(lambda: balanced(members, [1, 1, 2, 2]), 40, "four members balanced")

    # SIGKILL one member: its partitions move to the others within the session timeout.
    victim = members.pop(0)
    victim.kill()
    killed_at = time.monotonic()
    gen = cluster.wait_for(lambda: balanced(members, [2, 2, 2]), 30, "partitions moved off the killed member")
    moved_s = time.monotonic() - killed_at
    assert moved_s < SESSION_MS / 1000 + 8, f"partitions moved after {moved_s:.1f} s"
    assert gen > 0
    _produce(boot, 600, 900)
    cluster.wait_for(lambda: values_seen(procs[:3] + members) >= set(range(900)), 40, "group read all 900")

    # Kill the coordinator's node: offsets survive, consumers continue from them.
    coord = cluster.call(1, "find_coordinator", group_id=GROUP)["node_id"]
    survivor = next(n for n in cluster.live() if n != coord)
    before = cluster.wait_for(lambda: _committed(cluster, coord, GROUP), 10, "committed offsets")
    assert len(before) == 6
    cut = time.monotonic()
    cluster.kill(coord)
    boot = cluster.bootstrap()
    _produce(boot, 900, 1200)
    everyone = procs[:3] + members
    cluster.wait_for(lambda: values_seen(everyone) >= set(range(1200)), 60, "group read all 1200 after failover")
    cluster.wait_for(lambda: values_seen([other]) >= set(range(1200)), 30, "second group read everything")
    def committed_now():
        now_coord = cluster.call(survivor, "find_coordinator", group_id=GROUP)["node_id"]
        got = _committed(cluster, now_coord, GROUP)
        return got if len(got) == 6 and now_coord != coord else None

    after = cluster.wait_for(committed_now, 30, "offsets from the new coordinator")
    for p, off in before.items():
        assert after[p] >= off, f"partition {p}: committed offset went back from {off} to {after[p]}"
    later = [e for c in members for e in c.snapshot() if e["ev"] == "rec" and e["t"] > cut]
    assert later, "nothing consumed after the coordinator died"
    for e in later:
        assert e["o"] >= before[e["p"]], f"re-read partition {e['p']} offset {e['o']} below commit {before[e['p']]}"

    # No partition owned by two members in one generation, over the whole run.
    owners: dict[int, dict] = {}
    for c in procs[:3] + members:
        for e in c.snapshot():
            if e["ev"] == "assigned":
                for tp in e["partitions"]:
                    prev = owners.setdefault(e["gen"], {}).setdefault(tuple(tp), c.name)
                    assert prev == c.name, f"generation {e['gen']}: {tp} owned by {prev} and {c.name}"

    # raftlog groups describe: lag = log end - committed, owners are the live members.
    def described():
        out = subprocess.run([sys.executable, "-m", "raftlog.cli", "groups", "describe", GROUP, "--json",
                              "--bootstrap", ",".join(boot)], capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            return None
        d = json.loads(out.stdout)
        rows = d["partitions"]
        # Log end offsets hold each leader epoch's control batch too: lag is end - committed.
        if len(rows) != 6 or any(r["lag"] != 0 or r["log_end_offset"] != r["committed_offset"] for r in rows):
            return None
        # Owners come from the members' assignments: none while the group rebalances after the
        # coordinator's failover (the survivors rejoin the new coordinator).
        if any(r["client_id"] is None for r in rows):
            return None
        return d

    d = cluster.wait_for(described, 30, "describe with zero lag")
    assert {r["client_id"] for r in d["partitions"]} == {c.name for c in members}
    assert d["state"] == "Stable"

    # Stop everyone; then compaction leaves one record per key in the closed segments.
    for c in procs:
        c.stop()
    p = partition_for_group(GROUP, 16)

    def compacted():
        for n in cluster.live():
            d = cluster.configs[n].data_dir / "partitions" / f"{OFFSETS}-{p}"
            segments = sorted(d.glob("*.log"))
            if len(segments) < 2:
                return None
            keys = []
            held = 0  # records of any kind kept in the closed segments
            for seg in segments[:-1]:
                for h, recs in decode_batches(seg.read_bytes()):
                    held += len(recs)
                    if not h.is_control:
                        keys.extend(r.key for r in recs)
            span = int(segments[-1].stem) - int(segments[0].stem)
            # Newest record per key only, and offsets left as gaps: records were removed.
            if len(keys) != len(set(keys)) or held >= span:
                return None
        return True

    cluster.wait_for(compacted, 40, "closed __consumer_offsets segments compacted")

    # The CLI on an inactive group: lag with no members, a dry run, then an executed reset.
    run = lambda *a: subprocess.run([sys.executable, "-m", "raftlog.cli", "groups", *a, "--bootstrap",  # noqa: E731
                                     ",".join(boot)], capture_output=True, text=True, timeout=60)
    listed = run("list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {GROUP, OTHER} <= {g["group_id"] for g in json.loads(listed.stdout)}
    dry = run("reset-offsets", OTHER, "--topic", TOPIC, "--to-earliest", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["dry_run"] is True
    done = run("reset-offsets", OTHER, "--topic", TOPIC, "--to-offset", "50", "--execute")
    assert done.returncode == 0, done.stderr
    d = json.loads(run("describe", OTHER, "--json").stdout)
    assert [r["committed_offset"] for r in d["partitions"]] == [50] * 6
    assert all(r["lag"] == r["log_end_offset"] - 50 > 100 and r["member_id"] is None for r in d["partitions"])
    assert d["state"] == "Empty"
    gone = run("delete", OTHER)
    assert gone.returncode == 0, gone.stderr
    assert OTHER not in {g["group_id"] for g in json.loads(run("list", "--json").stdout)}
