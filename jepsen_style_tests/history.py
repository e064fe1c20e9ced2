"""The history of a test run: every invoke and every completion, in order, as JSON lines.

The op model is Jepsen's. A history is a flat list of `Op`s; each op is an *invoke* (a process
starts an operation) or a *completion* of the invoke before it on the same process:

* ``ok``   — it happened;
* ``fail`` — it definitely did not happen (the client knows, e.g. a rejected request);
* ``info`` — unknown (timeouts, lost connections, any unexpected exception). A timeout is not
  a failure. After an ``info`` the runner retires the process and gives its worker a fresh
  process id (Jepsen's ``p + concurrency``), because the client's state is unknown too.

Fields of an `Op` (one JSON object per line, in this key order, extra keys after them sorted):

``index``     position in the history, 0-based, dense.
``type``      ``invoke`` | ``ok`` | ``fail`` | ``info``.
``process``   an int for client processes, the string ``"nemesis"`` for the fault injector.
``f``         what the op does (below).
``value``     argument of an invoke / result of a completion (shapes below).
``time_ns``   monotonic nanoseconds since the test started (the runner's trio clock).
``wall_time`` Unix seconds (float) when the runner recorded the op; for humans only.
``error``     a stable error code string on ``fail``/``info`` (``None`` otherwise).
(extra)       any other keys: op options such as ``poll_ms`` or ``seek_to_beginning``, and
              facts reported by a completion such as ``generation_id`` (kept in `Op.extra`).

A partition *key* is the string ``"<topic>-<partition>"``, e.g. ``"t-3"`` (`key_of`,
`parse_key`). Values sent are integers unique per key (the generator makes them unique for the
whole run).

Op shapes — the contract for ``client.py`` (int processes):

=================  =============================  ==============================================
f                  invoke value                   ok completion value
=================  =============================  ==============================================
``send``           ``[key, v]``                   ``[key, [offset, v]]`` (``info``:
                                                  ``[key, [None, v]]``; ``fail``: ``[key, v]``)
``poll``           ``None`` (extra ``poll_ms``)   ``{key: [[offset, v], ...], ...}``
``assign``         ``[key, ...]`` (extra          ``[key, ...]``
                   ``seek_to_beginning: bool``)
``subscribe``      ``[key, ...]`` (the client     ``[key, ...]``
                   subscribes to their topics;
                   extra ``group``)
``commit``         ``None`` (commit current       ``{key: offset}`` actually committed, where
                   positions) or ``{key: offset}``  offset is the next offset to consume
``offset-fetch``   ``[key, ...]`` (extra          ``{key: offset or None}`` committed offsets
                   ``group``)
``end-offsets``    ``[key, ...]``                 ``{key: log_end_offset}`` (high watermark)
``crash``          ``None``                       always ends ``info``: the client is rebuilt
=================  =============================  ==============================================

Completions of a consumer in a group carry extra keys ``group``, ``member_id``,
``generation_id`` and ``assignment`` (keys owned after the op) and, when the assignment changed
during the op, ``rebalance_log``: ``[{"generation_id": g, "member_id": m, "keys": [...]}, ...]``.
Options given at invoke (``seek_to_beginning``, ``group``, ``poll_ms``) are read from the
invoke; a completion's extra keys are the facts it reports. A poll may report ``positions`` (``{key: next offset to fetch}``) so that an empty final poll
still proves it reached the end of a partition.

Op shapes — the contract for ``nemesis.py`` (process ``"nemesis"``): a fault ``X`` is opened
by ``start-X`` and closed by ``stop-X``; a one-shot fault is a single op. ``stop-X`` with no
``X`` active must complete ``ok`` (the final phase sends every stop). The report shades
the time from a ``start-X`` invoke to the matching ``stop-X`` completion.

==========================  ================================================  ================
f                           invoke value                                      ok value
==========================  ================================================  ================
``start-partition``         a shape: ``"isolate-one"``, ``"isolate-leader"``,  ``{"shape": ...,
                            ``"isolate-controller"``, ``"halves"``,           "grudge": {dst:
                            ``"majorities-ring"``, or ``{"groups": [[n..]..]}``  [src, ...]}}``
``stop-partition``          ``None``                                          ``None``
``start-kill``/``stop-kill``  ``"one"``/``"leader"``/``"controller"``/            nodes affected
                            ``"minority"``/``"all"`` or a node id
``start-pause``/``stop-pause``  same targets (SIGSTOP / SIGCONT)              nodes affected
``start-delay``/``stop-delay``  ``{"delay_ms": n}``                           ``None``
``corrupt-tail``            ``{"node": n, "mode": "torn" | "bitflip"}``        what was cut
``kill-supervisor``         ``None`` (a side `cluster up`, supervisor.py)      ``{"supervisor",
                                                                              "pids", "left",
                                                                              "ports_held"}``
``start-reassign``          ``{"partitions": k}`` (random moves, issue 44)     ``[{"key", "from",
                                                                              "to", "error"?}]``
``stop-reassign``           ``None`` (shrunk partitions get their RF back)     the same
``start-stranger``          ``None`` or ``{"idle_per_listener": n, ...}``     ``{"baseline",
                            (stranger.py)                                     "lying", "idle",
                                                                              "oversized",
                                                                              "served", ...}``
``stop-stranger``           ``None``                                          ``{"served",
                                                                              "held",
                                                                              "closed_by_node"}``
==========================  ================================================  ================

Invariants checked by `History`: indexes are dense positions; each process has at most one
op in flight; every completion follows an invoke of the same ``f`` on the same process. An
invoke left without completion (the run ended) pairs with ``None`` and counts as ``info``.

`HistoryWriter` is the only I/O here (append-only, one ``write`` per line, flushed per line, a
line-size limit). Everything else is pure.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "NEMESIS",
    "OP_TYPES",
    "COMPLETION_TYPES",
    "HarnessError",
    "HistoryError",
    "Op",
    "Pair",
    "FaultWindow",
    "History",
    "HistoryWriter",
    "key_of",
    "parse_key",
    "parse_history_lines",
    "read_history",
    "write_history",
]

NEMESIS = "nemesis"
OP_TYPES = ("invoke", "ok", "fail", "info")
COMPLETION_TYPES = ("ok", "fail", "info")
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024

_FIELDS = ("index", "type", "process", "f", "value", "time_ns", "wall_time", "error")


class HarnessError(Exception):
    """Root of the harness's errors; `code` is stable for logs and results.json.

        HarnessError
         ├── HistoryError     history-invalid   a history that breaks the invariants above
         ├── generator.GeneratorError   generator-invalid
         ├── checker.CheckerInputError  checker-input-invalid
         └── net.NetError               net-error
    """

    code = "harness-error"


class HistoryError(HarnessError):
    code = "history-invalid"


def key_of(topic: str, partition: int) -> str:
    """Returns the history key of a topic-partition: ``"<topic>-<partition>"``."""
    return f"{topic}-{int(partition)}"


def parse_key(key: str) -> tuple[str, int]:
    """Returns ``(topic, partition)`` of a key; raises `HistoryError` if it has no ``-<int>``."""
    topic, sep, partition = key.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise HistoryError(f"not a partition key: {key!r}")
    return topic, int(partition)


@dataclass(frozen=True, slots=True)
class Op:
    """One history entry. Immutable; `dataclasses.replace` to stamp times or an index."""

    type: str
    f: str
    process: int | str
    value: Any = None
    time_ns: int = 0
    wall_time: float | None = None
    error: str | None = None
    index: int = -1
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.type not in OP_TYPES:
            raise HistoryError(f"op type {self.type!r} is not one of {OP_TYPES}")

    @property
    def is_invoke(self) -> bool:
        return self.type == "invoke"

    @property
    def is_client(self) -> bool:
        return self.process != NEMESIS

    def get(self, name: str, default: Any = None) -> Any:
        """An extra key's value (``poll_ms``, ``generation_id``, ...), or `default`."""
        return self.extra.get(name, default)

    def to_json_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in _FIELDS}
        for name in sorted(self.extra):
            if name in out:
                raise HistoryError(f"extra key {name!r} shadows an op field")
            out[name] = self.extra[name]
        return out

    def to_json_line(self) -> str:
        return json.dumps(self.to_json_dict(), separators=(",", ":"), allow_nan=False) + "\n"

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> Op:
        try:
            return cls(
                type=data["type"],
                f=data["f"],
                process=data["process"],
                value=data.get("value"),
                time_ns=int(data.get("time_ns", 0)),
                wall_time=data.get("wall_time"),
                error=data.get("error"),
                index=int(data.get("index", -1)),
                extra={k: v for k, v in data.items() if k not in _FIELDS},
            )
        except KeyError as missing:
            raise HistoryError(f"op without {missing}: {dict(data)!r}") from None


