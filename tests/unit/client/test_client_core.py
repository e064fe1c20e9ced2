"""The sans-I/O client core routes by leader, uses NOT_LEADER hints, retries with bounded jittered backoff under a deadline, parses answers into typed errors, and trims/skips fetched batches."""

import random

import pytest

from partition.batch import CONTROL_LEADER_CHANGE, BatchBuilder, control_batch
from raftlog.client.accumulator import FULL
from raftlog.client.admin import AdminCore
from raftlog.client.consumer import ConsumerCore, append_fetched
from raftlog.client.core import ClientCore, Close, Send
from raftlog.client.group import GroupCore
from raftlog.client.producer import ProducerCore
from raftlog.client.request import check_response, parse_list_offsets, parse_metadata
from raftlog.client.retry import RetryPolicy
from raftlog.client.errors import DeliveryTimedOutError, NoBrokerAvailableError
from raftlog.base.errors import (
    CorruptMessageError,
    MessageTooLargeError,
    NotLeaderError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)


class Fut:
    def __init__(self):
        self.result = self.error = None
        self.done = False

    def set_result(self, r):
        self.result, self.done = r, True

    def set_exception(self, e):
        self.error, self.done = e, True


def metadata_answer(rid, leaders, epoch=0, topic="t"):
    return {
        "id": rid, "ok": True, "cluster_id": "c", "controller_id": 1,
        "brokers": [{"id": i, "host": f"h{i}", "port": 9000 + i, "fenced": False} for i in (1, 2, 3)],
        "topics": [{"name": topic, "internal": False, "configs": {}, "partitions": [
            {"partition": p, "leader": ld, "leader_epoch": epoch, "replicas": [1, 2, 3],
             "preferred_leader": ld} for p, ld in enumerate(leaders)]}],
    }


def sends(actions, op=None):
    return [a for a in actions if isinstance(a, Send) and (op is None or a.request["op"] == op)]


def producer(**kw):
    opts = dict(rng=random.Random(3), future_factory=Fut, linger_ms=0,
                delivery_timeout_ms=40_000, request_timeout_ms=30_000)
    opts.update(kw)
    return ProducerCore(["boot:1"], **opts)


def ready_producer(leaders=(1, 2), **kw):
    """A producer core that has metadata and a producer id (id 7, epoch 0)."""
    core = producer(**kw)
    acts = core.poll(0)
    [md] = sends(acts, "metadata")
    assert md.broker_id == -1  # bootstrap
    core.on_response(-1, metadata_answer(md.request["id"], list(leaders)), 0)
    if core.idempotent:
        [pid] = sends(acts, "init_producer_id")  # asked in parallel with the metadata
        core.on_response(pid.broker_id, {"id": pid.request["id"], "ok": True,
                                         "producer_id": 7, "producer_epoch": 0}, 0)
    return core


def test_routes_batches_to_partition_leaders_one_request_per_broker():
    core = ready_producer(leaders=(1, 2, 1))
    for p in range(3):
        core.send("t", b"v", None, None, p, 1, 0, 3)
    reqs = sends(core.poll(1), "produce")
    by_broker = {s.broker_id: sorted(x["partition"] for x in s.request["partitions"]) for s in reqs}
    assert by_broker == {1: [0, 2], 2: [1]}
    assert all(s.request["acks"] == -1 and s.request["v"] == 1 for s in reqs)
    assert len({s.request["id"] for s in reqs}) == 2


def test_keyed_records_follow_murmur2_and_answers_resolve_offsets():
    core = ready_producer(leaders=(1, 1, 1))
    b = core.send("t", b"v", b"foobar", None, None, 1, 0, 3)
    # Kafka: toPositive(murmur2("foobar")) % 3, murmur2("foobar") = -790332482 (UtilsTest)
    assert b.partition == (-790332482 & 0x7FFFFFFF) % 3
    b2 = core.send("t", b"w", b"foobar", None, None, 1, 0, 3)
    assert b2 is b
    [req] = sends(core.poll(1), "produce")
    core.on_response(1, {"id": req.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": b.partition, "base_offset": 40, "log_append_time": -1}]}, 2)
    assert b.future.result == 40
    assert ProducerCore.record_result(b, 1) == (b.partition, 41)


def test_not_leader_hint_is_used_at_once_and_refresh_is_asked():
    core = ready_producer(leaders=(1,))
    b = core.send("t", b"v", None, None, 0, 1, 0, 1)
    [req] = sends(core.poll(1), "produce")
    assert req.broker_id == 1
    core.on_response(1, {"id": req.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "error": {
            "code": "NOT_LEADER", "message": "", "leader_id": 2, "leader": "h2:9002"}}]}, 10)
    assert core.metadata.leader("t", 0) == 2
    acts = core.poll(10 + 1000)  # after the (<= 1 s) backoff
    [again] = sends(acts, "produce")
    assert again.broker_id == 2
    assert again.request["partitions"][0]["records"] == req.request["partitions"][0]["records"]
    assert sends(acts, "metadata")  # refresh scheduled too
    assert not b.done


