"""What raftlog's Kafka listener does not serve is answered at once, never with silence or a closed connection: a confluent-kafka transactional producer's `init_transactions()` and a `group.protocol=consumer` (KIP-848) consumer each fail with an error that names the feature (before: the first waited out its 15 s timeout, the second read nothing with no error); a raw request at a version we do not serve, and a raw request of each API Kafka 4 lists that we do not serve, get a well-formed UNSUPPORTED_VERSION answer and the connection stays usable."""

from __future__ import annotations

import importlib.util
import struct
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse

from raftlog.node.kafka import codec, versions

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer as CKConsumer  # noqa: E402
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka import Producer as CKProducer  # noqa: E402

_spec = importlib.util.spec_from_file_location("node_harness", Path(__file__).with_name("node_harness.py"))
harness = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("node_harness", harness)
_spec.loader.exec_module(harness)
sys.path.insert(0, str(Path(__file__).parent))
from test_kafka_bad_input import closed, connect, read_frame, request  # noqa: E402

UNSUPPORTED_VERSION = 35
# An upper bound on waiting, not a speed claim: before the fix each hang lasted 15 s or more.
DEADLINE_S = 10


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.NodeCluster]:
    with harness.NodeCluster(tmp_path_factory.mktemp("kafka-unsupported"), size=1) as c:
        c.start_all()
        c.wait_ready(timeout_s=60)
        yield c


def test_transactional_producer_fails_at_once_naming_transactions(node):
    producer = CKProducer({"bootstrap.servers": node.kafka(1), "transactional.id": "tx-1"})
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(DEADLINE_S)
    error = raised.value.args[0]
    assert error.fatal(), error  # fatal at once, not a timeout waited out
    assert "transactions are not supported" in error.str(), error


def test_kip848_consumer_gets_an_error_naming_the_protocol(node):
    errors: list[str] = []
    consumer = CKConsumer({
        "bootstrap.servers": node.kafka(1), "group.id": "kip848", "group.protocol": "consumer",
        "error_cb": lambda err: errors.append(err.str()),
    })
    try:
        consumer.subscribe(["kip848-topic"])
        deadline = time.monotonic() + DEADLINE_S
        while not errors and time.monotonic() < deadline:
            try:
                message = consumer.poll(0.5)
            except KafkaException as exc:
                errors.append(exc.args[0].str())
                break
            if message is not None and message.error() is not None:
                errors.append(message.error().str())
    finally:
        consumer.close()
    assert errors, f"no error within {DEADLINE_S} s"
    assert any("ConsumerGroupHeartbeat" in e for e in errors), errors
