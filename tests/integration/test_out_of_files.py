"""A node out of file descriptors (issue 46) answers reads that need one (a sealed segment the
file cache closed) with KAFKA_STORAGE_ERROR and logs it, keeps running and keeps serving what
needs none, and reads everything again, nothing lost, once descriptors are free; /metrics
shows the descriptors held and the limit."""

from __future__ import annotations

import os
import resource
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from partition.batch import BatchBuilder, decode_batches

import node_harness as harness

pytestmark = pytest.mark.cluster

TOPIC = "fds"
RECORDS = 40
VALUE_BYTES = 1000


def _batch(i: int) -> bytes:
    b = BatchBuilder()
    b.append(b"%04d" % i + b"v" * (VALUE_BYTES - 4), None, timestamp_ms=int(time.time() * 1000))
    return b.build()


def _fetch(conn: harness.RawConnection, offset: int) -> dict:
    r = harness.ok(conn.call("fetch", max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, partitions=[
        {"topic": TOPIC, "partition": 0, "fetch_offset": offset, "max_bytes": 1 << 20}]))
    [p] = r["partitions"]
    return p


def _values(conn: harness.RawConnection) -> list[bytes]:
    values, offset = [], 0
    while True:
        p = _fetch(conn, offset)
        assert "error" not in p, p
        if not p["records"]:
            return values
        for header, records in decode_batches(p["records"]):
            values.extend(rec.value for rec in records if rec.offset >= offset)
            offset = header.last_offset + 1


def _lowest_free_fd(pid: int) -> int:
    used = {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")}
    return next(n for n in range(len(used) + 1) if n not in used)


def test_a_node_out_of_descriptors_answers_storage_errors_and_recovers(tmp_path):
    with harness.NodeCluster(tmp_path, size=1, settings={**harness.TEST_SETTINGS, "log_open_files_max": 1}) as cluster:
        cluster.start_all()
        cluster.wait_ready()
        cluster.call(1, "create_topic", name=TOPIC, partitions=1, replication_factor=1,
                     configs={"segment_bytes": "4096"})
        pid = cluster.processes[1].pid
        with harness.RawConnection(cluster.client(1)) as conn:
            def produce(i: int) -> dict:
                return conn.call("produce", acks=-1, timeout_ms=5000,
                                 partitions=[{"topic": TOPIC, "partition": 0, "records": _batch(i)}])

            for i in range(RECORDS):
                cluster.wait_for(lambda i=i: "error" not in produce(i)["partitions"][0], timeout_s=30,
                                 what=f"record {i} acknowledged")
            expected = [b"%04d" % i + b"v" * (VALUE_BYTES - 4) for i in range(RECORDS)]
            assert _values(conn) == expected
            last = _fetch(conn, RECORDS - 2)  # the newest sealed segments stay open; offset 0's is closed
            assert "error" not in last, last
            limits = resource.prlimit(pid, resource.RLIMIT_NOFILE)
            refused = None
            try:
                deadline = time.monotonic() + 30
                while refused is None and time.monotonic() < deadline:
                    # No free descriptor number below the limit: opening a file fails (EMFILE).
                    resource.prlimit(pid, resource.RLIMIT_NOFILE, (_lowest_free_fd(pid), limits[1]))
                    p = _fetch(conn, 0)
                    if "error" in p:
                        refused = p["error"]
                # What needs no new descriptor goes on: an append to the open active segment.
                assert "error" not in produce(RECORDS)["partitions"][0]
            finally:
                resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
            assert refused is not None, "no read was refused under the lowered limit"
            assert refused["code"] == "KAFKA_STORAGE_ERROR", refused
            assert cluster.processes[1].alive()
            expected.append(b"%04d" % RECORDS + b"v" * (VALUE_BYTES - 4))
            cluster.wait_for(lambda: _values(conn) == expected, timeout_s=30, what="every record read back")
        log = (cluster.configs[1].data_dir / "node.log").read_text()
        assert "out_of_file_descriptors" in log
        # /metrics shows the descriptors held against the (restored) limit.
        with urllib.request.urlopen(f"http://{cluster.http(1)}/metrics", timeout=10) as response:
            samples = {s.name: s.value for family in text_string_to_metric_families(response.read().decode())
                       for s in family.samples}
        assert samples["raftlog_open_files_limit"] == limits[0]
        assert 0 < samples["raftlog_open_files"] < limits[0]
