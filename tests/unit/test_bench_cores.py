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


def test_the_profile_split_puts_each_stack_where_the_split_would(tmp_path):
    """A stack under the partition append stays with the services though a Kafka handler called
    it; the one-time codec import is left out of the total."""
    raw = tmp_path / "profile.txt"
    raw.write_text("\n".join([
        "run (trio/_core/_run.py:1);handle_produce (raftlog/node/kafka/produce.py:111);"
        "PartitionService.append (partition/service.py:257) 30",
        "run (trio/_core/_run.py:1);_dispatch (raftlog/node/kafka/listener.py:302);"
        "decode_body (raftlog/node/kafka/codec.py:130) 20",
        "run (trio/_core/_run.py:1);_write_loop (raftlog/node/kafka/listener.py:439) 10",
        "run (trio/_core/_run.py:1);unrolled_run (trio/_core/_run.py:2931) 40",
        "load_protocol (raftlog/node/kafka/listener.py:80);<module> (kafka/__init__.py:1) 500",
    ]) + "\n")
    split = bench_cores.profile_split(raw)
    assert split == {"S partition append (validate, log, raft)": 0.3, "N decode (kafka-python)": 0.2,
                     "N socket send (writer)": 0.1, "trio scheduler (run loop, epoll)": 0.4}