def test_unknown_topic_error_fails_pending_batches_and_schedules_refresh():
    core = ready_producer(leaders=(1,))
    b = core.send("t", b"v", None, None, 0, 1, 0, 1)
    [req] = sends(core.poll(1), "produce")
    core.on_response(1, {"id": req.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "error": {"code": "UNKNOWN_TOPIC_OR_PARTITION", "message": "x"}}]}, 2)
    assert not b.done  # retriable, as in Kafka
    [md] = sends(core.poll(2), "metadata")
    core.on_response(md.broker_id, {"id": md.request["id"], "ok": True, "brokers": [],
                                    "topics": [{"name": "t", "error": "UNKNOWN_TOPIC_OR_PARTITION"}]}, 3)
    # As in Kafka the batch keeps waiting (metadata may lag) until its delivery deadline,
    # then fails with the definite error it last got (it was never possibly written).
    core.poll(2000)
    assert not b.done
    core.poll(40_000)
    assert b.done and isinstance(b.future.error, UnknownTopicOrPartitionError)


def test_non_retriable_error_fails_batch_at_once():
    core = ready_producer(leaders=(1,))
    b = core.send("t", b"v", None, None, 0, 1, 0, 1)
    [req] = sends(core.poll(1), "produce")
    core.on_response(1, {"id": req.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "error": {"code": "MESSAGE_TOO_LARGE", "message": "big"}}]}, 2)
    assert isinstance(b.future.error, MessageTooLargeError)


def two_batches_in_flight():
    """A producer with two batches of partition 0 in flight (and a third waiting): the core,
    the two requests and their batches."""
    core = ready_producer(leaders=(1,), batch_bytes=256)
    for _ in range(6):
        core.send("t", b"x" * 80, None, None, 0, 1, 0, 1)
    r1 = sends(core.poll(1), "produce")[0]
    r2 = sends(core.poll(1), "produce")[0]
    b1, b2 = core._pending[r1.request["id"]].ctx[0], core._pending[r2.request["id"]].ctx[0]
    assert b2.base_sequence == b1.base_sequence + b1.record_count
    return core, r1, r2, b1, b2


def test_duplicate_sequence_is_success_and_out_of_order_after_earlier_failure_retries():
    core, r1, r2, b1, b2 = two_batches_in_flight()
    core.on_response(1, {"id": r1.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "error": {"code": "NOT_ENOUGH_REPLICAS", "message": ""}}]}, 2)
    core.on_response(1, {"id": r2.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "error": {"code": "OUT_OF_ORDER_SEQUENCE_NUMBER", "message": ""}}]}, 2)
    assert not b1.done and not b2.done  # both wait: b1 for its backoff, b2 behind b1
    [again] = sends(core.poll(2000), "produce")
    assert again.request["partitions"][0]["records"] == b1.payload
    core.on_response(1, {"id": again.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "error": {"code": "DUPLICATE_SEQUENCE_NUMBER", "message": ""}}]}, 2001)
    assert b1.done and b1.future.error is None and b1.future.result == -1
    [nxt] = sends(core.poll(2001), "produce")
    assert nxt.request["partitions"][0]["records"] == b2.payload


def test_out_of_order_without_earlier_failure_is_fatal_and_resets_producer_id():
    core = ready_producer(leaders=(1,))
    b = core.send("t", b"v", None, None, 0, 1, 0, 1)
    [req] = sends(core.poll(1), "produce")
    core.on_response(1, {"id": req.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "error": {"code": "OUT_OF_ORDER_SEQUENCE_NUMBER", "message": ""}}]}, 2)
    assert isinstance(b.future.error, OutOfOrderSequenceNumberError)
    assert sends(core.poll(3), "init_producer_id")


