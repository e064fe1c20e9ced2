"""The client of a fault-injection run: one `Client` per history process, over raftlog's
blocking client (a Producer with acks=all and idempotence, a Consumer with manual assignment
or in a consumer group), driven from trio through worker threads.

Ops and completions are exactly `jepsen_style_tests.history`'s shapes:

* ``send [key, v]`` -> ok ``[key, [offset, v]]``; fail ``[key, v]`` (a `RejectedError` error: the
  record was definitely not written); info ``[key, [None, v]]`` (unknown: timeouts, lost
  connections, `UnknownOutcomeError`, anything else). The record's value is ``str(v)`` in ASCII,
  sent to the key's partition.
* ``poll`` (extra ``poll_ms``) -> ok ``{key: [[offset, v], ...]}`` with extra ``positions``
  (``{key: next offset to fetch}`` for the assigned keys whose position is known).
* ``assign [key, ...]`` (extra ``seek_to_beginning``) -> ok ``[key, ...]``. A group consumer
  is closed first (it leaves its group): a consumer is either assigned or subscribed.
* ``subscribe [key, ...]`` (extra ``group``) -> ok ``[key, ...]``: the group consumer
  subscribes to the keys' topics (a plain consumer, or one of another group, is closed
  first). Joining happens inside the next ``poll``, as in Kafka.
* ``commit`` ``None`` or ``{key: offset}`` -> ok ``{key: offset}`` committed (``None``: the
  position of every key the member owns). Fenced by the member's generation; with no
  generation (never joined, or reset by a failed heartbeat) it completes ``fail``
  ``no-generation`` rather than sending an unfenced commit (and ``info``
  ``generation-changed`` if the member was reset while committing); without a subscription
  ``fail`` ``not-subscribed``.
* ``end-offsets [key, ...]`` -> ok ``{key: high_watermark}``.
* ``crash`` -> info (the client is dropped; the runner rebuilds it).

Completions of ops on a subscribed consumer (``subscribe``, ``poll``, ``commit``) carry the
group extras ``group``, ``member_id``, ``generation_id`` (``None`` while the member is in no
generation) and ``assignment`` (keys owned), and ``rebalance_log`` when the assignment changed
during the op: one ``{"generation_id", "member_id", "keys"}`` per assignment received (the keys
owned after it). Revocations are not logged as claims: under cooperative-sticky a revoked key
is no longer owned in the new generation. ``offset-fetch`` still completes ``fail``
``unsupported``.

Bounds: every op is bounded by the client's own deadlines (`send_timeout_ms`, `poll_ms` +
`request_timeout_ms`). The runner also bounds each op and each close (`runner.OP_TIMEOUT_S`):
cancelled, `invoke` and `close` return at once and leave the worker thread behind with the
client, which the runner then drops without using it again. Concurrency: one op at a time
per `Client` (the runner guarantees it).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import trio

from raftlog.client import Consumer, Producer
from raftlog.base.errors import RaftlogError, RejectedError

from .history import Op, key_of, parse_key

__all__ = ["Client", "ClientOptions", "error_code"]

log = logging.getLogger(__name__)


class ClientOptions:
    """Timeouts of one client (milliseconds)."""

    def __init__(self, *, send_timeout_ms: int = 6000, request_timeout_ms: int = 3000, position_timeout_ms: int = 200,
                 session_timeout_ms: int = 6000, heartbeat_interval_ms: int = 1000,
                 max_poll_interval_ms: int = 10_000, partition_assignment_strategy: str = "range",
                 security: Any = None):
        self.security = security  # a secure cluster's client settings (`--secure`), else None
        self.send_timeout_ms = send_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.position_timeout_ms = position_timeout_ms
        # Group timing: max_poll_interval_ms is also the rebalance timeout, so it bounds how
        # long a join (inside a poll op) waits for the other members.
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.partition_assignment_strategy = partition_assignment_strategy


def error_code(exc: BaseException) -> str:
    """A stable code for an exception: a RaftlogError's `code`, else its class name."""
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) else type(exc).__name__


def _tp(key: str) -> tuple[str, int]:
    return parse_key(key)


def _decode(value: bytes | None) -> Any:
    if value is None:
        return None
    text = value.decode("ascii", errors="replace")
    return int(text) if text.lstrip("-").isdigit() else text


