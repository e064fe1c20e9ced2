"""Kafka's own command-line tools (Apache Kafka 4.x, run as users type them) give the same
answers against raftlog as against the reference Kafka: kafka-topics, the console producer and
consumer with keys and headers, kafka-consumer-groups, kafka-get-offsets, kafka-delete-records."""

from __future__ import annotations

from differential import Sides, assert_same, parse_topic_describe, wait_until
from kafka_ref import kafka_tool


def _topics(bootstrap: str, *args: str) -> tuple[int, str, str]:
    done = kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, *args)
    return done.returncode, done.stdout, done.stderr


def test_kafka_topics_create_describe_alter_delete(sides: Sides) -> None:
    def scenario(bootstrap: str) -> dict:
        out: dict = {}
        code, text, err = _topics(bootstrap, "--create", "--topic", "tools-topics", "--partitions", "3",
                                  "--replication-factor", "3", "--config", "retention.ms=3600000")
        out["create"] = (code, text.strip(), err.strip()[-300:] if code else "")
        code, text, _ = _topics(bootstrap, "--create", "--topic", "tools-topics", "--partitions", "1",
                                "--replication-factor", "1")
        out["create_again"] = (code, "already exists" in text + _)
        code, text, _ = _topics(bootstrap, "--describe", "--topic", "tools-topics")
        out["describe"] = (code, parse_topic_describe(text))
        code, text, err = _topics(bootstrap, "--alter", "--topic", "tools-topics", "--partitions", "5")
        out["alter"] = (code, err.strip()[-300:] if code else "")
        code, text, _ = _topics(bootstrap, "--describe", "--topic", "tools-topics")
        out["describe_after_alter"] = (code, parse_topic_describe(text))
        code, text, _ = _topics(bootstrap, "--list")
        out["listed"] = "tools-topics" in text.split()
        code, text, err = _topics(bootstrap, "--delete", "--topic", "tools-topics")
        out["delete"] = (code, err.strip()[-300:] if code else "")
        out["gone"] = wait_until(lambda: "tools-topics" not in _topics(bootstrap, "--list")[1].split(),
                                 timeout_s=60)
        return out

    answers = sides.run(scenario)
    same = assert_same(answers, "kafka-topics --create/--describe/--alter/--list/--delete")
    assert same["create"][0] == 0 and same["describe"][1]["tools-topics"]["partitions"] == 3
    assert same["describe_after_alter"][1]["tools-topics"]["partitions"] == 5