def test_connection_loss_retries_then_gives_up_with_unknown_outcome():
    core = ready_producer(leaders=(1,), delivery_timeout_ms=31_000)
    b = core.send("t", b"v", None, None, 0, 1, 0, 1)
    [req] = sends(core.poll(1), "produce")
    core.on_disconnect(1, 5)
    assert core.metadata.leader("t", 0) is None  # the dead broker is not used as leader
    assert sends(core.poll(5), "metadata")
    assert not b.done
    # No leader ever comes back: the batch expires; it was sent once, so its outcome is unknown.
    core.poll(31_001)
    assert b.done and isinstance(b.future.error, RequestTimedOutError)


def test_never_sent_batch_expires_as_definite_failure():
    core = ready_producer(leaders=(None,), delivery_timeout_ms=30_100)
    b = core.send("t", b"v", None, None, 0, 1, 0, 1)
    for now in (1, 100, 1000):
        assert not sends(core.poll(now), "produce")
    core.poll(30_100)
    assert isinstance(b.future.error, DeliveryTimedOutError)


def test_request_timeout_closes_connection_and_counts_as_unknown():
    core = ready_producer(leaders=(1,))
    b = core.send("t", b"v", None, None, 0, 1, 0, 1)
    [req] = sends(core.poll(1), "produce")
    acts = core.poll(1 + 40_000 + 1000)
    assert Close(1) in acts
    assert b.maybe_written
    # A late answer for the timed-out id is dropped, not misapplied.
    core.on_response(1, {"id": req.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "base_offset": 5}]}, 50_000)
    assert b.base_offset == -1


def test_no_producer_id_means_nothing_sealed():
    core = producer()
    acts = core.poll(0)
    md = sends(acts, "metadata")[0]
    assert sends(acts, "init_producer_id")
    core.on_response(-1, metadata_answer(md.request["id"], [1]), 0)
    b = core.send("t", b"v", None, None, 0, 1, 0, 1)
    assert not sends(core.poll(5), "produce")
    assert b.payload is None  # not sealed: it would need a sequence


def test_buffer_full_is_reported():
    core = ready_producer(leaders=(1,), batch_bytes=1024, buffer_bytes=2048, linger_ms=100)
    out = [core.send("t", b"z" * 100, None, None, 0, 1, 0, 1) for _ in range(30)]
    assert out[-1] is FULL


def test_acks_zero_completes_on_send_and_expects_no_answer():
    core = ready_producer(leaders=(1,), acks=0, enable_idempotence=False)
    b = core.send("t", b"v", None, None, 0, 1, 0, 1)
    [req] = sends(core.poll(1), "produce")
    assert req.request["acks"] == 0 and b.future.result == -1
    assert not core._pending


def test_backoff_schedule_is_bounded_exponential_with_seeded_jitter():
    pol = RetryPolicy(random.Random(5), backoff_ms=100, backoff_max_ms=1000, jitter=0.2)
    waits = [pol.backoff(n) for n in range(1, 9)]
    for n, w in enumerate(waits, start=1):
        base = min(1000, 100 * 2 ** (n - 1))
        assert 0.8 * base - 1 <= w <= min(1000, 1.2 * base)
    assert waits[-1] <= 1000 and waits[0] < waits[3]
    again = RetryPolicy(random.Random(5), 100, 1000, 0.2)
    assert waits == [again.backoff(n) for n in range(1, 9)]  # same seed, same schedule
    assert pol.next_attempt_ms(1, now_ms=0, deadline_ms=50) is None
    assert 80 <= pol.next_attempt_ms(1, now_ms=0, deadline_ms=10_000) <= 120


def test_check_response_maps_error_codes_with_details():
    with pytest.raises(NotLeaderError) as ei:
        check_response({"id": 3, "error": {"code": "NOT_LEADER", "message": "m", "leader_id": 2,
                                           "leader": "h:1"}})
    assert ei.value.leader_id == 2 and ei.value.leader == "h:1"
    assert check_response({"id": 3, "ok": True, "x": 1})["x"] == 1
    with pytest.raises(UnknownTopicOrPartitionError):
        parse_list_offsets({"id": 1, "ok": True, "partitions": [
            {"topic": "t", "partition": 0, "error": {"code": "UNKNOWN_TOPIC_OR_PARTITION", "message": ""}}]})