class Client:
    """One history process's connection to the cluster (see the module docstring)."""

    def __init__(self, bootstrap: Sequence[str], *, options: ClientOptions | None = None):
        self.bootstrap = list(bootstrap)
        self.options = options or ClientOptions()
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._assigned: list[str] = []
        self._group_id: str | None = None  # set while self._consumer is a group consumer
        self._rebalance_log: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ lifecycle

    def _get_producer(self) -> Producer:
        if self._producer is None:
            o = self.options
            self._producer = Producer(
                self.bootstrap, acks="all", enable_idempotence=True, linger_ms=0, security=o.security,
                delivery_timeout_ms=o.send_timeout_ms, request_timeout_ms=o.request_timeout_ms,
                max_block_ms=o.send_timeout_ms,
            )  # fmt: skip
        return self._producer

    def _get_consumer(self) -> Consumer:
        if self._group_id is not None:
            self._close_consumer()  # assigned and subscribed consumers do not mix
        if self._consumer is None:
            self._consumer = Consumer(
                self.bootstrap, auto_offset_reset="earliest", request_timeout_ms=self.options.request_timeout_ms,
                security=self.options.security,
            )
        return self._consumer

    def _get_group_consumer(self, group_id: str) -> Consumer:
        if self._consumer is not None and self._group_id != group_id:
            self._close_consumer()
        if self._consumer is None:
            o = self.options
            self._consumer = Consumer(
                self.bootstrap, group_id=group_id, auto_offset_reset="earliest", security=o.security,
                request_timeout_ms=o.request_timeout_ms, session_timeout_ms=o.session_timeout_ms,
                heartbeat_interval_ms=o.heartbeat_interval_ms, max_poll_interval_ms=o.max_poll_interval_ms,
                partition_assignment_strategy=o.partition_assignment_strategy, enable_auto_commit=False,
            )  # fmt: skip
            self._group_id = group_id
            self._assigned = []
        return self._consumer

    def _close_consumer(self) -> None:
        consumer, self._consumer = self._consumer, None
        self._group_id = None
        self._assigned = []
        if consumer is not None:
            consumer.close()

    def close_sync(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.close(timeout=0.5)
            except RaftlogError as exc:
                log.debug("producer close: %r", exc)
        self._close_consumer()

    async def close(self) -> None:
        await trio.to_thread.run_sync(self.close_sync, abandon_on_cancel=True)

    # ------------------------------------------------------------------ ops

    async def invoke(self, op: Op) -> tuple[str, Any, str | None, dict[str, Any]]:
        """Performs `op`; returns ``(type, value, error, extra)`` of its completion."""
        return await trio.to_thread.run_sync(self.invoke_sync, op, abandon_on_cancel=True)

    def invoke_sync(self, op: Op) -> tuple[str, Any, str | None, dict[str, Any]]:
        """The blocking twin of `invoke` (runs in a worker thread)."""
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
        except RejectedError as exc:
            return "fail", op.value, error_code(exc), self._group_facts()
        except Exception as exc:  # noqa: BLE001 - every unexpected outcome is info (unknown)
            log.debug("%s failed: %r", f, exc)
            return "info", op.value, error_code(exc), self._group_facts()
        finally:
            self._rebalance_log = []
        return "fail", op.value, "unknown-op", {}

    def _send(self, value: Any) -> tuple[str, Any, str | None, dict[str, Any]]:
        key, v = value[0], value[1]
        topic, partition = _tp(key)
        try:
            future = self._get_producer().send(topic, str(v).encode("ascii"), partition=partition)
            got_partition, offset = future.result(timeout=self.options.send_timeout_ms / 1000 + 1.0)
        except RejectedError as exc:
            return "fail", [key, v], error_code(exc), {}
        except Exception as exc:  # noqa: BLE001 - timeouts, lost connections, anything: unknown
            return "info", [key, [None, v]], error_code(exc), {}
        if got_partition != partition:
            return "info", [key, [None, v]], "wrong-partition", {}
        return "ok", [key, [offset, v]], None, {}

    def _poll(self, poll_ms: int) -> tuple[str, Any, str | None, dict[str, Any]]:
        # A subscribed consumer polls as it is (joining the group inside poll); else assigned.
        consumer = self._consumer if self._consumer is not None and self._group_id is not None else self._get_consumer()
        records = consumer.poll(timeout_ms=poll_ms)
        out: dict[str, list[list[Any]]] = {}
        for record in records:
            out.setdefault(f"{record.topic}-{record.partition}", []).append([record.offset, _decode(record.value)])
        keys = self._assigned if self._group_id is None else self._owned_keys()
        positions: dict[str, int] = {}
        for key in keys:
            try:
                positions[key] = consumer.position(_tp(key), timeout_ms=self.options.position_timeout_ms)
            except RaftlogError:
                continue  # unknown position: report none for this key (a fact, not a failure)
        return "ok", out, None, {"positions": positions, **self._group_facts()}

    def _assign(self, keys: list[str], seek_to_beginning: bool) -> tuple[str, Any, str | None, dict[str, Any]]:
        consumer = self._get_consumer()
        consumer.assign([_tp(k) for k in keys])
        if seek_to_beginning:
            consumer.seek_to_beginning()
        self._assigned = list(keys)
        return "ok", list(keys), None, {}

    def _end_offsets(self, keys: list[str]) -> tuple[str, Any, str | None, dict[str, Any]]:
        # A throwaway consumer: seek_to_end resolves each high watermark (list_offsets -1).
        with Consumer(self.bootstrap, request_timeout_ms=self.options.request_timeout_ms,
                      security=self.options.security) as consumer:
            consumer.assign([_tp(k) for k in keys])
            consumer.seek_to_end()
            ends = {k: consumer.position(_tp(k), timeout_ms=self.options.request_timeout_ms) for k in keys}
        return "ok", ends, None, {}

    # ------------------------------------------------------------------ groups

    def _group_meta(self) -> Any:
        consumer = self._consumer
        return consumer.group_metadata() if consumer is not None and self._group_id is not None else None

    def _owned_keys(self) -> list[str]:
        meta = self._group_meta()
        return [] if meta is None else sorted(key_of(t, p) for t, p in meta.assignment)

    def _generation(self) -> tuple[int | None, str | None, list[str]]:
        """``(generation_id, member_id, keys owned)``; generation None unless one consistent,
        confirmed generation was read (the heartbeat thread may reset the member meanwhile)."""
        meta = self._group_meta()
        if meta is None:
            return None, None, []
        again = self._group_meta()
        keys = sorted(key_of(t, p) for t, p in meta.assignment)
        if again.generation_id != meta.generation_id or meta.generation_id < 0 or not meta.member_id:
            return None, meta.member_id or None, keys
        return meta.generation_id, meta.member_id, keys

    def _group_facts(self) -> dict[str, Any]:
        if self._group_id is None:
            return {}
        generation, member, keys = self._generation()
        facts: dict[str, Any] = {"group": self._group_id, "member_id": member, "generation_id": generation,
                                 "assignment": keys}  # fmt: skip
        if self._rebalance_log:
            facts["rebalance_log"] = list(self._rebalance_log)
        return facts

    def _on_assigned(self, _partitions: Any) -> None:
        # Runs in this client's thread, inside poll (the join is the caller's, not the
        # heartbeat thread's): log the whole assignment of the generation just confirmed.
        generation, member, keys = self._generation()
        self._rebalance_log.append({"generation_id": generation, "member_id": member, "keys": keys})

    def _subscribe(self, keys: list[str], group_id: str) -> tuple[str, Any, str | None, dict[str, Any]]:
        consumer = self._get_group_consumer(group_id)
        topics = sorted({_tp(k)[0] for k in keys})
        consumer.subscribe(topics, on_assigned=self._on_assigned)
        return "ok", list(keys), None, self._group_facts()

    def _commit(self, value: Any) -> tuple[str, Any, str | None, dict[str, Any]]:
        consumer = self._consumer
        if self._group_id is None or consumer is None:
            return "fail", value, "not-subscribed", {}
        generation, _member, owned = self._generation()
        if generation is None:
            return "fail", value, "no-generation", self._group_facts()
        if value is None:
            offsets: dict[str, int] = {}
            for key in owned:
                try:
                    offsets[key] = consumer.position(_tp(key), timeout_ms=self.options.position_timeout_ms)
                except RaftlogError:
                    continue  # no known position: nothing to commit for this key
        else:
            offsets = {str(k): int(o) for k, o in dict(value).items()}
        if offsets:
            consumer.commit({_tp(k): o for k, o in offsets.items()})
            if self._generation()[0] != generation:
                # The heartbeat thread reset the member meanwhile: the commit may have gone
                # out unfenced (generation -1), so whether it counts is unknown.
                return "info", dict(sorted(offsets.items())), "generation-changed", self._group_facts()
        return "ok", dict(sorted(offsets.items())), None, self._group_facts()
