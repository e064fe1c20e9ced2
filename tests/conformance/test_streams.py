"""Kafka Streams (4.4.0) runs the word count on raftlog as on the reference Apache Kafka: input
topic -> flatMapValues -> groupBy (a repartition topic) -> count (a changelog topic) -> counts
topic, read back with read_committed; the same final count of every word, the application
RUNNING and no error, with processing.guarantee at_least_once and exactly_once_v2
(tests/conformance/java/StreamsWordCount.java; exactly_once_v2 produces in transactions, issue 42,
and commits its input offsets with them)."""

from __future__ import annotations

import pytest

from differential import JAVA_SOURCES, Sides, assert_same, java_program

SOURCE = JAVA_SOURCES / "StreamsWordCount.java"
DEADLINE_S = 180


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_streams_word_count(sides: Sides, guarantee: str) -> None:
    name = f"streams-wc-{guarantee.replace('_', '-')}"
    answers = sides.run(lambda b: java_program(SOURCE, b, name, guarantee, str(DEADLINE_S),
                                               timeout_s=DEADLINE_S + 120))
    same = assert_same(answers, f"Kafka Streams word count, {guarantee}")
    assert same["complete"] and same["error"] is None and same["state"] == "RUNNING", same
    # 200 sentences, sentence i holding 2 words (i // 50 + 1) times: 1000 words, "raft" 122 times.
    assert sum(same["counts"].values()) == 1000 and same["counts"]["raft"] == 122