def test_metadata_parse_and_stale_epoch_ignored():
    md = parse_metadata(metadata_answer(1, [1, None, 3], epoch=5))
    assert md.topics["t"].partitions[1].leader is None and md.brokers[3].port == 9003
    core = producer()
    core.metadata.update(md, 0)
    assert core.metadata.available_partitions("t") == (0, 2)
    core.metadata.update(parse_metadata(metadata_answer(2, [2, 2, 2], epoch=4)), 1)
    assert [core.metadata.leader("t", p) for p in range(3)] == [1, None, 3]
    core.metadata.update(parse_metadata(metadata_answer(3, [2, 2, 2], epoch=6)), 2)
    assert [core.metadata.leader("t", p) for p in range(3)] == [2, 2, 2]


def test_admin_call_retries_on_disconnect_then_times_out_unknown():
    core = AdminCore(["a:1", "b:2"], rng=random.Random(1), request_timeout_ms=5000)
    call = core.submit({"op": "create_topic", "name": "x", "partitions": 1,
                        "replication_factor": 1, "configs": {}}, 0)
    [s] = sends(core.poll(0))
    core.on_disconnect(s.broker_id, 1)
    [s2] = sends(core.poll(1500))
    assert s2.broker_id != s.broker_id  # the other bootstrap broker
    core.on_response(s2.broker_id, {"id": s2.request["id"], "ok": True, "name": "x", "partitions": []}, 1600)
    assert call.done and call.value()["name"] == "x"
    call2 = core.submit({"op": "cluster_status"}, 2000, timeout_ms=100)
    core.poll(2000)
    core.on_disconnect(-1, 2001)
    core.on_disconnect(-2, 2001)
    core.poll(2200)
    assert call2.done and isinstance(call2.error, RequestTimedOutError)
    call3 = core.submit({"op": "cluster_status"}, 3000, timeout_ms=1)
    core._down_until_ms = {-1: 10**9, -2: 10**9}
    core.poll(3001)
    assert isinstance(call3.error, NoBrokerAvailableError)


# ---------------------------------------------------------------- consumer


def batch_bytes(base_offset, values, ts=1000):
    b = BatchBuilder(base_offset=base_offset, partition_leader_epoch=1)
    for i, v in enumerate(values):
        b.append(v, key=None, timestamp_ms=ts + i)
    return b.build()


def test_fetch_trims_below_position_and_skips_control_batches():
    data = (batch_bytes(0, [b"a", b"b", b"c", b"d", b"e"])
            + control_batch(CONTROL_LEADER_CHANGE, timestamp_ms=1, partition_leader_epoch=2, base_offset=5)
            + batch_bytes(6, [b"f", b"g"]))
    out = []
    nxt = append_fetched("t", 0, data, 3, out)
    assert [(r.offset, r.value) for r in out] == [(3, b"d"), (4, b"e"), (6, b"f"), (7, b"g")]
    assert nxt == 8 and out[0].topic == "t" and out[0].timestamp == 1003
    out2 = []
    assert append_fetched("t", 0, control_batch(CONTROL_LEADER_CHANGE, timestamp_ms=1,
                                                partition_leader_epoch=2, base_offset=8), 8, out2) == 9
    assert out2 == []


def consumer_with_metadata(**kw):
    core = ConsumerCore(["boot:1"], rng=random.Random(2), **kw)
    core.assign([("t", 0)])
    [md] = sends(core.poll(0), "metadata")
    core.on_response(-1, metadata_answer(md.request["id"], [1]), 0)
    return core


