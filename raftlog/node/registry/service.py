"""The Schema Registry's shell (a NodeService): every node keeps the whole registry state in
memory, tailed from `_schemas`-0, and answers reads from it; writes go through one writer, the
node leading `_schemas`-0, so ids stay unique and dense.

    RegistryService(config, schemas_log)        (raftlog/node/main.py builds it)

* Tail: one task reads committed records from the leader (locally when leading, else over the
  peer op `registry_read`, a long poll) from `state.applied_offset + 1` and applies them. With
  nothing new it reads again after TAIL_POLL_S, or at once when kicked (a write waiting). When
  the leader is gone the state stays as it is: reads are answered from it meanwhile.
* Writes (`write(decide)`, the API's port): on the leader, under one lock: catch up to the
  log's high watermark, run `decide` on the state, append its records with acks=all, apply up
  to them, answer. On other nodes the API forwards the whole call (`forward`) to the leader's
  peer op `registry_forward` and then waits until its own tail has applied what was written
  (bounded), so a client reads its own write from the node it asked.
* Ownership: a new leader reads the log to its end before its first decision (the lock's
  catch-up), so it decides on everything earlier leaders committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

import trio

from raftlog.base.errors import RaftlogError, RequestTimedOutError
from raftlog.base.eventlog import log_event
from raftlog.base.protocol import Request
from raftlog.node.registry.api import Call, handle
from raftlog.node.registry.errors import ForwardingError, StoreError, StoreTimeoutError, error_body
from raftlog.node.registry.log import SchemasLog, records_to_wire
from raftlog.node.registry.state import Record, RegistryState

__all__ = ["RegistryService"]

logger = logging.getLogger(__name__)

TAIL_POLL_S: Final = 0.25
WRITE_TIMEOUT_S: Final = 15.0
FORWARD_TIMEOUT_S: Final = 15.0
CATCH_UP_TIMEOUT_S: Final = 20.0  # a new _schemas' first leader, or a forwarded write applied here
MAX_LONG_POLL_MS: Final = 3000  # below the peer call's timeout
LEADER_WAIT_S: Final = 10.0  # a write forwarded while _schemas has no leader waits this long for one
LEADER_POLL_S: Final = 0.1


class RegistryService:
    """See the module docstring. Implements api.RegistryPort."""

    name = "registry"

    def __init__(self, node_id: int, log: SchemasLog, peers: Any) -> None:
        self.node_id = node_id
        self.log = log
        self.peers = peers
        self.state = RegistryState()
        self._lock = trio.Lock()
        self._kick = trio.Event()
        self._applied = trio.Event()
        self.client_handlers: Mapping[str, Any] = {}
        self.peer_handlers: Mapping[str, Any] = {
            "registry_read": self._peer_read,
            "registry_forward": self._peer_forward,
        }
        self._tail_error: str | None = None

    # ------------------------------------------------------------------ NodeService

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._tail_loop)
            task_status.started()

    def on_image(self, image: Any) -> None:
        self._kick.set()

    def health(self) -> dict[str, Any]:
        return {"ok": True, "applied_offset": self.state.applied_offset, "writer": self.log.leader_id(),
                **({"tail_error": self._tail_error} if self._tail_error else {})}

    async def drain(self) -> None:
        return None

    # ------------------------------------------------------------------ tail

    async def _tail_once(self) -> bool:
        """Apply the next chunk; True if there was something."""
        records, _next = await self.log.read(self.state.applied_offset + 1)
        for offset, key, value in records:
            self.state.apply(offset, key, value)
        if _next - 1 > self.state.applied_offset:
            self.state.applied_offset = _next - 1
        if records:
            self._applied.set()
            self._applied = trio.Event()
        return bool(records)

    async def _tail_loop(self) -> None:
        while True:
            try:
                if self.log.leader_id() is not None and await self._tail_once():
                    self._tail_error = None
                    continue
                self._tail_error = None
            except RaftlogError as exc:
                self._tail_error = str(exc)
                log_event(logger, "registry_tail_failed", level=logging.DEBUG, reason=str(exc))
            self._kick = trio.Event()
            with trio.move_on_after(TAIL_POLL_S):
                await self._kick.wait()

    async def wait_applied(self, offset: int, timeout_s: float = CATCH_UP_TIMEOUT_S) -> bool:
        """Wait until the state has applied `offset`; False on timeout."""
        with trio.move_on_after(timeout_s):
            while self.state.applied_offset < offset:
                self._kick.set()
                applied = self._applied
                with trio.move_on_after(TAIL_POLL_S):
                    await applied.wait()
            return True
        return False

    # ------------------------------------------------------------------ the API's port

    def is_writer(self) -> bool:
        return self.log.is_leader()

    async def write(self, decide: Callable[[RegistryState], tuple[list[Record], Any]]) -> Any:
        await self._ensure_topic()
        if not self.log.is_leader():
            raise ForwardingError("this node no longer leads _schemas; retry")
        with trio.move_on_after(WRITE_TIMEOUT_S) as scope:
            async with self._lock:
                # Everything earlier writers committed is applied before deciding.
                while await self._tail_once():
                    pass
                records, answer = decide(self.state)
                if not records:
                    return answer
                try:
                    last = await self.log.append(records)
                except RequestTimedOutError as exc:
                    raise StoreTimeoutError(f"the write to _schemas timed out: {exc}") from None
                except RaftlogError as exc:
                    raise StoreError(f"the write to _schemas failed: {exc}") from None
                while self.state.applied_offset < last:
                    if not await self._tail_once():
                        await trio.sleep(0.01)
                return answer
        assert scope.cancelled_caught
        raise StoreTimeoutError("the write to _schemas timed out")

    async def _ensure_topic(self) -> None:
        if self.log.leader_id() is not None:
            return
        try:
            await self.log.ensure_topic()
        except RaftlogError as exc:
            raise StoreError(f"cannot create _schemas: {exc}") from None
        with trio.move_on_after(CATCH_UP_TIMEOUT_S):
            while not self.log.is_leader() and self.log.leader_id() is None:
                await trio.sleep(0.05)  # bounded: the new topic's first leader
        if self.log.leader_id() is None:
            raise ForwardingError("_schemas has no leader yet; retry")

    async def forward(self, call: Call) -> tuple[int, Any]:
        """Have `_schemas`' leader answer a write. While no leader is known, or the one asked
        says it no longer leads (nothing applied), ask again for up to LEADER_WAIT_S, as a Kafka
        client does through an election; a failed peer call is not retried (it may have applied)."""
        await self._ensure_topic()
        deadline = trio.current_time() + LEADER_WAIT_S
        while True:
            if self.log.is_leader():  # it became ours meanwhile (a new topic, an election)
                return await handle(self, call)
            leader = self.log.leader_id()
            address = None if leader is None else self.log.peer_address(leader)
            if address is not None:
                fields = {"method": call.method, "path": call.path, "query": dict(call.query), "body": call.body,
                          "principal": call.principal}
                try:
                    answer = await self.peers.call(address, "registry_forward", fields, timeout_s=FORWARD_TIMEOUT_S)
                except RaftlogError as exc:
                    raise ForwardingError(f"Error while forwarding the request to the leader: {exc}") from None
                body = answer.get("body")
                if not (isinstance(body, dict) and body.get("error_code") == ForwardingError.error_code):
                    await self.wait_applied(int(answer.get("offset", -1)))
                    return int(answer["status"]), body
            if trio.current_time() >= deadline:
                raise ForwardingError("no leader of _schemas is known; retry")
            await trio.sleep(LEADER_POLL_S)  # bounded by the deadline: _schemas electing a leader

    # ------------------------------------------------------------------ peer ops

    async def _peer_read(self, request: Request) -> dict[str, Any]:
        offset = request.fields.get("offset")
        if type(offset) is not int or offset < 0:
            offset = 0
        wait_ms = request.fields.get("wait_ms")
        wait_s = min(max(wait_ms, 0), MAX_LONG_POLL_MS) / 1000 if type(wait_ms) is int else 0.0
        records, next_offset = await self.log.read_here(offset, wait_s)
        return {"records": records_to_wire(records), "next_offset": next_offset}

    async def _peer_forward(self, request: Request) -> dict[str, Any]:
        f = request.fields
        query = f.get("query") if isinstance(f.get("query"), dict) else {}
        call = Call(str(f.get("method", "")), str(f.get("path", "")),
                    {str(k): str(v) for k, v in query.items()}, f.get("body"),
                    f.get("principal") if isinstance(f.get("principal"), str) else None)
        if not self.log.is_leader():
            status, body = error_body(ForwardingError("this node does not lead _schemas; retry"))
        else:
            status, body = await handle(self, call)
        return {"status": status, "body": body, "offset": self.state.applied_offset}
