"""The ``txn`` workload's client and generator: Kafka transactions through confluent-kafka.

`TxnClient` is a `kafka_client.KafkaClient` whose consumer reads ``read_committed`` and whose
producer is transactional, with ``transactional.id`` ``jepsen-txn-<worker>``: the worker's id
outlives its processes, so the client that replaces one that crashed (ended ``info``) is the
same producer restarted — its ``init_transactions`` bumps the epoch, fences the old one and
ends what it left open, as a restarted Kafka application does.

Ops (shapes in `txn_checker`): ``poll``, ``assign``, ``end-offsets``, ``crash`` as the Kafka
client's (read_committed); ``txn`` ``[["poll"]?, ["send", key, v], ...]``: begin, poll the
consumer (consume-transform-produce), produce each value to its partition, wait for every
delivery report, then commit — or abort, when the op says ``abort`` (on purpose, error
``aborted``) or an error says the transaction must abort (``txn_requires_abort``, then the
error's name). ``ok`` with every offset after a commit; ``fail`` after an abort that returned;
``info`` for everything else (a commit that timed out may have committed): the client is
retired and its successor restarts the producer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from . import generator as g
from .client import ClientOptions, _tp
from .kafka_client import KafkaClient, _error_name
from .history import Op

__all__ = ["TxnClient", "txns", "TRANSACTION_TIMEOUT_MS"]

log = logging.getLogger(__name__)

# The coordinator aborts a transaction whose producer went silent this long (a crashed client,
# a paused node): short, so a crash does not hold the LSO (and every read_committed reader) back.
TRANSACTION_TIMEOUT_MS = 10_000
TXN_OP_TIMEOUT_S = 10.0  # init_transactions, commit, abort: each bounded by this


class TxnClient(KafkaClient):
    """One history process: a transactional producer and a read_committed consumer."""

    takes_worker = True  # the runner passes `worker` (the history process modulo concurrency)

    def __init__(self, bootstrap: Sequence[str], *, options: ClientOptions | None = None, worker: int = 0):
        super().__init__(bootstrap, options=options)
        self.transactional_id = f"jepsen-txn-{worker}"

    def _new_consumer(self, group_id: str, **extra: Any) -> Any:
        return super()._new_consumer(group_id, **{"isolation.level": "read_committed", **extra})

    def _get_producer(self) -> Any:
        if self._producer is None:
            o = self.options
            producer = self._ck.Producer({
                **self._common(), "transactional.id": self.transactional_id, "acks": "all", "linger.ms": 5,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS, "message.timeout.ms": o.send_timeout_ms,
                "request.timeout.ms": o.request_timeout_ms,
            })  # fmt: skip
            producer.init_transactions(TXN_OP_TIMEOUT_S)
            self._producer = producer
        return self._producer

    def close_sync(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.flush(0.5)  # raises in a fatal transactional state: it goes all the same
            except (self._ck.KafkaException, RuntimeError) as exc:
                log.debug("transactional producer closed in %r", exc)
        self._close_consumer()

    def invoke_sync(self, op: Op) -> tuple[str, Any, str | None, dict[str, Any]]:
        if op.f == "txn":
            return self._txn(list(op.value), bool(op.get("abort", False)), int(op.get("poll_ms", 100)))
        if op.f == "send":
            return "fail", op.value, "unsupported", {}  # this workload writes in transactions only
        return super().invoke_sync(op)

    def _read(self, poll_ms: int) -> tuple[dict[str, list[list[Any]]], dict[str, int]]:
        if self._consumer is None or not self._assigned:
            return {}, {}
        _, reads, _, extra = self._poll(poll_ms)
        return reads, dict(extra.get("positions") or {})

    def _txn(self, micro: list[list[Any]], abort: bool, poll_ms: int) -> tuple[str, Any, str | None, dict[str, Any]]:
        ck = self._ck
        sends = [(str(m[1]), m[2]) for m in micro if m[0] == "send"]
        polled = any(m[0] == "poll" for m in micro)
        reads: dict[str, list[list[Any]]] = {}
        positions: dict[str, int] = {}
        reports: dict[int, tuple[Any, Any]] = {}

        def value(offsets: bool) -> list[list[Any]]:
            done: list[list[Any]] = [["poll", reads]] if polled else []
            for i, (key, v) in enumerate(sends):
                msg = reports.get(i, (None, None))[1]
                done.append(["send", key, [msg.offset() if offsets and msg is not None else None, v]])
            return done

        def extra() -> dict[str, Any]:
            return {"positions": positions} if polled else {}

        try:
            producer = self._get_producer()
        except (ck.KafkaException, RuntimeError) as exc:
            self.close_sync()
            return "info", value(False), _name(exc), {}
        began = False
        try:
            producer.begin_transaction()
            began = True
            if polled:
                reads, positions = self._read(poll_ms)
            for i, (key, v) in enumerate(sends):
                topic, partition = _tp(key)
                producer.produce(topic, str(v).encode("ascii"), partition=partition,
                                 on_delivery=lambda err, msg, i=i: reports.__setitem__(i, (err, msg)))
            producer.flush(self.options.send_timeout_ms / 1000 + 1.0)
            failed = [err for err, _ in reports.values() if err is not None]
            if abort or failed or len(reports) < len(sends):
                why = "aborted" if abort else (_error_name(failed[0]) if failed else "no-delivery-report")
                producer.abort_transaction(TXN_OP_TIMEOUT_S)
                return "fail", value(False), why, extra()
            producer.commit_transaction(TXN_OP_TIMEOUT_S)
        except ck.KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if began and err is not None and getattr(err, "txn_requires_abort", lambda: False)():
                try:
                    producer.abort_transaction(TXN_OP_TIMEOUT_S)
                    return "fail", value(False), _error_name(err), extra()
                except ck.KafkaException as abort_exc:
                    log.debug("abort after %r: %r", err, abort_exc)
            return "info", value(False), _name(exc), extra()
        except (BufferError, RuntimeError) as exc:
            return "info", value(False), type(exc).__name__, extra()
        if any(msg is None or msg.partition() != _tp(key)[1] for (key, _), (_, msg) in
               zip(sends, (reports[i] for i in range(len(sends))))):
            return "info", value(False), "wrong-partition", extra()
        return "ok", value(True), None, extra()


def _name(exc: BaseException) -> str:
    err = exc.args[0] if getattr(exc, "args", None) else None
    return _error_name(err) if err is not None and hasattr(err, "name") else type(exc).__name__


@dataclass(frozen=True)
class _Txns(g.Generator):
    keys: tuple[str, ...]
    next_value: int
    abort_p: float
    poll_p: float
    max_sends: int

    def op(self, ctx: g.Context) -> g.Step | None:
        if not ctx.free:
            return g.Pending(), self
        n = ctx.rng.randint(1, self.max_sends)
        micro: list[list[Any]] = [["poll"]] if ctx.rng.random() < self.poll_p else []
        micro += [["send", ctx.rng.choice(self.keys), self.next_value + i] for i in range(n)]
        spec = {"f": "txn", "value": micro, "abort": ctx.rng.random() < self.abort_p}
        return g._invoke(ctx, spec), replace(self, next_value=self.next_value + n)


def txns(keys: Sequence[str], *, first_value: int = 0, abort_p: float = 0.2, poll_p: float = 0.5,
         max_sends: int = 4) -> g.Generator:
    """Infinite ``txn`` ops: 1..`max_sends` appends of unique ints to random keys, a poll first
    with probability `poll_p`, aborted on purpose with probability `abort_p`."""
    if not keys:
        raise g.GeneratorError("txns needs at least one key")
    return _Txns(tuple(keys), first_value, abort_p, poll_p, max_sends)