def test_consumer_resets_fetches_and_drops_stale_answers_after_seek():
    core = consumer_with_metadata(auto_offset_reset="earliest")
    [lo] = sends(core.poll(1), "list_offsets")
    assert lo.request["partitions"] == [{"topic": "t", "partition": 0, "timestamp": -2}]
    core.on_response(1, {"id": lo.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "offset": 2, "timestamp": -1}]}, 2)
    assert core.position("t", 0) == 2
    [f] = sends(core.poll(3), "fetch")
    assert f.request["partitions"][0]["fetch_offset"] == 2
    core.seek("t", 0, 0)  # the answer to the fetch in flight is now stale
    core.on_response(1, {"id": f.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "high_watermark": 5, "log_start_offset": 0,
         "records": batch_bytes(0, [b"a", b"b", b"c", b"d", b"e"])}]}, 4)
    assert core.take_records() == [] and core.position("t", 0) == 0
    [f2] = sends(core.poll(5), "fetch")
    core.on_response(1, {"id": f2.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "high_watermark": 5, "log_start_offset": 0,
         "records": batch_bytes(0, [b"a", b"b", b"c", b"d", b"e"])}]}, 6)
    assert core.position("t", 0) == 0  # nothing handed out yet
    recs = core.take_records(3)
    assert [r.offset for r in recs] == [0, 1, 2] and core.position("t", 0) == 3
    assert [r.offset for r in core.take_records()] == [3, 4] and core.position("t", 0) == 5
    assert core.high_watermark("t", 0) == 5


def test_consumer_offset_out_of_range_resets_or_raises():
    core = consumer_with_metadata(auto_offset_reset="none")
    core.seek("t", 0, 100)
    [f] = sends(core.poll(1), "fetch")
    core.on_response(1, {"id": f.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "error": {"code": "OFFSET_OUT_OF_RANGE", "message": "",
                                                  "log_start_offset": 0, "log_end_offset": 5}}]}, 2)
    with pytest.raises(Exception) as ei:
        core.take_records()
    assert ei.value.code == "OFFSET_OUT_OF_RANGE"
    core2 = consumer_with_metadata(auto_offset_reset="latest")
    core2.seek("t", 0, 100)
    [f] = sends(core2.poll(1), "fetch")
    core2.on_response(1, {"id": f.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "error": {"code": "OFFSET_OUT_OF_RANGE", "message": ""}}]}, 2)
    [lo] = sends(core2.poll(3), "list_offsets")
    assert lo.request["partitions"][0]["timestamp"] == -1


def test_consumer_not_leader_moves_fetch():
    core = consumer_with_metadata()
    core.seek("t", 0, 0)
    [f] = sends(core.poll(1), "fetch")
    core.on_response(1, {"id": f.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "error": {"code": "NOT_LEADER", "message": "",
                                                  "leader_id": 3, "leader": "h3:9003"}}]}, 2)
    acts = core.poll(3)
    assert [s.broker_id for s in sends(acts, "fetch")] == [3]


def _corrupt(batch: bytes) -> bytes:
    damaged = bytearray(batch)
    damaged[-3] ^= 0x10  # inside the records: only the CRC can tell
    return bytes(damaged)


def test_a_corrupt_batch_is_raised_once_with_its_offset_and_nothing_is_redelivered():
    # Issue 14 case 2: the records before a corrupt batch used to be handed out, then the
    # error raised, with the position left where it was: the same records came back forever.
    core = consumer_with_metadata()
    core.seek("t", 0, 0)
    delivered = []
    [f] = sends(core.poll(1), "fetch")
    core.on_response(1, {"id": f.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "high_watermark": 9, "log_start_offset": 0,
         "records": batch_bytes(0, [b"a", b"b", b"c"]) + _corrupt(batch_bytes(3, [b"d", b"e"]))
         + batch_bytes(5, [b"f"])}]}, 2)
    with pytest.raises(CorruptMessageError) as ei:
        core.take_records()
    assert ei.value.details["offset"] == 3 and ei.value.details["partition"] == 0
    delivered += core.take_records()  # the intact batch before it, once
    assert core.position("t", 0) == 3
    assert sends(core.poll(3), "fetch") == []  # backing off; metadata is refreshed meanwhile
    later = 60_000
    [f2] = sends(core.poll(later), "fetch")
    assert f2.request["partitions"][0]["fetch_offset"] == 3  # the same position, again
    core.on_response(f2.broker_id, {"id": f2.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "high_watermark": 9, "log_start_offset": 0,
         "records": batch_bytes(3, [b"d", b"e"]) + batch_bytes(5, [b"f"])}]}, later + 1)
    delivered += core.take_records()
    assert [r.offset for r in delivered] == [0, 1, 2, 3, 4, 5]
    assert [r.value for r in delivered] == [b"a", b"b", b"c", b"d", b"e", b"f"]


