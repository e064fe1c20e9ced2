"""The Kafka-protocol client of a fault-injection run (workload ``kafka``): the same ops and
completions as `jepsen_style_tests.client.Client`, spoken through confluent-kafka (librdkafka)
to the nodes' Kafka listeners, so the checker judges the Kafka front door with the same rules.

* ``send [key, v]``: an idempotent producer (``enable.idempotence``, acks=all, no linger); the
  op waits for the delivery report. ok with the offset; fail for errors that say the record
  was refused (`DEFINITE_PRODUCE_ERRORS`); info for the rest (message timeouts, transport
  errors, fatal idempotence errors): the outcome is unknown.
* ``poll``: ``consume()`` for ``poll_ms``; ``positions`` from ``position()`` (the consumed
  position, not librdkafka's prefetch).
* ``assign [key, ...]``: a consumer with no group work (its own unused group id, auto commit
  off). Keys assigned before are left alone and only the difference is unassigned / assigned
  (``incremental_*``; new keys from the beginning): a plain ``assign()`` of partitions being
  fetched sometimes made librdkafka start one over from the beginning (measured: one run in
  two under the kill nemesis), which the checker rightly calls nonmonotonic. With
  ``seek_to_beginning`` (the final reads) the consumer is a fresh one. Positions reported are
  the larger of librdkafka's ``position()`` and the next offset after the last record
  returned (``position()`` is unknown until a record of the partition was returned).
* ``subscribe [key, ...]`` (extra ``group``): a group consumer (range assignor, auto commit
  off); joining happens inside later polls, as with the native client. The rebalance callback
  logs each assignment as ``rebalance_log`` (it runs inside ``consume()``, in this thread).
* ``commit`` ``None`` or ``{key: offset}``: a synchronous commit of owned keys' positions,
  fenced by librdkafka with the member's generation; ``fail`` ``no-generation`` when the member
  is in no generation, ``info`` ``generation-changed`` when it changed during the commit.
* ``end-offsets``: ``get_watermark_offsets`` from a throwaway consumer.

Group facts (``member_id``, ``generation_id``, ``assignment``): librdkafka exposes the member's
generation only inside its serialised ConsumerGroupMetadata (``consumer_group_metadata()``,
``rd_kafka_consumer_group_metadata_write``: ``b"CGMDv2:"`` + native int32 generation + group id
and member id, NUL-terminated). `group_generation` reads it and returns None for any other
layout, so a librdkafka that changes it turns the group checks off instead of feeding them
wrong facts. A generation is reported only if it reads the same before and after the
assignment is read.

Bounds: every librdkafka call has a timeout (the client's `ClientOptions`) and
``socket.timeout.ms`` bounds requests, but a consumer's close (and a synchronous commit) waits
for librdkafka without a deadline of ours. So, as with `client.Client`, the runner bounds each
op and each close (`runner.OP_TIMEOUT_S`); a cancelled `invoke` or `close` returns at once and
leaves its thread, still inside librdkafka, behind with the client. Concurrency: one op at a
time per client (the runner guarantees it).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import uuid
from collections.abc import Sequence
from typing import Any

import trio

from .client import ClientOptions, _decode, _tp
from .history import Op, key_of

__all__ = ["KafkaClient", "group_generation", "DEFINITE_PRODUCE_ERRORS"]

log = logging.getLogger(__name__)

_CGMD_MAGIC = b"CGMDv2:"

# librdkafka error names (KafkaError.name()) that mean the broker or the client refused the
# record: nothing was written. Everything else is an unknown outcome.
DEFINITE_PRODUCE_ERRORS = frozenset({
    "MSG_SIZE_TOO_LARGE", "_MSG_SIZE_TOO_LARGE", "UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC",
    "_UNKNOWN_PARTITION", "INVALID_REQUIRED_ACKS", "TOPIC_AUTHORIZATION_FAILED", "INVALID_TOPIC_EXCEPTION",
    "RECORD_LIST_TOO_LARGE", "CORRUPT_MESSAGE", "UNSUPPORTED_COMPRESSION_TYPE",
})
# Commit errors after which the offsets were certainly not stored.
DEFINITE_COMMIT_ERRORS = frozenset({
    "ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "REBALANCE_IN_PROGRESS", "FENCED_INSTANCE_ID",
    "_NO_OFFSET", "_STATE", "_ASSIGNMENT_LOST", "INVALID_COMMIT_OFFSET_SIZE", "OFFSET_METADATA_TOO_LARGE",
})


def group_generation(cgmd: bytes) -> tuple[int | None, str | None]:
    """(generation id, member id) from librdkafka's serialised group metadata; (None, None)
    for a layout we do not know."""
    if not cgmd.startswith(_CGMD_MAGIC) or len(cgmd) < len(_CGMD_MAGIC) + 4:
        return None, None
    at = len(_CGMD_MAGIC)
    generation = int.from_bytes(cgmd[at:at + 4], sys.byteorder, signed=True)
    parts = cgmd[at + 4:].split(b"\0")
    if len(parts) < 3:
        return None, None
    member = parts[1].decode("utf-8", errors="replace") or None
    return (generation if generation >= 0 else None), member


def _error_name(err: Any) -> str:
    name = getattr(err, "name", None)
    return name() if callable(name) else type(err).__name__


class KafkaClient:
    """One history process's Kafka-protocol connection (see the module docstring)."""

    def __init__(self, bootstrap: Sequence[str], *, options: ClientOptions | None = None):
        import confluent_kafka  # the test extra (and jepsen's): imported only for this workload

        self._ck = confluent_kafka
        self.bootstrap = ",".join(bootstrap)
        self.options = options or ClientOptions()
        self._producer: Any = None
        self._consumer: Any = None
        self._assigned: list[str] = []
        self._next: dict[str, int] = {}  # assigned key -> next offset to read (known ones)
        self._group_id: str | None = None
        self._topics: tuple[str, ...] | None = None  # the group consumer's subscription
        self._rebalance_log: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ lifecycle

    def _common(self) -> dict[str, Any]:
        o = self.options
        common = {"bootstrap.servers": self.bootstrap, "socket.timeout.ms": max(o.request_timeout_ms, 1000),
                  "log_level": 3}
        debug = os.environ.get("RAFTLOG_JEPSEN_RDKAFKA_DEBUG")  # e.g. "fetch,topic" (to stderr)
        if debug:
            common.update({"debug": debug, "log_level": 7})
        stats_dir = os.environ.get("RAFTLOG_JEPSEN_RDKAFKA_STATS_DIR")  # latest stats per handle
        if stats_dir:
            def write_stats(text: str) -> None:
                name = json.loads(text).get("name", "handle")
                with open(os.path.join(stats_dir, f"{name}.json"), "w") as f:
                    f.write(text)

            common.update({"statistics.interval.ms": 1000, "stats_cb": write_stats})
        return common

    def _get_producer(self) -> Any:
        if self._producer is None:
            o = self.options
            self._producer = self._ck.Producer({
                **self._common(), "enable.idempotence": True, "acks": "all", "linger.ms": 0,
                "message.timeout.ms": o.send_timeout_ms, "request.timeout.ms": o.request_timeout_ms,
            })  # fmt: skip
        return self._producer

    def _new_consumer(self, group_id: str, **extra: Any) -> Any:
        o = self.options
        return self._ck.Consumer({
            **self._common(), "group.id": group_id, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": o.session_timeout_ms,
            "heartbeat.interval.ms": o.heartbeat_interval_ms, "max.poll.interval.ms": o.max_poll_interval_ms,
            "partition.assignment.strategy": o.partition_assignment_strategy, **extra,
        })  # fmt: skip

    def _get_consumer(self) -> Any:
        if self._group_id is not None:
            self._close_consumer()  # assigned and subscribed consumers do not mix
        if self._consumer is None:
            self._consumer = self._new_consumer(f"jepsen-assign-{uuid.uuid4().hex[:12]}")
        return self._consumer

    def _get_group_consumer(self, group_id: str) -> Any:
        if self._consumer is not None and self._group_id != group_id:
            self._close_consumer()
        if self._consumer is None:
            self._consumer = self._new_consumer(group_id)
            self._group_id = group_id
            self._assigned = []
        return self._consumer

    def _close_consumer(self) -> None:
        consumer, self._consumer = self._consumer, None
        self._group_id = None
        self._topics = None
        self._assigned = []
        self._next = {}
        if consumer is not None:
            try:
                consumer.close()  # leaves the group
            except (self._ck.KafkaException, RuntimeError) as exc:
                log.debug("consumer close: %r", exc)

    def close_sync(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            left = producer.flush(0.5)
            if left:
                log.debug("producer closed with %d record(s) undelivered", left)
        self._close_consumer()

    async def close(self) -> None:
        await trio.to_thread.run_sync(self.close_sync, abandon_on_cancel=True)

    # ------------------------------------------------------------------ ops

    async def invoke(self, op: Op) -> tuple[str, Any, str | None, dict[str, Any]]:
        return await trio.to_thread.run_sync(self.invoke_sync, op, abandon_on_cancel=True)

    def invoke_sync(self, op: Op) -> tuple[str, Any, str | None, dict[str, Any]]:
        f = op.f
        if f == "send":
            return self._send(op.value)
        if f == "crash":
            self.close_sync()
            return "info", None, "crash", {}
        try:
            if f == "poll":
                return self._poll(int(op.get("poll_ms", 100)))
            if f == "assign":
                return self._assign(list(op.value), bool(op.get("seek_to_beginning", False)))
            if f == "end-offsets":
                return self._end_offsets(list(op.value))
            if f == "subscribe":
                return self._subscribe(list(op.value), str(op.get("group", "jepsen")))
            if f == "commit":
                return self._commit(op.value)
            if f == "offset-fetch":
                return "fail", op.value, "unsupported", {}
        except self._ck.KafkaException as exc:
            name = _error_name(exc.args[0]) if exc.args else "KafkaException"
            definite = f == "commit" and name in DEFINITE_COMMIT_ERRORS
            return ("fail" if definite else "info"), op.value, name, self._group_facts()
        except Exception as exc:  # noqa: BLE001 - every unexpected outcome is info (unknown)
            log.debug("%s failed: %r", f, exc)
            return "info", op.value, type(exc).__name__, self._group_facts()
        finally:
            self._rebalance_log = []
        return "fail", op.value, "unknown-op", {}

    def _send(self, value: Any) -> tuple[str, Any, str | None, dict[str, Any]]:
        key, v = value[0], value[1]
        topic, partition = _tp(key)
        report: list[tuple[Any, Any]] = []
        try:
            producer = self._get_producer()
            producer.produce(topic, str(v).encode("ascii"), partition=partition,
                             on_delivery=lambda err, msg: report.append((err, msg)))
            producer.flush(self.options.send_timeout_ms / 1000 + 1.0)
        except (self._ck.KafkaException, BufferError, RuntimeError) as exc:
            return "info", [key, [None, v]], type(exc).__name__, {}
        if not report:
            return "info", [key, [None, v]], "no-delivery-report", {}
        err, msg = report[0]
        if err is not None:
            name = _error_name(err)
            if name in DEFINITE_PRODUCE_ERRORS and not err.fatal():
                return "fail", [key, v], name, {}
            return "info", [key, [None, v]], name, {}
        if msg.partition() != partition:
            return "info", [key, [None, v]], "wrong-partition", {}
        return "ok", [key, [msg.offset(), v]], None, {}

    def _positions(self, consumer: Any, keys: list[str]) -> dict[str, int]:
        if not keys:
            return {}
        tps = consumer.position([self._ck.TopicPartition(*_tp(k)) for k in keys])
        return {key_of(tp.topic, tp.partition): tp.offset for tp in tps if tp.offset >= 0 and tp.error is None}

    def _poll(self, poll_ms: int) -> tuple[str, Any, str | None, dict[str, Any]]:
        consumer = self._consumer if self._consumer is not None and self._group_id is not None else self._get_consumer()
        out: dict[str, list[list[Any]]] = {}
        conditions: dict[str, str] = {}
        for m in consumer.consume(num_messages=500, timeout=poll_ms / 1000):
            err = m.error()
            if err is not None:
                if err.fatal():
                    raise self._ck.KafkaException(err)
                # Per-partition conditions (a leader moving, ...): not a read; kept as a fact.
                conditions[key_of(m.topic(), m.partition()) if m.topic() else "-"] = _error_name(err)
                continue
            key = key_of(m.topic(), m.partition())
            out.setdefault(key, []).append([m.offset(), _decode(m.value())])
            self._next[key] = m.offset() + 1
        if self._group_id is None:
            # librdkafka's own position moves past control batches at a log's end; ours only
            # past records returned. Either is a position the consumer really holds.
            positions = dict(self._next)
            for k, o in self._positions(consumer, self._assigned).items():
                positions[k] = max(o, positions.get(k, o))
            positions = {k: o for k, o in positions.items() if k in self._assigned}
            self._next.update(positions)
        else:
            positions = self._positions(consumer, self._owned_keys())
        extra = {"positions": positions, **self._group_facts()}
        if conditions:
            extra["consumer_errors"] = conditions
        return "ok", out, None, extra

    def _assign(self, keys: list[str], seek_to_beginning: bool) -> tuple[str, Any, str | None, dict[str, Any]]:
        tp = self._ck.TopicPartition
        if seek_to_beginning:
            # A fresh consumer: nothing of the old one's fetch state can hold a partition back
            # (a re-assign() of partitions librdkafka was fetching once left one stuck for
            # the whole final read, with no error, under the kill nemesis).
            self._close_consumer()
            consumer = self._get_consumer()
            consumer.assign([tp(*_tp(k), self._ck.OFFSET_BEGINNING) for k in keys])
            self._next = {}
        else:
            consumer = self._get_consumer()
            # Kept keys are left alone (their fetch goes on where it is); only the difference
            # is unassigned / assigned (new keys from the beginning).
            gone = [k for k in self._assigned if k not in keys]
            new = [k for k in keys if k not in self._assigned]
            if gone:
                consumer.incremental_unassign([tp(*_tp(k)) for k in gone])
            if new:
                consumer.incremental_assign([tp(*_tp(k), self._ck.OFFSET_BEGINNING) for k in new])
            self._next = {k: o for k, o in self._next.items() if k in keys}
        self._assigned = list(keys)
        return "ok", list(keys), None, {}

    def _end_offsets(self, keys: list[str]) -> tuple[str, Any, str | None, dict[str, Any]]:
        consumer = self._new_consumer(f"jepsen-ends-{uuid.uuid4().hex[:12]}")
        try:
            timeout_s = self.options.request_timeout_ms / 1000
            ends = {k: consumer.get_watermark_offsets(self._ck.TopicPartition(*_tp(k)), timeout=timeout_s)[1]
                    for k in keys}
        finally:
            consumer.close()
        return "ok", ends, None, {}

    # ------------------------------------------------------------------ groups

    def _owned_keys(self) -> list[str]:
        consumer = self._consumer
        if consumer is None or self._group_id is None:
            return []
        return sorted(key_of(tp.topic, tp.partition) for tp in consumer.assignment())

    def _generation(self) -> tuple[int | None, str | None, list[str]]:
        consumer = self._consumer
        if consumer is None or self._group_id is None:
            return None, None, []
        before = group_generation(consumer.consumer_group_metadata())
        keys = self._owned_keys()
        after = group_generation(consumer.consumer_group_metadata())
        generation, member = after
        if before != after or generation is None or not member:
            return None, member, keys
        return generation, member, keys

    def _group_facts(self) -> dict[str, Any]:
        if self._group_id is None:
            return {}
        generation, member, keys = self._generation()
        facts: dict[str, Any] = {"group": self._group_id, "member_id": member, "generation_id": generation,
                                 "assignment": keys}  # fmt: skip
        if self._rebalance_log:
            facts["rebalance_log"] = list(self._rebalance_log)
        return facts

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        # Inside consume(), in this thread: the eager assignment of the generation just synced.
        generation, member = group_generation(consumer.consumer_group_metadata())
        keys = sorted(key_of(tp.topic, tp.partition) for tp in partitions)
        self._rebalance_log.append({"generation_id": generation, "member_id": member, "keys": keys})

    def _subscribe(self, keys: list[str], group_id: str) -> tuple[str, Any, str | None, dict[str, Any]]:
        consumer = self._get_group_consumer(group_id)
        topics = tuple(sorted({_tp(k)[0] for k in keys}))
        if topics != self._topics:
            # Only a change: librdkafka answers even a same-topics subscribe() with a rejoin
            # and a fresh assignment of the same generation, restarting every partition at
            # its committed offset (re-reads the checker would call nonmonotonic). The native
            # client does not rejoin for an unchanged subscription either.
            consumer.subscribe(list(topics), on_assign=self._on_assign)
            self._topics = topics
        return "ok", list(keys), None, self._group_facts()

    def _commit(self, value: Any) -> tuple[str, Any, str | None, dict[str, Any]]:
        consumer = self._consumer
        if self._group_id is None or consumer is None:
            return "fail", value, "not-subscribed", {}
        generation, _member, owned = self._generation()
        if generation is None:
            return "fail", value, "no-generation", self._group_facts()
        offsets = self._positions(consumer, owned) if value is None else {str(k): int(o) for k, o in dict(value).items()}
        if offsets:
            done = consumer.commit(offsets=[self._ck.TopicPartition(*_tp(k), o) for k, o in offsets.items()],
                                   asynchronous=False)
            failed = [tp for tp in done or () if tp.error is not None]
            if failed:
                name = _error_name(failed[0].error)
                kind = "fail" if name in DEFINITE_COMMIT_ERRORS else "info"
                return kind, dict(sorted(offsets.items())), name, self._group_facts()
            if self._generation()[0] != generation:
                return "info", dict(sorted(offsets.items())), "generation-changed", self._group_facts()
        return "ok", dict(sorted(offsets.items())), None, self._group_facts()
