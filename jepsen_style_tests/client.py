"""The client of a fault-injection run: one `Client` per history process, over raftlog's
blocking client (a Producer with acks=all and idempotence, a Consumer with manual assignment),
driven from trio through worker threads.

Ops and completions are exactly `jepsen_style_tests.history`'s shapes:

* ``send [key, v]`` -> ok ``[key, [offset, v]]``; fail ``[key, v]`` (a `Rejected` error: the
  record was definitely not written); info ``[key, [None, v]]`` (unknown: timeouts, lost
  connections, `UnknownOutcome`, anything else). The record's value is ``str(v)`` in ASCII,
  sent to the key's partition.
* ``poll`` (extra ``poll_ms``) -> ok ``{key: [[offset, v], ...]}`` with extra ``positions``
  (``{key: next offset to fetch}`` for the assigned keys whose position is known).
* ``assign [key, ...]`` (extra ``seek_to_beginning``) -> ok ``[key, ...]``.
* ``end-offsets [key, ...]`` -> ok ``{key: high_watermark}``.
* ``crash`` -> info (the client is dropped; the runner rebuilds it).

Groups (``subscribe``/``commit``) are not supported: the client library has no group API yet;
those ops complete ``fail`` with error ``unsupported``.

Bounds: every op is bounded by the client's own deadlines (`send_timeout_ms`, `poll_ms` +
`request_timeout_ms`); the worker thread is never abandoned, so a closed client owns no
thread. Concurrency: one op at a time per `Client` (the runner guarantees it).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import trio

from raftlog.client import Consumer, Producer
from raftlog.errors import RaftlogError, Rejected

from .history import Op, parse_key

__all__ = ["Client", "ClientOptions", "error_code"]

log = logging.getLogger(__name__)


class ClientOptions:
    """Timeouts of one client (milliseconds)."""

    def __init__(self, *, send_timeout_ms: int = 6000, request_timeout_ms: int = 3000, position_timeout_ms: int = 200):
        self.send_timeout_ms = send_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.position_timeout_ms = position_timeout_ms


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

    # ------------------------------------------------------------------ lifecycle

    def _get_producer(self) -> Producer:
        if self._producer is None:
            o = self.options
            self._producer = Producer(
                self.bootstrap, acks="all", enable_idempotence=True, linger_ms=0,
                delivery_timeout_ms=o.send_timeout_ms, request_timeout_ms=o.request_timeout_ms,
                max_block_ms=o.send_timeout_ms,
            )  # fmt: skip
        return self._producer

    def _get_consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(
                self.bootstrap, auto_offset_reset="earliest", request_timeout_ms=self.options.request_timeout_ms
            )
        return self._consumer

    def close_sync(self) -> None:
        producer, self._producer = self._producer, None
        consumer, self._consumer = self._consumer, None
        if producer is not None:
            try:
                producer.close(timeout=0.5)
            except RaftlogError as exc:
                log.debug("producer close: %r", exc)
        if consumer is not None:
            consumer.close()

    async def close(self) -> None:
        await trio.to_thread.run_sync(self.close_sync)

    # ------------------------------------------------------------------ ops

    async def invoke(self, op: Op) -> tuple[str, Any, str | None, dict[str, Any]]:
        """Performs `op`; returns ``(type, value, error, extra)`` of its completion."""
        return await trio.to_thread.run_sync(self.invoke_sync, op)

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
            if f in ("subscribe", "commit", "offset-fetch"):
                return "fail", op.value, "unsupported", {}
        except Rejected as exc:
            return "fail", op.value, error_code(exc), {}
        except Exception as exc:  # noqa: BLE001 - every unexpected outcome is info (unknown)
            log.debug("%s failed: %r", f, exc)
            return "info", op.value, error_code(exc), {}
        return "fail", op.value, "unknown-op", {}

    def _send(self, value: Any) -> tuple[str, Any, str | None, dict[str, Any]]:
        key, v = value[0], value[1]
        topic, partition = _tp(key)
        try:
            future = self._get_producer().send(topic, str(v).encode("ascii"), partition=partition)
            got_partition, offset = future.result(timeout=self.options.send_timeout_ms / 1000 + 1.0)
        except Rejected as exc:
            return "fail", [key, v], error_code(exc), {}
        except Exception as exc:  # noqa: BLE001 - timeouts, lost connections, anything: unknown
            return "info", [key, [None, v]], error_code(exc), {}
        if got_partition != partition:
            return "info", [key, [None, v]], "wrong-partition", {}
        return "ok", [key, [offset, v]], None, {}

    def _poll(self, poll_ms: int) -> tuple[str, Any, str | None, dict[str, Any]]:
        consumer = self._get_consumer()
        records = consumer.poll(timeout_ms=poll_ms)
        out: dict[str, list[list[Any]]] = {}
        for record in records:
            out.setdefault(f"{record.topic}-{record.partition}", []).append([record.offset, _decode(record.value)])
        positions: dict[str, int] = {}
        for key in self._assigned:
            try:
                positions[key] = consumer.position(_tp(key), timeout_ms=self.options.position_timeout_ms)
            except RaftlogError:
                continue  # unknown position: report none for this key (a fact, not a failure)
        return "ok", out, None, {"positions": positions}

    def _assign(self, keys: list[str], seek_to_beginning: bool) -> tuple[str, Any, str | None, dict[str, Any]]:
        consumer = self._get_consumer()
        consumer.assign([_tp(k) for k in keys])
        if seek_to_beginning:
            consumer.seek_to_beginning()
        self._assigned = list(keys)
        return "ok", list(keys), None, {}

    def _end_offsets(self, keys: list[str]) -> tuple[str, Any, str | None, dict[str, Any]]:
        # A throwaway consumer: seek_to_end resolves each high watermark (list_offsets -1).
        with Consumer(self.bootstrap, request_timeout_ms=self.options.request_timeout_ms) as consumer:
            consumer.assign([_tp(k) for k in keys])
            consumer.seek_to_end()
            ends = {k: consumer.position(_tp(k), timeout_ms=self.options.request_timeout_ms) for k in keys}
        return "ok", ends, None, {}