def test_a_storage_error_refreshes_metadata_and_the_fetch_moves_to_the_new_leader():
    core = consumer_with_metadata()
    core.seek("t", 0, 0)
    [f] = sends(core.poll(1), "fetch")
    core.on_response(1, {"id": f.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "error": {"code": "KAFKA_STORAGE_ERROR",
                                                  "message": "repairing", "offset": 0}}]}, 2)
    acts = core.poll(3)
    [md] = sends(acts, "metadata")
    assert sends(acts, "fetch") == []
    core.on_response(md.broker_id, metadata_answer(md.request["id"], [2], epoch=1), 4)
    [f2] = sends(core.poll(60_000), "fetch")
    assert f2.broker_id == 2


def test_a_producer_refreshes_metadata_on_a_storage_error_and_retries_at_the_new_leader():
    # Issue 14 case 3: KAFKA_STORAGE_ERROR refreshed nothing, so a producer stayed pinned to
    # the broker whose disk was full.
    core = ready_producer(leaders=(1,))
    core.send("t", b"v", None, None, 0, 1, 0, 1)
    [p] = sends(core.poll(1), "produce")
    assert p.broker_id == 1
    core.on_response(1, {"id": p.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "error": {"code": "KAFKA_STORAGE_ERROR",
                                                  "message": "disk full"}}]}, 2)
    [md] = sends(core.poll(3), "metadata")
    core.on_response(md.broker_id, metadata_answer(md.request["id"], [2], epoch=1), 4)
    [p2] = sends(core.poll(5_000), "produce")
    assert p2.broker_id == 2


def test_keyless_records_fill_one_batch_then_move_to_another_partition():
    core = ready_producer(leaders=(1, 2, 3, 1), batch_bytes=1024)
    parts = []
    for _ in range(40):
        b = core.send("t", b"s" * 100, None, None, None, 1, 0, 4)
        parts.append(b.partition)
    runs = [parts[0]]
    for p in parts[1:]:
        if p != runs[-1]:
            runs.append(p)
    # ~7 records of 100 bytes fill a 1 KiB batch; each new batch is on another partition.
    assert len(runs) >= 5 and all(a != b for a, b in zip(runs, runs[1:]))
    assert all(q.waiting[0].record_count >= 6 or len(q.waiting) == 1
               for q in core.accumulator._queues["t"].values())


@pytest.mark.parametrize("core_class", [ClientCore, ProducerCore, ConsumerCore, AdminCore, GroupCore])
def test_every_request_kind_has_an_answer_and_a_failure_handler(core_class):
    kinds = set(core_class.RESPONSE_HANDLERS)
    assert kinds == set(core_class.FAILURE_HANDLERS)
    assert {"metadata", "call"} <= kinds
    for fn in [*core_class.RESPONSE_HANDLERS.values(), *core_class.FAILURE_HANDLERS.values()]:
        assert callable(fn) and getattr(core_class, fn.__name__) is fn  # a method of the class


def test_fixed_identity_asks_no_producer_id_and_a_sequence_error_keeps_it():
    core = producer(producer_identity=((1 << 62) + 5, 0), linger_ms=None)
    acts = core.poll(0)
    assert not sends(acts, "init_producer_id")
    [md] = sends(acts, "metadata")
    core.on_response(-1, metadata_answer(md.request["id"], [1]), 0)
    b = core.send("t", b"v", None, None, 0, 1, 0, 1)
    assert not sends(core.poll(10**7), "produce")  # linger_ms=None: not sent until flushed
    core.begin_flush()
    [req] = sends(core.poll(10**7), "produce")
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == ((1 << 62) + 5, 0, 0)
    core.on_response(1, {"id": req.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "error": {"code": "OUT_OF_ORDER_SEQUENCE_NUMBER", "message": ""}}]}, 2)
    assert isinstance(b.future.error, OutOfOrderSequenceNumberError)
    assert not sends(core.poll(3), "init_producer_id")
    b2 = core.send("t", b"w", None, None, 0, 1, 3, 1)
    sends(core.poll(4), "produce")
    assert (b2.producer_id, b2.base_sequence) == ((1 << 62) + 5, 1)
    with pytest.raises(ValueError, match="producer_identity"):
        producer(producer_identity=(5, 0), enable_idempotence=False, acks=1)


