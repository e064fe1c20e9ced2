"""Topic config schema: every key parses, normalises and range-checks its string values, and describe shows defaults vs set."""

import pytest

from raftlog.base.errors import InvalidConfigError
from metadata.topic_config import (
    KAFKA_NAMES,
    TOPIC_CONFIGS,
    TopicConfig,
    canonical_key,
    describe_configs,
    normalize_configs,
    parse_value,
)

VALID = [
    ("retention_ms", "-1", -1),
    ("retention_ms", "0", 0),
    ("retention_ms", "604800000", 604800000),
    ("retention_bytes", "-1", -1),
    ("retention_bytes", "1073741824", 1073741824),
    ("segment_bytes", "4096", 4096),
    ("segment_bytes", "2147483647", 2**31 - 1),
    ("segment_ms", "1", 1),
    ("delete_retention_ms", "0", 0),
    ("cleanup_policy", "delete", "delete"),
    ("cleanup_policy", "compact", "compact"),
    ("cleanup_policy", "compact,delete", "compact,delete"),
    ("cleanup_policy", "delete, compact", "compact,delete"),
    ("flush_policy", "always", "always"),
    ("flush_policy", "interval", "interval"),
    ("flush_policy", "never", "never"),
    ("flush_interval_ms", "1", 1),
    ("max_message_bytes", "0", 0),
    ("max_message_bytes", " 1048588 ", 1048588),
    ("message_timestamp_type", "CreateTime", "CreateTime"),
    ("message.timestamp.type", "CreateTime", "CreateTime"),  # Kafka Streams' internal topics
]

INVALID = [
    ("retention_ms", "-2", "out of range"),
    ("retention_ms", "1e3", "not an integer"),
    ("retention_ms", "007", "not an integer"),
    ("retention_ms", "", "not an integer"),
    ("retention_ms", str(2**63), "out of range"),
    ("retention_bytes", "-5", "out of range"),
    ("segment_bytes", "4095", "out of range"),
    ("segment_bytes", "-1", "out of range"),
    ("segment_bytes", str(2**31), "out of range"),
    ("segment_ms", "0", "out of range"),
    ("delete_retention_ms", "-1", "out of range"),
    ("cleanup_policy", "purge", "not one of"),
    ("cleanup_policy", "compact,purge", "not one of"),
    ("flush_policy", "sometimes", "not one of"),
    ("flush_interval_ms", "0", "out of range"),
    ("max_message_bytes", "-1", "out of range"),
    ("min_cleanable_dirty_ratio", "1.5", "out of range (0..1)"),
    ("min_cleanable_dirty_ratio", "half", "not a number"),
    ("max_compaction_lag_ms", "0", "out of range"),
    ("file_delete_delay_ms", "-1", "out of range"),
    ("message_timestamp_before_max_ms", "-5", "out of range"),
    ("message_timestamp_difference_max_ms", "soon", "not an integer"),
    ("message_timestamp_type", "createtime", "not one of CreateTime, LogAppendTime"),
    ("unclean_leader_election_enable", "true", "unknown topic config"),
    ("compression_type", "brotli", "is not one of"),
    ("min_insync_replicas", "0", "out of range"),
    ("retention.msec", "1000", "unknown topic config"),
]


@pytest.mark.parametrize("key,text,expected", VALID)
def test_valid_values_parse(key, text, expected):
    assert parse_value(key, text) == expected


@pytest.mark.parametrize("key,text,why", INVALID)
def test_invalid_values_name_the_key(key, text, why):
    with pytest.raises(InvalidConfigError) as info:
        parse_value(key, text)
    assert info.value.key == key
    assert info.value.code == "INVALID_CONFIG"
    assert key in str(info.value) and why in str(info.value)


def test_non_string_value_is_rejected():
    with pytest.raises(InvalidConfigError, match="must be a string") as info:
        normalize_configs({"retention_ms": 1000})
    assert info.value.key == "retention_ms"


def test_normalize_gives_canonical_strings_sorted():
    out = normalize_configs({"segment_ms": " 60000", "cleanup_policy": "delete,compact"})
    assert out == {"cleanup_policy": "compact,delete", "segment_ms": "60000"}
    assert list(out) == sorted(out)


def test_every_default_is_valid_and_typed_view_uses_defaults():
    for key, spec in TOPIC_CONFIGS.items():
        parse_value(key, spec.default)
    cfg = TopicConfig.from_configs({"cleanup_policy": "compact", "segment_bytes": "4096"})
    assert cfg.segment_bytes == 4096 and cfg.compact and not cfg.delete
    assert cfg.retention_ms == 7 * 24 * 3600 * 1000
    assert cfg.flush_policy == "always"


def test_describe_shows_defaults_vs_set():
    entries = {e.name: e for e in describe_configs({"retention_ms": "1000"})}
    assert set(entries) == set(TOPIC_CONFIGS)
    assert entries["retention_ms"].value == "1000" and not entries["retention_ms"].is_default
    assert entries["segment_bytes"].is_default
    assert entries["segment_bytes"].value == TOPIC_CONFIGS["segment_bytes"].default


def test_kafka_names_are_accepted_and_mapped_to_ours():
    assert normalize_configs({"retention.ms": "1000", "cleanup.policy": "compact", "flush.ms": "5"}) == {
        "cleanup_policy": "compact", "flush_interval_ms": "5", "retention_ms": "1000"}
    with pytest.raises(InvalidConfigError, match="given twice"):
        normalize_configs({"retention.ms": "1000", "retention_ms": "2000"})
    assert KAFKA_NAMES["max_message_bytes"] == "max.message.bytes"
    assert {canonical_key(v) for v in KAFKA_NAMES.values()} == set(TOPIC_CONFIGS)


def test_kafkas_compaction_and_timestamp_configs_are_accepted_and_normalized():
    # librdkafka 0052 / 0077 and KafkaJS's produce test set these on a topic; Kafka accepts them.
    configs = normalize_configs({
        "min.cleanable.dirty.ratio": "0.01", "max.compaction.lag.ms": "60000", "file.delete.delay.ms": "0",
        "message.timestamp.type": "LogAppendTime", "message.timestamp.difference.max.ms": "3600000",
        "message.timestamp.before.max.ms": "1000", "message.timestamp.after.max.ms": "2000",
    })
    typed = TopicConfig.from_configs(configs)
    assert typed.min_cleanable_dirty_ratio == 0.01 and configs["min_cleanable_dirty_ratio"] == "0.01"
    assert typed.message_timestamp_type == "LogAppendTime"
    assert (typed.message_timestamp_before_max_ms, typed.message_timestamp_after_max_ms) == (1000, 2000)
