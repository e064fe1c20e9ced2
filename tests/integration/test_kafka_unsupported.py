"""What raftlog's Kafka listener does not serve is answered at once, never with silence or a closed connection (transactions, once answered here with an error naming them, are served since issue 42: test_txn_kafka.py): a raw request at a version we do not serve, and a raw request of each API Kafka 4 lists that we do not serve, get a well-formed UNSUPPORTED_VERSION answer and the connection stays usable."""

from __future__ import annotations

import io
import struct
import time
from typing import Iterator

import pytest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse

from raftlog.node.kafka import codec, versions

import node_harness as harness  # (tests/conftest.py puts tests/integration on sys.path)
from test_kafka_bad_input import closed, connect, read_frame, request

UNSUPPORTED_VERSION = 35
UNKNOWN_TOPIC_OR_PARTITION = 3
GROUP_ID_NOT_FOUND = 69
COORDINATOR_NOT_AVAILABLE = 15
# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: a fresh node's
# __consumer_offsets partitions are still being created, elected and loaded
RETRIABLE_COORDINATOR = (14, 15, 16)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.NodeCluster]:
    with harness.NodeCluster(tmp_path_factory.mktemp("kafka-unsupported"), size=1) as c:
        c.start_all()
        c.wait_ready(timeout_s=60)
        yield c




UNSERVED = sorted(k for k in codec.REQUEST_CLASSES if k not in versions.SUPPORTED_VERSIONS)


def call(sock, message, version: int, correlation_id: int):
    """Send `message` at `version`; the answer decoded in its own schema, which it must fill
    exactly (a well-formed response), the header's correlation id checked."""
    request(sock, message, correlation_id, version)
    frame = read_frame(sock)
    assert struct.unpack(">i", frame[:4])[0] == correlation_id
    response_cls = codec.RESPONSE_CLASSES[message.API_KEY]
    body = frame[5 if codec.is_flexible(message.API_KEY, version) else 4:]  # header v1: + empty tags
    stream = io.BytesIO(body)
    response = response_cls[version].decode(stream)
    assert stream.tell() == len(body), "the answer is exactly one response of the schema"
    return response


def still_usable(sock, correlation_id: int) -> None:
    request(sock, ApiVersionsRequest[0](), correlation_id, 0)
    frame = read_frame(sock)
    assert struct.unpack(">i", frame[:4])[0] == correlation_id
    assert ApiVersionsResponse.decode(frame[4:], version=0).error_code == 0


def top_error(response, api_key: int, version: int) -> int | None:
    field = codec.RESPONSE_CLASSES[api_key]._struct.fields.get("error_code")
    return response.error_code if field is not None and field.for_version_q(version) else None


def test_unserved_apis_are_absent_from_api_versions(node):
    assert {34, 74} <= set(UNSERVED)  # AlterReplicaLogDirs (one data dir), ListConfigResources
    with connect(node) as sock:
        listed = {k.api_key for k in call(sock, ApiVersionsRequest[3](client_software_name="t",
                                                                      client_software_version="1"), 3, 1).api_keys}
    assert listed.isdisjoint(UNSERVED)


@pytest.mark.parametrize("api_key", UNSERVED)
def test_each_unserved_api_gets_unsupported_version_and_the_connection_stays(node, api_key):
    cls = codec.REQUEST_CLASSES[api_key]
    version = cls.max_version
    with connect(node) as sock:
        response = call(sock, cls[version](), version, 7)
        if top_error(response, api_key, version) is not None:
            assert response.error_code == UNSUPPORTED_VERSION
        still_usable(sock, 8)


def test_consumer_group_describe_answers_per_item(node):
    from kafka.protocol.admin.topics import DescribeTopicPartitionsRequest as R

    from raftlog.node.kafka.schemas import ConsumerGroupDescribeRequest as CGD
    with connect(node) as sock:
        # served since issue 43 (test_kip848_kafka.py): an unknown group is GROUP_ID_NOT_FOUND, once
        # the node's group coordinator has loaded (before: a retriable coordinator error)
        deadline = time.monotonic() + 60
        while True:
            response = call(sock, CGD[1](group_ids=["g"], include_authorized_operations=False), 1, 2)
            codes = [(g.group_id, g.error_code) for g in response.groups]
            if codes[0][1] not in RETRIABLE_COORDINATOR or time.monotonic() > deadline:
                break
            time.sleep(0.2)  # polling the coordinator's load under a deadline
        assert codes == [("g", GROUP_ID_NOT_FOUND)]
        response = call(sock, R[0](topics=[R.TopicRequest(name="a"), R.TopicRequest(name="b")],
                                   response_partition_limit=10), 0, 3)
        # served since issue 41 (test_kafka_operator_apis.py): per topic, unknown ones named
        assert [(t.name, t.error_code) for t in response.topics] == [("a", UNKNOWN_TOPIC_OR_PARTITION),
                                                                     ("b", UNKNOWN_TOPIC_OR_PARTITION)]
        still_usable(sock, 4)


def test_served_api_at_an_unserved_version_answers_per_item(node):
    from kafka.protocol.consumer.fetch import FetchRequest as F
    from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest as FC
    assert versions.SUPPORTED_VERSIONS[1][0] > 3 and versions.SUPPORTED_VERSIONS[10][1] == 6
    with connect(node) as sock:
        fetch = F[3](replica_id=-1, max_wait_ms=10, min_bytes=1, max_bytes=1 << 20, topics=[
            F.FetchTopic(topic="t", partitions=[F.FetchTopic.FetchPartition(partition=2, fetch_offset=0,
                                                                             partition_max_bytes=1024)])])
        response = call(sock, fetch, 3, 5)
        assert [(t.topic, [(p.partition_index, p.error_code) for p in t.partitions])
                for t in response.responses] == [("t", [(2, UNSUPPORTED_VERSION)])]
        # kafka-python pinned to Kafka 4.0 asks FindCoordinator v6: served (v5's format), each key
        # answered, none with UNSUPPORTED_VERSION (it was, and kafka-python formed no group)
        response = call(sock, FC[6](key_type=0, coordinator_keys=["g1", "g2"]), 6, 6)
        assert [c.key for c in response.coordinators] == ["g1", "g2"]
        assert all(c.error_code != UNSUPPORTED_VERSION for c in response.coordinators)
        still_usable(sock, 7)