def test_fixed_identity_resends_only_the_tail_the_leader_lacks():
    from partition.batch import decode_batch

    core = producer(producer_identity=((1 << 62) + 9, 0), linger_ms=None)
    [md] = sends(core.poll(0), "metadata")
    core.on_response(-1, metadata_answer(md.request["id"], [1]), 0)
    futs = [core.send("t", b"v%d" % i, None, None, 0, 100 + i, 0, 1) for i in range(3)]
    b = futs[0]
    core.begin_flush()
    [req] = sends(core.poll(1), "produce")
    # An earlier run of this identity wrote sequences 0-1 (cut elsewhere): resume at 2.
    core.on_response(1, {"id": req.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "error": {"code": "OUT_OF_ORDER_SEQUENCE_NUMBER",
                                                 "message": "", "expected_sequence": 2}}]}, 2)
    assert not b.done
    [again] = sends(core.poll(2), "produce")
    h, records = decode_batch(again.request["partitions"][0]["records"])
    assert (h.producer_id, h.base_sequence, [r.value for r in records]) == ((1 << 62) + 9, 2, [b"v2"])
    assert records[0].timestamp == 102
    core.on_response(1, {"id": again.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "base_offset": 40}]}, 3)
    assert [ProducerCore.record_result(b, i) for i in range(3)] == [(0, -1), (0, -1), (0, 40)]
    # An expected sequence outside the batch is a real gap: the batch fails.
    b2 = core.send("t", b"w", None, None, 0, 1, 3, 1)
    [req2] = sends(core.poll(4), "produce")
    core.on_response(1, {"id": req2.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "error": {"code": "OUT_OF_ORDER_SEQUENCE_NUMBER",
                                                 "message": "", "expected_sequence": 9}}]}, 5)
    assert isinstance(b2.future.error, OutOfOrderSequenceNumberError)


# ---- request_timeout_ms (per request) vs delivery_timeout_ms (per record): issue 39 ----


def drive(core, start_ms, until_ms, *, leaders=(1,), answer_produce=None, step_ms=50):
    """Poll the core every step_ms (a mock clock) from start_ms up to until_ms, answering
    metadata with `leaders` and reporting every Close as a lost connection, as a shell
    does; produce requests go to `answer_produce(send, now_ms)` (None: never answered).
    Returns the produce sends seen, with the time each was sent."""
    seen = []
    now = start_ms
    while now <= until_ms:
        for a in core.poll(now):
            if isinstance(a, Close):
                core.on_disconnect(a.broker_id, now)
            elif a.request["op"] == "metadata":
                core.on_response(a.broker_id, metadata_answer(a.request["id"], list(leaders)), now)
            elif a.request["op"] == "produce":
                seen.append((now, a))
                if answer_produce is not None:
                    answer_produce(a, now)
        now += step_ms
    return seen


def test_a_request_timeout_is_retried_with_the_same_bytes_and_a_duplicate_counts_as_written():
    core = ready_producer(leaders=(1,), request_timeout_ms=2000, delivery_timeout_ms=60_000)
    b = core.send("t", b"v", None, None, 0, 1, 0, 1)
    [(_, first)] = drive(core, 0, 2999)  # sent at 0; nothing answers
    assert first.request["timeout_ms"] == 2000 and not b.done
    # The client's deadline (the request's timeout plus 1 s for the trip) passes: the
    # connection closes, the batch may have been written and is retried, not failed.
    retries = drive(core, 3000, 6000, answer_produce=lambda s, now: core.on_response(1, {
        "id": s.request["id"], "ok": True, "partitions": [{"topic": "t", "partition": 0, "error": {
            "code": "DUPLICATE_SEQUENCE_NUMBER", "message": ""}}]}, now))
    assert len(retries) == 1
    _, again = retries[0]
    assert again.request["partitions"][0]["records"] == first.request["partitions"][0]["records"]
    assert b.maybe_written and b.attempts == 2
    assert b.done and b.future.error is None  # the first attempt was written: acknowledged once