@dataclass(frozen=True, slots=True)
class Pair:
    """An invoke and its completion (`None` if the run ended first: counts as ``info``)."""

    invoke: Op
    completion: Op | None

    @property
    def type(self) -> str:
        return self.completion.type if self.completion is not None else "info"

    @property
    def f(self) -> str:
        return self.invoke.f

    @property
    def process(self) -> int | str:
        return self.invoke.process

    @property
    def latency_ns(self) -> int | None:
        if self.completion is None:
            return None
        return self.completion.time_ns - self.invoke.time_ns


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """A fault in effect from `start_ns` (start invoke) to `end_ns` (stop completion).

    `closed` is False when no stop came before the history ended (`end_ns` is then the
    history's last time)."""

    name: str
    start_ns: int
    end_ns: int
    value: Any
    closed: bool


class History(Sequence[Op]):
    """An immutable, validated history with Jepsen-like helpers. Pure.

    Raises `HistoryError` if indexes are not dense positions, a process invokes twice without
    a completion, or a completion has no matching invoke."""

    def __init__(self, ops: Iterable[Op]):
        ops_list: list[Op] = []
        for position, op in enumerate(ops):
            if op.index == -1:
                op = dataclasses.replace(op, index=position)
            elif op.index != position:
                raise HistoryError(f"op at position {position} has index {op.index}")
            ops_list.append(op)
        self._ops: tuple[Op, ...] = tuple(ops_list)
        self._pairs, self._pair_of = self._pair_up(self._ops)

    @staticmethod
    def _pair_up(ops: Sequence[Op]) -> tuple[tuple[Pair, ...], dict[int, Pair]]:
        pending: dict[int | str, Op] = {}
        pairs: list[Pair] = []
        slot_of_invoke: dict[int, int] = {}
        for op in ops:
            if op.is_invoke:
                if op.process in pending:
                    raise HistoryError(
                        f"process {op.process!r} invoked op {op.index} while op "
                        f"{pending[op.process].index} was still running"
                    )
                pending[op.process] = op
                slot_of_invoke[op.index] = len(pairs)
                pairs.append(Pair(op, None))
                continue
            invoke = pending.pop(op.process, None)
            if invoke is None:
                raise HistoryError(f"completion {op.index} of process {op.process!r} has no invoke")
            if invoke.f != op.f:
                raise HistoryError(f"completion {op.index} ({op.f}) does not match invoke {invoke.f}")
            pairs[slot_of_invoke[invoke.index]] = Pair(invoke, op)
        pair_of: dict[int, Pair] = {}
        for pair in pairs:
            pair_of[pair.invoke.index] = pair
            if pair.completion is not None:
                pair_of[pair.completion.index] = pair
        return tuple(pairs), pair_of

    # Sequence protocol
    def __len__(self) -> int:
        return len(self._ops)

    def __getitem__(self, item):  # type: ignore[override]
        return self._ops[item]

    def __iter__(self) -> Iterator[Op]:
        return iter(self._ops)

    def __repr__(self) -> str:
        return f"History({len(self._ops)} ops)"

    @property
    def ops(self) -> tuple[Op, ...]:
        return self._ops

    def pairs(self) -> tuple[Pair, ...]:
        """Every invoke with its completion, in invoke order."""
        return self._pairs

    def pair_of(self, op: Op | int) -> Pair:
        """The pair holding this op (invoke or completion), by op or index."""
        index = op if isinstance(op, int) else op.index
        return self._pair_of[index]

    def completion_of(self, invoke: Op | int) -> Op | None:
        return self.pair_of(invoke).completion

    def invocation_of(self, completion: Op | int) -> Op:
        return self.pair_of(completion).invoke

    def filter(
        self,
        *,
        f: str | Iterable[str] | None = None,
        type: str | Iterable[str] | None = None,  # noqa: A002 - Jepsen's field name
        process: int | str | None = None,
        client: bool | None = None,
    ) -> list[Op]:
        """Ops matching every given criterion, in history order."""
        fs = {f} if isinstance(f, str) else (set(f) if f is not None else None)
        types = {type} if isinstance(type, str) else (set(type) if type is not None else None)
        return [
            op
            for op in self._ops
            if (fs is None or op.f in fs)
            and (types is None or op.type in types)
            and (process is None or op.process == process)
            and (client is None or op.is_client == client)
        ]

    def completions(self) -> list[Op]:
        return [op for op in self._ops if not op.is_invoke]

    def client_ops(self) -> list[Op]:
        return [op for op in self._ops if op.is_client]

    def nemesis_ops(self) -> list[Op]:
        return [op for op in self._ops if not op.is_client]

    @property
    def start_ns(self) -> int:
        return self._ops[0].time_ns if self._ops else 0

    @property
    def end_ns(self) -> int:
        return max((op.time_ns for op in self._ops), default=0)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    def counts(self) -> dict[str, dict[str, int]]:
        """``{f: {type: n}}`` over completed pairs (a missing completion counts as info)."""
        out: dict[str, dict[str, int]] = {}
        for pair in self._pairs:
            by_type = out.setdefault(pair.f, {})
            by_type[pair.type] = by_type.get(pair.type, 0) + 1
        return out

    def fault_windows(self) -> list[FaultWindow]:
        """Nemesis fault windows, in start order.

        ``start-X`` that did not fail opens window X at its invoke time; the next ``stop-X``
        closes it at its completion time. Any other nemesis op that did not fail is a window
        of its own from invoke to completion."""
        windows: list[FaultWindow] = []
        open_by_name: dict[str, tuple[int, Any]] = {}
        for pair in self._pairs:
            if pair.process != NEMESIS or pair.type == "fail":
                continue
            f = pair.f
            start_ns = pair.invoke.time_ns
            end_ns = pair.completion.time_ns if pair.completion is not None else self.end_ns
            if f.startswith("start-"):
                name = f.removeprefix("start-")
                if name not in open_by_name:
                    open_by_name[name] = (start_ns, pair.invoke.value)
            elif f.startswith("stop-"):
                name = f.removeprefix("stop-")
                if name in open_by_name:
                    began, value = open_by_name.pop(name)
                    windows.append(FaultWindow(name, began, end_ns, value, True))
            else:
                windows.append(FaultWindow(f, start_ns, end_ns, pair.invoke.value, True))
        for name, (began, value) in open_by_name.items():
            windows.append(FaultWindow(name, began, self.end_ns, value, False))
        windows.sort(key=lambda w: (w.start_ns, w.name))
        return windows


