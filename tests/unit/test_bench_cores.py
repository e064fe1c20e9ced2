"""`scripts/bench cores` sends a hand-framed Produce v3 request: it is one Kafka's own schema
decodes to the topic, partition, acks and the very batch it carries (a wrong byte would make the
bench count errors, or nothing)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import bench_cores  # noqa: E402
from partition.batch import BatchBuilder  # noqa: E402
from raftlog.node.kafka.codec import decode_body, decode_header  # noqa: E402


def test_the_produce_request_decodes_as_kafka_frames_it():
    builder = BatchBuilder()
    for _ in range(3):
        builder.append_value(b"x" * 100, 1_700_000_000_000)
    batch = builder.build()
    framed = bench_cores.produce_request("bench-cores", 2, batch, acks=-1, timeout_ms=30_000)
    framed[8:12] = (77).to_bytes(4, "big")  # the correlation id the producer patches per send
    assert int.from_bytes(framed[:4], "big") == len(framed) - 4
    frame = bytes(framed[4:])
    header, offset = decode_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (0, 3, 77)
    body = decode_body(header, frame, offset)
    assert (body.acks, body.timeout_ms, body.transactional_id) == (-1, 30_000, None)
    [topic] = body.topic_data
    [part] = topic.partition_data
    assert (topic.name, part.index, bytes(part.records)) == ("bench-cores", 2, batch)
