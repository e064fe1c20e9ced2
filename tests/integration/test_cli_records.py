"""The real `raftlog produce` / `consume` / `perf` commands against a three-node cluster: the issue's done-when (keyed lines land in one partition, in order, read back as kv), auto-creation, json with base64 for non-UTF-8, --partition/--offset, the summary line, SIGTERM exits 0, and user errors as one line without a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from raftlog.client import Consumer, Producer, partition_for_key


RAFTLOG = [sys.executable, "-m", "raftlog.cli"]


def run(cluster, *args: str, stdin: bytes | None = None, timeout: float = 60,
        bootstrap: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, RAFTLOG_BOOTSTRAP=bootstrap or ",".join(cluster.bootstrap()))
    env.pop("RAFTLOG_DEBUG", None)
    return subprocess.run([*RAFTLOG, *args], input=stdin, capture_output=True, timeout=timeout, env=env)


def test_done_when_keyed_lines_round_trip_in_order(cluster):
    p = run(cluster, "produce", "streams-intro", "--key-separator", ":",
            stdin=b"foo:first\nfoo:second\nbar:first\n")
    assert p.returncode == 0, p.stderr
    err = p.stderr.decode()
    assert "created topic streams-intro (3 partitions, replication factor 3)" in err
    assert "produced 3 records" in err and "streams-intro" in err
    assert p.stdout == b""  # stdout stays clean
    c = run(cluster, "consume", "streams-intro", "--from-beginning", "--format", "kv", "--max-messages", "3")
    assert c.returncode == 0, c.stderr
    lines = c.stdout.decode().splitlines()
    assert sorted(lines) == ["bar\tfirst", "foo\tfirst", "foo\tsecond"]
    assert lines.index("foo\tfirst") < lines.index("foo\tsecond")
    j = run(cluster, "consume", "streams-intro", "--from-beginning", "--format", "json", "--max-messages", "3")
    recs = [json.loads(line) for line in j.stdout.decode().splitlines()]
    foo = [r for r in recs if r["key"] == "foo"]
    assert len({r["partition"] for r in foo}) == 1  # both foo records in one partition
    assert foo[0]["partition"] == partition_for_key(b"foo", 3)
    assert [r["value"] for r in sorted(foo, key=lambda r: r["offset"])] == ["first", "second"]
    assert {"topic", "partition", "offset", "timestamp", "key", "value", "headers"} <= set(recs[0])


def test_json_headers_base64_and_partition_offset(cluster):
    admin_topic = "binary"
    cluster.call(cluster.live()[0], "create_topic", name=admin_topic, partitions=2, replication_factor=3,
                 configs={})
    with Producer(cluster.bootstrap()) as prod:
        for i in range(5):
            prod.send(admin_topic, b"\xff\xfe" + bytes([i]), key=b"k", headers=[("h", b"\x80")], partition=1)
        prod.send(admin_topic, "héllo".encode(), partition=1, headers=[("src", b"cli")]).result(30)
    j = run(cluster, "consume", admin_topic, "--partition", "1", "--offset", "earliest", "--format", "json",
            "--max-messages", "6")
    assert j.returncode == 0, j.stderr
    recs = [json.loads(line) for line in j.stdout.decode().splitlines()]
    assert len(recs) == 6 and all(r["partition"] == 1 for r in recs)
    assert recs[0]["value"] == {"base64": "//4A"} and recs[0]["headers"] == [["h", {"base64": "gA=="}]]
    assert recs[-1]["value"] == "héllo" and recs[-1]["key"] is None and recs[-1]["headers"] == [["src", "cli"]]
    # --offset N on one partition starts there
    third = recs[2]["offset"]
    o = run(cluster, "consume", admin_topic, "-p", "1", "-o", str(third), "-n", "1", "--format", "json")
    assert json.loads(o.stdout)["offset"] == third
    # --timeout-ms ends a follow with nothing new (exit 0, nothing printed)
    t = run(cluster, "consume", admin_topic, "-p", "0", "--timeout-ms", "500")
    assert t.returncode == 0 and t.stdout == b""


def test_produce_with_headers_partition_and_file(cluster, tmp_path):
    f = tmp_path / "lines.txt"
    f.write_bytes(b"".join(b"line-%d\n" % i for i in range(200)))
    p = run(cluster, "produce", "from-file", "--file", str(f), "--partition", "2", "--header", "a=b",
            "--acks", "1", "--linger-ms", "1")
    assert p.returncode == 0, p.stderr
    assert "produced 200 records (1490 bytes) to from-file partitions 2 in" in p.stderr.decode()
    c = run(cluster, "consume", "from-file", "-p", "2", "--from-beginning", "-n", "200", "--format", "json")
    recs = [json.loads(line) for line in c.stdout.decode().splitlines()]
    assert [r["value"] for r in recs] == [f"line-{i}" for i in range(200)]
    assert recs[0]["headers"] == [["a", "b"]]


def test_sigterm_ends_a_following_consume_with_exit_0(cluster):
    env = dict(os.environ, RAFTLOG_BOOTSTRAP=",".join(cluster.bootstrap()))
    proc = subprocess.Popen([*RAFTLOG, "consume", "streams-intro", "--from-beginning", "--format", "kv"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        first = proc.stdout.readline()  # it is following: the records arrived, it keeps waiting
        assert first.endswith(b"first\n")
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert b"Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()  # reaps it and closes its pipes (left open, a later test saw them)


def test_user_errors_are_one_line(cluster):
    nothing = run(cluster, "consume", "streams-intro", bootstrap="127.0.0.1:9")
    assert nothing.returncode == 1
    msg = nothing.stderr.decode().strip()
    assert "no raftlog node reachable at 127.0.0.1:9" in msg and "scripts/quorum" in msg
    assert len(msg.splitlines()) == 1
    unknown = run(cluster, "consume", "streams-intr", "--from-beginning", timeout=20)
    assert unknown.returncode == 1
    msg = unknown.stderr.decode().strip()
    assert msg == "raftlog: unknown topic 'streams-intr'; did you mean streams-intro?"
    no_create = run(cluster, "produce", "nope", "--no-create", stdin=b"x\n")
    assert no_create.returncode == 1 and "unknown topic 'nope'" in no_create.stderr.decode()
    bad_part = run(cluster, "consume", "streams-intro", "--partition", "9")
    assert bad_part.returncode == 1 and "partition 9 does not exist" in bad_part.stderr.decode()
    no_sep = run(cluster, "produce", "streams-intro", "-K", ":", stdin=b"novalue\n")
    assert no_sep.returncode == 1 and "line 1 has no key separator" in no_sep.stderr.decode()
    bad_arg = run(cluster, "consume", "streams-intro", "--offset", "soon")
    assert bad_arg.returncode == 2 and b"Invalid value" in bad_arg.stderr
    for r in (nothing, unknown, no_create, bad_part, no_sep, bad_arg):
        assert b"Traceback" not in r.stderr


def test_perf_produce_and_consume_json(cluster):
    cluster.call(cluster.live()[0], "create_topic", name="perf", partitions=3, replication_factor=3, configs={})
    p = run(cluster, "perf", "produce", "--topic", "perf", "--records", "20000", "--record-bytes", "100",
            "--json", "--quiet")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["records"] == 20000 and s["errors"] == 0 and s["records_per_s"] > 0
    assert 0 < s["latency_p50_ms"] <= s["latency_p99_ms"] <= s["latency_p999_ms"] <= s["latency_max_ms"]
    c = run(cluster, "perf", "consume", "--topic", "perf", "--records", "20000", "--json", "--quiet")
    assert c.returncode == 0, c.stderr
    cs = json.loads(c.stdout)
    assert cs["records"] == 20000 and cs["mb_per_s"] > 0
    with Consumer(cluster.bootstrap(), auto_offset_reset="earliest") as check:
        check.assign([("perf", 0)])
        assert check.position(("perf", 0)) >= 0


def test_perf_produce_warmup_records_are_sent_but_not_counted(cluster):
    cluster.call(cluster.live()[0], "create_topic", name="perfwarm", partitions=3, replication_factor=3,
                 configs={})
    p = run(cluster, "perf", "produce", "--topic", "perfwarm", "--records", "5000", "--warmup-records", "3000",
            "--json", "--quiet")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["records"] == 5000 and s["errors"] == 0
    with Consumer(cluster.bootstrap(), auto_offset_reset="earliest") as check:
        parts = [("perfwarm", i) for i in range(3)]
        check.assign(parts)
        check.seek_to_end(*parts)
        ends = {tp: check.position(tp) for tp in parts}
        # Warm-up records are in the log (a leader-change control record, if leadership moved,
        # takes an offset too but is no record).
        assert sum(ends.values()) >= 8000
        check.seek_to_beginning(*parts)
        got = 0
        deadline = time.monotonic() + 60
        while any(check.position(tp) < ends[tp] for tp in parts) and time.monotonic() < deadline:
            got += len(check.poll(1000))
        assert got == 8000
