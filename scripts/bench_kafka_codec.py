"""Kafka codec choice: decode and encode cost of Produce and Fetch with kio against
kafka-python 3.x's schema classes (the two codecs generated from Kafka's message schemas).

    scripts/bench kafka_codec [--runs 5] [--partitions 6] [--records-bytes 16384]
    (also: scripts/bench kafka --codec ...; needs `pip install kio`, which is no dependency)

What the broker does per request: decode a Produce request (v9, flexible, as librdkafka
sends) and encode its response; decode a Fetch request (v12) and encode its response (whose
records fields are the bulk). Prints the median microseconds per operation of each codec and
the ratio kio / kafka-python (< 1: kio is faster).
"""

from __future__ import annotations

import argparse
import datetime
import io
import os
import statistics
import time
from collections.abc import Callable

PRODUCE_V = 9
FETCH_V = 12


def _time_us(fn: Callable[[], object], repeat: int) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - started) / repeat * 1e6


def kafka_python_cases(partitions: int, records: bytes, fetch_records: bytes) -> dict[str, Callable[[], object]]:
    from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
    from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

    T = ProduceRequest.TopicProduceData
    R = ProduceResponse.TopicProduceResponse
    F = FetchRequest.FetchTopic
    FR = FetchResponse.FetchableTopicResponse
    preq = ProduceRequest[PRODUCE_V](
        transactional_id=None, acks=-1, timeout_ms=30000,
        topic_data=[T(name="t", partition_data=[
            T.PartitionProduceData(index=i, records=records) for i in range(partitions)])],
    )  # fmt: skip
    preq_bytes = preq.encode()

    def produce_response():
        return ProduceResponse[PRODUCE_V](
            responses=[R(name="t", partition_responses=[
                R.PartitionProduceResponse(index=i, error_code=0, base_offset=1000 * i, log_append_time_ms=-1,
                 log_start_offset=0, record_errors=[], error_message=None)
                for i in range(partitions)])],
            throttle_time_ms=0,
        ).encode()  # fmt: skip

    freq = FetchRequest[FETCH_V](
        replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=50 << 20, isolation_level=0,
        session_id=0, session_epoch=-1,
        topics=[F(topic="t", partitions=[
            F.FetchPartition(partition=i, current_leader_epoch=-1, fetch_offset=0,
             last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
            for i in range(partitions)])],
        forgotten_topics_data=[], rack_id="",
    )  # fmt: skip
    freq_bytes = freq.encode()

    def fetch_response():
        return FetchResponse[FETCH_V](
            throttle_time_ms=0, error_code=0, session_id=0,
            responses=[FR(topic="t", partitions=[
                FR.PartitionData(partition_index=i, error_code=0, high_watermark=10, last_stable_offset=10,
                 log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
                 records=fetch_records) for i in range(partitions)])],
        ).encode()  # fmt: skip

    return {
        "produce.decode_request": lambda: ProduceRequest[PRODUCE_V].decode(preq_bytes),
        "produce.encode_response": produce_response,
        "fetch.decode_request": lambda: FetchRequest[FETCH_V].decode(freq_bytes),
        "fetch.encode_response": fetch_response,
    }


def kio_cases(partitions: int, records: bytes, fetch_records: bytes) -> dict[str, Callable[[], object]]:
    try:
        import kio  # noqa: F401
    except ImportError:
        raise SystemExit("kio is not installed (not a dependency): .venv/bin/pip install kio==0.6.5")
    from kio.schema.fetch.v12 import request as fq, response as fr
    from kio.schema.produce.v9 import request as pq, response as pr
    from kio.serial import entity_reader, entity_writer
    from kio.schema.errors import ErrorCode
    from kio.static.primitive import i16, i32, i32Timedelta, i64

    preq = pq.ProduceRequest(
        transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=(pq.TopicProduceData(name="t", partition_data=tuple(
            pq.PartitionProduceData(index=i32(i), records=records) for i in range(partitions))),),
    )  # fmt: skip
    buf = io.BytesIO()
    entity_writer(pq.ProduceRequest)(buf, preq)
    preq_bytes = buf.getvalue()
    read_preq = entity_reader(pq.ProduceRequest)
    write_presp = entity_writer(pr.ProduceResponse)
    write_fresp = entity_writer(fr.FetchResponse)
    fw = entity_writer(fq.FetchRequest)
    freq = fq.FetchRequest(
        replica_id=i32(-1), max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)),
        min_bytes=i32(1), max_bytes=i32(50 << 20), isolation_level=0, session_id=i32(0),
        session_epoch=i32(-1),
        topics=(fq.FetchTopic(topic="t", partitions=tuple(
            fq.FetchPartition(partition=i32(i), current_leader_epoch=i32(-1), fetch_offset=i64(0),
                              last_fetched_epoch=i32(-1), log_start_offset=i64(-1),
                              partition_max_bytes=i32(1 << 20)) for i in range(partitions))),),
        forgotten_topics_data=(), rack_id="",
    )  # fmt: skip
    buf = io.BytesIO()
    fw(buf, freq)
    freq_bytes = buf.getvalue()
    read_freq = entity_reader(fq.FetchRequest)

    def produce_response():
        out = io.BytesIO()
        write_presp(out, pr.ProduceResponse(
            responses=(pr.TopicProduceResponse(name="t", partition_responses=tuple(
                pr.PartitionProduceResponse(index=i32(i), error_code=ErrorCode.none, base_offset=i64(1000 * i),
                                            log_append_time=None, log_start_offset=i64(0),
                                            record_errors=(), error_message=None)
                for i in range(partitions))),),
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        ))  # fmt: skip
        return out.getvalue()

    def fetch_response():
        out = io.BytesIO()
        write_fresp(out, fr.FetchResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode.none, session_id=i32(0),
            responses=(fr.FetchableTopicResponse(topic="t", partitions=tuple(
                fr.PartitionData(partition_index=i32(i), error_code=ErrorCode.none, high_watermark=i64(10),
                                 last_stable_offset=i64(10), log_start_offset=i64(0),
                                 aborted_transactions=None, preferred_read_replica=i32(-1),
                                 records=fetch_records) for i in range(partitions))),),
        ))  # fmt: skip
        return out.getvalue()

    return {
        "produce.decode_request": lambda: read_preq(preq_bytes, 0),
        "produce.encode_response": produce_response,
        "fetch.decode_request": lambda: read_freq(freq_bytes, 0),
        "fetch.encode_response": fetch_response,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=300, help="operations per run")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--records-bytes", type=int, default=16384, help="produce records per partition")
    parser.add_argument("--fetch-bytes", type=int, default=1 << 20, help="fetch records per partition")
    args = parser.parse_args()
    records = os.urandom(args.records_bytes)
    fetch_records = os.urandom(args.fetch_bytes)
    codecs = {
        "kafka-python": kafka_python_cases(args.partitions, records, fetch_records),
        "kio": kio_cases(args.partitions, records, fetch_records),
    }
    results: dict[str, dict[str, float]] = {}
    for name, cases in codecs.items():
        results[name] = {}
        for case, fn in cases.items():
            fn()  # warm up (and fail early)
            runs = [_time_us(fn, args.repeat) for _ in range(args.runs)]
            results[name][case] = statistics.median(runs)
    print(f"{'case':28} {'kafka-python us':>16} {'kio us':>10} {'kio/kp':>8}")
    for case in codecs["kio"]:
        kp, ki = results["kafka-python"][case], results["kio"][case]
        print(f"{case:28} {kp:16.1f} {ki:10.1f} {ki / kp:8.2f}")


if __name__ == "__main__":
    main()