def parse_history_lines(lines: Iterable[str]) -> History:
    """Parses JSON lines into a `History`.

    A last line without its newline (the writer died mid-line) is dropped if it does not
    parse; a bad line anywhere else raises `HistoryError`."""
    ops: list[Op] = []
    pending_error: HistoryError | None = None
    for number, line in enumerate(lines, start=1):
        if pending_error is not None:
            raise pending_error
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            error = HistoryError(f"line {number} is not JSON: {exc}")
            if line.endswith("\n"):
                raise error from None
            pending_error = error  # only fatal if another line follows
            continue
        ops.append(Op.from_json_dict(data))
    return History(ops)


def read_history(path: str | os.PathLike[str]) -> History:
    """Reads a ``history.jsonl`` file written by `HistoryWriter` or `write_history`."""
    with open(path, encoding="utf-8") as handle:
        return parse_history_lines(handle)


def write_history(path: str | os.PathLike[str], ops: Iterable[Op]) -> int:
    """Writes ops to a new JSON-lines file in one go; returns how many were written."""
    count = 0
    with HistoryWriter(path) as writer:
        for op in ops:
            writer.append(op)
            count += 1
    return count


class HistoryWriter:
    """Append-only JSON-lines writer: one op per line, each line one unbuffered ``write``.

    `append` assigns the next index when the op has none, and returns the op as written. A
    line longer than `max_line_bytes` raises `HistoryError` and writes nothing, so memory and
    the file stay bounded per op. The file is opened for exclusive creation: a run never
    appends to another run's history.

    Concurrency: not thread-safe; call it from the runner's trio thread (a line is small, the
    write goes to the page cache). With ``fsync=True`` each line is also fsynced.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        fsync: bool = False,
    ):
        self.path = Path(path)
        self.max_line_bytes = max_line_bytes
        self._fsync = fsync
        self._next_index = 0
        # buffering=0: each line reaches the OS in one write call, so a harness crash loses
        # at most the line in flight and readers can tail the file.
        self._file = open(self.path, "xb", buffering=0)

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self._next_index

    @property
    def closed(self) -> bool:
        return self._file.closed

    def append(self, op: Op) -> Op:
        if self._file.closed:
            raise HistoryError(f"history {self.path} is closed")
        if op.index == -1:
            op = dataclasses.replace(op, index=self._next_index)
        elif op.index != self._next_index:
            raise HistoryError(f"op index {op.index}, expected {self._next_index}")
        line = op.to_json_line().encode("utf-8")
        if len(line) > self.max_line_bytes:
            raise HistoryError(
                f"op {op.index} ({op.f}) is {len(line)} bytes as JSON, over "
                f"max_line_bytes={self.max_line_bytes}"
            )
        view = memoryview(line)
        while view:
            written = self._file.write(view)
            view = view[written:]
        if self._fsync:
            os.fsync(self._file.fileno())
        self._next_index += 1
        return op

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()