def test_a_batch_fails_only_after_delivery_timeout_ms_with_an_unknown_outcome():
    core = ready_producer(leaders=(1,), request_timeout_ms=2000, delivery_timeout_ms=30_000)
    b = core.send("t", b"v", None, None, 0, 1, 0, 1)
    sent = drive(core, 0, 26_000)
    assert not b.done and len(sent) >= 6  # request after request timed out and was retried
    assert all(s.request["timeout_ms"] <= 2000 for _, s in sent)
    sent += drive(core, 26_050, 32_000)
    assert b.done and isinstance(b.future.error, RequestTimedOutError)  # may have been written
    last_at, last = sent[-1]
    # No attempt is sent asking for more time than the record has left.
    assert last_at + last.request["timeout_ms"] <= 30_000


def test_a_batch_that_overtook_an_acknowledged_one_is_retried_not_failed():
    core, r1, r2, b1, b2 = two_batches_in_flight()
    # The leader got r2 first (it expected b1's sequence), then r1; r1's ack comes first.
    core.on_response(1, {"id": r1.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "base_offset": 0}]}, 2)
    core.on_response(1, {"id": r2.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "error": {"code": "OUT_OF_ORDER_SEQUENCE_NUMBER", "message": "",
                                                 "expected_sequence": b1.base_sequence}}]}, 2)
    assert b1.future.result == 0 and not b2.done
    acts = core.poll(2000)
    assert not sends(acts, "init_producer_id")  # the producer id is kept: nothing is broken
    [again] = sends(acts, "produce")
    assert again.request["partitions"][0]["records"] == b2.payload
    core.on_response(1, {"id": again.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "base_offset": b1.record_count}]}, 2001)
    assert b2.future.result == b1.record_count
    # A gap the leader cannot fill (it expects a sequence past the batch) still fails it.
    [r3] = sends(core.poll(2002), "produce")
    b3 = core._pending[r3.request["id"]].ctx[0]
    assert b3.base_sequence == b2.base_sequence + b2.record_count
    core.on_response(1, {"id": r3.request["id"], "ok": True, "partitions": [
        {"topic": "t", "partition": 0, "error": {"code": "OUT_OF_ORDER_SEQUENCE_NUMBER", "message": "",
                                                 "expected_sequence": b3.base_sequence + 50}}]}, 2003)
    assert isinstance(b3.future.error, OutOfOrderSequenceNumberError)


def test_batches_reordered_at_the_leader_are_all_retried_whatever_order_their_answers_come_in():
    """The node of issue 39 ran pipelined requests in any order: of four batches the leader
    appended b1 and refused b2, b3, b4 (each expecting the sequence after the last it had).
    b3's refusal comes first, then b1's ack, then b2's and b4's: nothing fails, the producer
    id is kept, and the retries go out one by one in sequence order."""
    core = ready_producer(leaders=(1,), batch_bytes=256)
    for _ in range(12):
        core.send("t", b"x" * 80, None, None, 0, 1, 0, 1)
    reqs = [sends(core.poll(1), "produce")[0] for _ in range(4)]
    b1, b2, b3, b4 = (core._pending[r.request["id"]].ctx[0] for r in reqs)

    def refuse(req, expected, now):
        core.on_response(1, {"id": req.request["id"], "ok": True, "partitions": [
            {"topic": "t", "partition": 0, "error": {"code": "OUT_OF_ORDER_SEQUENCE_NUMBER", "message": "",
                                                     "expected_sequence": expected}}]}, now)

    def ack(req, offset, now):
        core.on_response(1, {"id": req.request["id"], "ok": True, "partitions": [
            {"topic": "t", "partition": 0, "base_offset": offset}]}, now)

    refuse(reqs[2], b1.base_sequence, 2)
    ack(reqs[0], 0, 3)
    refuse(reqs[1], b1.base_sequence, 4)
    refuse(reqs[3], b2.base_sequence, 5)
    assert not any(b.done for b in (b2, b3, b4)) and b1.future.result == 0
    offset, now = b1.record_count, 5
    for b in (b2, b3, b4):
        now += 2000
        acts = core.poll(now)
        assert not sends(acts, "init_producer_id")
        [again] = sends(acts, "produce")
        assert again.request["partitions"][0]["records"] == b.payload  # alone, in sequence order
        ack(again, offset, now)
        assert b.future.result == offset
        offset += b.record_count
