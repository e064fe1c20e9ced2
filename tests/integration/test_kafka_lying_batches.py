"""A writer cannot poison a partition (issue 39): on a real three-node cluster, Produce requests carrying a batch with a valid CRC that lies (2^31-1 records claimed holding one, offset deltas not 0..n-1, a record length varint that disagrees, a control batch) get Kafka's error for that partition and a log line naming the client, store nothing (log end offset untouched, the request's other partition appended), the same batch through the native produce is refused too, and confluent-kafka then reads the partition's good records at the right offsets."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

import node_harness as harness
from raftlog.client import Admin

HERE = Path(__file__).parent

forge = harness.load_module("batch_forge", HERE.parent / "unit" / "partition" / "batch_forge.py")
Conn = harness.load_module("kafka_wire_versions", HERE / "test_kafka_wire_versions.py").Conn
ck_consume = harness.load_module("kafka_compat", HERE / "test_kafka_compat.py").ck_consume  # skips without confluent-kafka

TOPIC = "lies"
PARTITIONS = 6
INVALID_RECORD = 87
INT32_MAX = (1 << 31) - 1
CLIENT_ID = "lying-producer"

LIES = {
    "count_2^31-1_holding_one": forge.batch(forge.values(1), count=INT32_MAX, last_offset_delta=INT32_MAX - 1),
    "offset_deltas_not_0_to_n-1": forge.batch([forge.record(0), forge.record(2), forge.record(1)]),
    "record_length_disagrees": forge.batch([forge.record(0), forge.record(1, length_delta=1), forge.record(2)]),
    "control_batch": forge.batch(forge.values(1), attributes=forge.ATTR_CONTROL),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.NodeCluster]:
    with harness.NodeCluster(tmp_path_factory.mktemp("lying-batches"), size=3) as c:
        c.start_all()
        c.wait_ready(timeout_s=60)
        with Admin(c.bootstrap(), request_timeout_ms=15_000) as admin:
            c.wait_for(lambda: admin.create_topic(TOPIC, PARTITIONS, 3) or True, 30, "the topic")
        yield c


def leaders(cluster: harness.NodeCluster) -> dict[int, int]:
    """partition -> leader, once every partition has one."""
    def known() -> dict[int, int] | None:
        [t] = cluster.call(cluster.live()[0], "metadata", topics=[TOPIC])["topics"]
        found = {p["partition"]: p["leader"] for p in t["partitions"]}
        return found if all(v is not None and v >= 0 for v in found.values()) else None

    return cluster.wait_for(known, 30, f"leaders of {TOPIC}")


def two_partitions_one_leader(cluster: harness.NodeCluster) -> tuple[int, int, int]:
    """(leader, p, q): two partitions led by the same node (6 partitions on 3 nodes)."""
    by_leader: dict[int, list[int]] = {}
    for p, leader in sorted(leaders(cluster).items()):
        by_leader.setdefault(leader, []).append(p)
    leader, ps = max(by_leader.items(), key=lambda kv: len(kv[1]))
    return leader, ps[0], ps[1]


def produce(conn: Any, parts: dict[int, bytes]) -> dict[int, Any]:
    T = ProduceRequest.TopicProduceData
    request = ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
        T(name=TOPIC, partition_data=[T.PartitionProduceData(index=p, records=r) for p, r in parts.items()])])
    [t] = conn.call(request, ProduceResponse, 9).responses
    return {p.index: p for p in t.partition_responses}


def end_offset(cluster: harness.NodeCluster, leader: int, partition: int) -> int:
    [p] = cluster.call(leader, "list_offsets", partitions=[
        {"topic": TOPIC, "partition": partition, "timestamp": -1}])["partitions"]
    return p["offset"]


def refusals(cluster: harness.NodeCluster, node_id: int) -> list[str]:
    log = (cluster.configs[node_id].data_dir / "node.log").read_text()
    return [line for line in log.splitlines() if "event=produce_refused" in line]


@pytest.mark.parametrize("lie", LIES)
def test_lying_batch_is_refused_and_the_partition_stays_readable(cluster, lie):
    leader, p, q = two_partitions_one_leader(cluster)
    conn = Conn(cluster, leader, client_id=CLIENT_ID)
    try:
        good_p = produce(conn, {p: forge.batch(forge.values(3))})[p]
        assert good_p.error_code == 0
        before_p, before_q = end_offset(cluster, leader, p), end_offset(cluster, leader, q)
        seen = len(refusals(cluster, leader))

        answer = produce(conn, {p: LIES[lie], q: forge.batch(forge.values(2, start=100))})
        assert answer[p].error_code == INVALID_RECORD, (answer[p].error_code, answer[p].error_message)
        assert answer[q].error_code == 0 and answer[q].base_offset == before_q  # the other partition appended
        assert end_offset(cluster, leader, p) == before_p  # nothing stored
        assert end_offset(cluster, leader, q) == before_q + 2
        [line] = refusals(cluster, leader)[seen:]
        assert f"client_id={CLIENT_ID}" in line and "peer=127.0.0.1:" in line and f"partition={p}" in line
        assert "code=INVALID_RECORD" in line and "reason=" in line

        # The native produce refuses the same bytes.
        [native] = cluster.call(leader, "produce", acks=-1, timeout_ms=10_000, partitions=[
            {"topic": TOPIC, "partition": p, "records": LIES[lie]}])["partitions"]
        assert native["error"]["code"] == "INVALID_RECORD"
        assert end_offset(cluster, leader, p) == before_p
        assert "listener=native" in refusals(cluster, leader)[-1]

        after = produce(conn, {p: forge.batch(forge.values(1, start=200))})[p]
        assert after.error_code == 0 and after.base_offset == before_p  # offsets go on where they were
    finally:
        conn.sock.close()
    records = ck_consume(cluster.kafka_bootstrap(), TOPIC, [p], before_p + 1)
    assert [m.offset() for m in records] == list(range(before_p + 1))  # a stored lie would shift them
    assert records[-1].value() == b"r200"
