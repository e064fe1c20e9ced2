"""parse_options turns Spark's lower-cased option map into SourceOptions and rejects every bad value or combination with an error naming the option."""

import pytest

from spark_source.options import (
    EARLIEST,
    LATEST,
    InvalidOption,
    parse_options,
)

BASE = {"bootstrap": "127.0.0.1:9092", "subscribe": "events"}


def parse(streaming=False, **extra):
    return parse_options({**BASE, **extra}, streaming=streaming)


def test_defaults_follow_kafka_batch_from_earliest_stream_from_latest():
    b = parse()
    assert (b.starting.kind, b.ending.kind, b.fail_on_data_loss, b.include_headers) == (
        "earliest", "latest", True, False)
    s = parse(streaming=True)
    assert (s.starting.kind, s.ending, s.max_offsets_per_trigger) == ("latest", None, None)


def test_keys_are_case_insensitive_and_alias_bootstrap_works():
    o = parse_options({"raftlog.bootstrap.servers": " a:1 , b:2 ", "subscribePattern": "ev.*",
                       "includeHeaders": "TRUE", "failOnDataLoss": "false",
                       "minPartitions": "6"}, streaming=False)
    assert o.bootstrap == "a:1,b:2"
    assert o.subscription.kind == "subscribepattern"
    assert o.subscription.matches("events") and not o.subscription.matches("xevents")
    assert (o.include_headers, o.fail_on_data_loss, o.min_partitions) == (True, False, 6)


def test_subscribe_list_and_assign_json():
    o = parse(subscribe=" b, a ,b")
    assert o.subscription.topics == ("a", "b")
    o = parse_options({"bootstrap": "h:1", "assign": '{"t": [2, 0], "u": [1]}'}, streaming=True)
    assert o.subscription.assigned == (("t", 0), ("t", 2), ("u", 1))


def test_per_partition_starting_offsets_and_markers():
    o = parse(streaming=True, startingoffsets='{"events": {"0": 5, "1": -2, "10": -1}}')
    assert o.starting.kind == "specific"
    assert dict(o.starting.offsets) == {("events", 0): 5, ("events", 1): EARLIEST,
                                        ("events", 10): LATEST}


def test_timestamps_group_and_commit_to_group():
    assert parse(startingtimestamp="1700000000000").starting.timestamp == 1_700_000_000_000
    o = parse(startingoffsetsbytimestamp='{"events": {"0": 17}}',
              startingoffsetsbytimestampstrategy="latest")
    assert dict(o.starting.offsets) == {("events", 0): 17} and o.timestamp_strategy == "latest"
    o = parse(streaming=True, startingoffsets="group:g1", committogroup="g1")
    assert (o.starting.kind, o.starting.group_id, o.commit_to_group) == ("group", "g1", "g1")
    assert parse(endingtimestamp="99").ending.timestamp == 99


def test_batch_ignores_max_offsets_per_trigger_as_kafka_does():
    assert parse(maxoffsetspertrigger="10").max_offsets_per_trigger is None
    assert parse(streaming=True, maxoffsetspertrigger="10").max_offsets_per_trigger == 10


def test_provider_options_pass_through_unchecked():
    o = parse(**{"raftlog.provider.records": "{}"})
    assert o.raw["raftlog.provider.records"] == "{}"


@pytest.mark.parametrize("options, streaming, message", [
    ({"subscribe": "a"}, False, "bootstrap"),
    ({"bootstrap": "nohost", "subscribe": "a"}, False, "host:port"),
    ({"bootstrap": "h:1"}, False, "exactly one of"),
    ({"bootstrap": "h:1", "subscribe": "a", "assign": '{"a": [0]}'}, False, "exactly one of"),
    ({**BASE, "subscribe": "bad topic"}, False, "topic names"),
    ({**BASE, "subscribe": ","}, False, "comma-separated"),
    ({"bootstrap": "h:1", "subscribepattern": "("}, False, "regular expression"),
    ({"bootstrap": "h:1", "assign": '{"a": []}'}, False, "partition numbers"),
    ({"bootstrap": "h:1", "assign": "[1]"}, False, "JSON object"),
    ({**BASE, "startingoffsets": "latest"}, False, "batch query"),
    ({**BASE, "startingoffsets": '{"events": {"0": -1}}'}, False, "offset >= 0"),
    ({**BASE, "startingoffsets": '{"events": {"x": 1}}'}, True, "partition numbers"),
    ({**BASE, "startingoffsets": "{not json"}, True, "JSON"),
    ({**BASE, "startingoffsets": "group:"}, True, "group id"),
    ({**BASE, "startingoffsets": "earliest", "startingtimestamp": "1"}, True, "only one of"),
    ({**BASE, "endingoffsets": "latest"}, True, "only for batch"),
    ({**BASE, "endingoffsets": "earliest"}, False, "read nothing"),
    ({**BASE, "endingoffsets": '{"events": {"0": -2}}'}, False, "-1 (latest)"),
    ({**BASE, "maxoffsetspertrigger": "0"}, True, "maxOffsetsPerTrigger"),
    ({**BASE, "minoffsetspertrigger": "10"}, True, "cannot combine read limits"),
    ({**BASE, "failondataloss": "yes"}, True, "'true' or 'false'"),
    ({**BASE, "startingoffset": "earliest"}, True, "unknown option(s) startingoffset"),
    ({**BASE, "committogroup": "g"}, False, "only for streaming"),
    ({**BASE, "startingoffsetsbytimestampstrategy": "first"}, False, "'error' or 'latest'"),
    ({**BASE, "raftlog.fetch.max.bytes": "10"}, False, "raftlog.fetch.max.bytes"),
    ({**BASE, "decode": "groups"}, False, "'offsets'"),
])
def test_bad_options_name_the_option(options, streaming, message):
    with pytest.raises(InvalidOption) as info:
        parse_options(options, streaming=streaming)
    assert message in str(info.value)
    assert info.value.code == "INVALID_CONFIG"


def test_decode_offsets_reads_only_consumer_offsets_in_batch():
    base = {k: v for k, v in BASE.items() if k != "subscribe"}
    opts = parse_options({**base, "decode": "OFFSETS"}, streaming=False)
    assert opts.decode == "offsets"
    assert opts.subscription.topics == ("__consumer_offsets",)
    with pytest.raises(InvalidOption, match="reads only __consumer_offsets"):
        parse_options({**base, "decode": "offsets", "subscribe": "events"}, streaming=False)
    with pytest.raises(InvalidOption, match="batch reads"):
        parse_options({**base, "decode": "offsets"}, streaming=True)
