"""The metadata quorum as the metadata service uses it (metadata/quorum.py's port): a trio API
over one PySyncObj voter (raftlog/node/bridge.py).

API (trio): ``MetadataQuorum(config, on_commit=, on_leader_change=)``, ``await run()``,
``await propose(command, timeout_s=) -> index``, properties ``is_leader``, ``leader_id``,
``term`` (the controller epoch), ``commit_index``, ``has_quorum``, ``voters``, and ``status()``;
``await change_voters(op, node_id, address, timeout_s=)`` adds or removes one voter (issue 44).
Index ``i`` is the 1-based position of a command in the replicated list (bridge.py).

Process and threads. The voter (PySyncObj, its journal and port) runs in a child process
(quorum_process.py's ChildVoter, issue 46): its heartbeats no longer wait for this node's GIL.
A dedicated owner thread spawns it and waits until its journal is loaded and its port bound,
and later closes it (the child dies with that thread: PR_SET_PDEATHSIG). ChildVoter's reader
thread never touches trio objects: every commit, proposal result and status change is handed
over with ``TrioToken.run_sync_soon`` (`_TrioHandoff`), whose FIFO order gives:

* ``on_commit(index, command)`` runs on the trio thread for every command, in index order,
  exactly once per ``run()`` (so also for every command replayed from disk after a restart);
* ``on_commit(i, ...)`` has run before ``propose`` returns ``i``;
* ``on_leader_change(leader_id | None, term)`` runs on each change of (leader, term), ordered
  with the commits around it.

Once ``propose`` returns ``i`` (or any voter applies ``i``), command ``i`` is on stable storage
on a majority of voters (bridge.py, "Durability"). If the child dies, ``run()`` raises
QuorumStorageError and the node stops (quorum_process.py, "Life and death"). Proposals are never re-sent: every
``propose`` is bounded by ``timeout_s`` and callers make commands idempotent. Its errors are
metadata/quorum.py's.

Clock: waits only (trio's). May import: metadata.quorum, raftlog/node/bridge.py,
quorum_process.py and quorum_voters.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
from collections.abc import Callable
from typing import Any

import trio

from metadata.quorum import (
    CommandTooLargeError,
    NotQuorumLeaderError,
    ProposalOutcomeUnknownError,
    ProposalRejectedError,
    ProposalTimedOutError,
    QuorumNotRunningError,
    QuorumStorageError,
)
from raftlog.base.errors import InvalidRequestError
from raftlog.node import quorum_voters
from raftlog.node.bridge import (
    MAX_PENDING_PROPOSALS,
    ProposalOutcome,
    QuorumConfig,
    VoterStatus,
)
from raftlog.node.quorum_process import ChildVoter

__all__ = ["MetadataQuorum", "QuorumConfig"]


@dataclasses.dataclass
class _Pending:
    event: trio.Event
    outcome: ProposalOutcome | None = None  # None once set: stopped before an answer


class _TrioHandoff:
    """The bridge's VoterEvents: each call from ChildVoter's reader thread or the owner thread
    becomes a call on the trio thread, in order."""

    def __init__(self, quorum: "MetadataQuorum", token: trio.lowlevel.TrioToken) -> None:
        self._quorum = quorum
        self._token = token

    def to_trio(self, fn: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(fn, *args)

    def commit(self, index: int, command: bytes) -> None:
        self.to_trio(self._quorum._deliver_commit, index, command)

    def status(self, status: VoterStatus) -> None:
        self.to_trio(self._quorum._on_status, status)

    def fail(self, error: BaseException) -> None:
        self.to_trio(self._quorum._fail, error)


class MetadataQuorum:
    """One metadata-quorum voter. Create, then ``await run()`` in a nursery.

    Concurrency: all methods and properties are for the trio thread that runs ``run()``.
    """

    def __init__(
        self,
        config: QuorumConfig,
        *,
        on_commit: Callable[[int, bytes], None],
        on_leader_change: Callable[[int | None, int], None],
    ) -> None:
        self._config = config
        self._on_commit = on_commit
        self._on_leader_change = on_leader_change
        self._id_by_address = {config.self_address: config.node_id}
        self._id_by_address.update({address: nid for nid, address in config.peers.items()})
        self._handoff: _TrioHandoff | None = None
        self._started = False
        self._running = False
        self._stop_requested = threading.Event()
        self._owner_started: trio.Event | None = None
        self._owner_error: BaseException | None = None
        self._fatal: trio.Event | None = None
        self._fatal_error: BaseException | None = None
        self._pending: dict[int, _Pending] = {}
        self._proposal_ids = itertools.count(1)
        self._voter: ChildVoter | None = None
        # Trio-side view, updated only by _on_status / _deliver_commit.
        self._is_leader = False
        self._leader_id: int | None = None
        self._term = 0
        self._has_quorum = False
        self._raft_commit_index = 0
        self._raft_last_applied = 0
        self._log_end_index = 0
        self._match_index: dict[int, int] = {}
        self._voters: dict[int, str] = {config.node_id: config.self_address, **config.peers}
        self._live: set[int] = set()
        self._committed_count = 0
        self._last_applied = 0
        self._reported_leader: tuple[int | None, int] = (None, 0)

    # -- properties (trio thread; a view at most one tick old) --

    @property
    def is_leader(self) -> bool:
        return self._is_leader

    @property
    def leader_id(self) -> int | None:
        return self._leader_id

    @property
    def term(self) -> int:
        return self._term

    @property
    def commit_index(self) -> int:
        """Highest command index committed and already passed to ``on_commit`` here."""
        return self._last_applied

    @property
    def has_quorum(self) -> bool:
        return self._has_quorum

    @property
    def voters(self) -> dict[int, str]:
        """{node id: quorum address} of the voters in force here (the log's, not the config's)."""
        return dict(self._voters)

    def status(self) -> dict[str, Any]:
        """A JSON-able summary for ``cluster status``."""
        return {
            "node_id": self._config.node_id,
            "voters": {str(k): v for k, v in sorted(self._voters.items())},
            "is_voter": self._config.node_id in self._voters,
            "running": self._running,
            "is_leader": self._is_leader,
            "leader_id": self._leader_id,
            "term": self._term,
            "has_quorum": self._has_quorum,
            "commit_index": self._committed_count,
            "last_applied": self._last_applied,
            "raft_commit_index": self._raft_commit_index,
            "raft_last_applied": self._raft_last_applied,
            "log_end_index": self._log_end_index,
            "match_index": {str(k): v for k, v in sorted(self._match_index.items())},  # leader only
            "pending_proposals": len(self._pending),
            "unpickle_rejections": 0 if self._voter is None else self._voter.unpickle_rejections(),
            "refused_connections": {} if self._voter is None else self._voter.quorum_refusals(),
        }

    # -- lifecycle --

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the voter, report started once its port is bound, run until cancelled.

        On cancellation the voter is closed (journal synced, meta stored) before this
        returns. Raises QuorumStorageError on damaged state, QuorumBindError if the port
        cannot be bound, or whatever ``on_commit``/``on_leader_change`` raised.
        """
        if self._started:
            raise RuntimeError("MetadataQuorum.run() can be called once")
        self._started = True
        self._handoff = _TrioHandoff(self, trio.lowlevel.current_trio_token())
        self._owner_started = trio.Event()
        self._fatal = trio.Event()
        owner = threading.Thread(
            target=self._owner_main, name=f"raftlog-quorum-{self._config.node_id}", daemon=True
        )
        owner.start()
        try:
            await self._owner_started.wait()
            if self._owner_error is not None:
                raise self._owner_error
            self._running = True
            task_status.started()
            await self._fatal.wait()
            assert self._fatal_error is not None
            raise self._fatal_error
        finally:
            self._running = False
            self._stop_requested.set()
            for pending in self._pending.values():
                pending.event.set()  # no outcome: STOPPED
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(owner.join)

    def _owner_main(self) -> None:
        """Owner thread: build the voter, wait for stop, close it."""
        assert self._handoff is not None
        try:
            voter = ChildVoter(self._config, self._handoff)
        except BaseException as exc:
            self._handoff.to_trio(self._owner_done, None, exc)
            return
        self._handoff.to_trio(self._owner_done, voter, None)
        self._stop_requested.wait()
        voter.close()

    # -- owner/tick thread -> trio (via _TrioHandoff) --

    def _owner_done(self, voter: ChildVoter | None, error: BaseException | None) -> None:
        self._voter = voter
        self._owner_error = error
        assert self._owner_started is not None
        self._owner_started.set()

    def _fail(self, error: BaseException) -> None:
        if self._fatal is not None and self._fatal_error is None:
            self._fatal_error = error
            self._fatal.set()

    def _deliver_commit(self, index: int, command: bytes) -> None:
        if self._fatal_error is not None:
            return
        if index != self._last_applied + 1:
            self._fail(QuorumStorageError(f"commit {index} after {self._last_applied}: gap"))
            return
        self._last_applied = index
        self._committed_count = max(self._committed_count, index)
        try:
            self._on_commit(index, command)
        except Exception as exc:  # surfaced from run(), not lost in trio's callback queue
            self._fail(exc)

    def _on_status(self, status: VoterStatus) -> None:
        self._is_leader = status.is_leader
        leader_address = status.leader_address
        self._leader_id = self._id_by_address.get(leader_address) if leader_address else None
        self._term = status.term
        self._has_quorum = status.has_quorum
        self._raft_commit_index = status.raft_commit_index
        self._raft_last_applied = status.raft_last_applied
        self._log_end_index = status.log_end_index
        if status.voters:
            self._voters = {nid: a for a, nid in status.voters if nid is not None}
            self._id_by_address.update({a: nid for nid, a in self._voters.items()})
        self._live = {self._id_by_address[a] for a in status.live if a in self._id_by_address}
        self._match_index = {self._id_by_address[a]: i for a, i in status.match_index if a in self._id_by_address}
        self._committed_count = max(self._committed_count, status.command_count)
        key = (self._leader_id, status.term)
        if key != self._reported_leader and self._fatal_error is None:
            self._reported_leader = key
            try:
                self._on_leader_change(*key)
            except Exception as exc:
                self._fail(exc)

    def _on_result(self, proposal_id: int, outcome: ProposalOutcome) -> None:
        pending = self._pending.get(proposal_id)
        if pending is not None and not pending.event.is_set():
            pending.outcome = outcome
            pending.event.set()

    # -- proposals --

    async def propose(self, command: bytes, *, timeout_s: float) -> int:
        """Replicate ``command``; return its index once committed (durable on a majority)
        and already passed to ``on_commit`` here.

        Raises CommandTooLargeError, NotQuorumLeaderError (this voter is not the leader),
        ProposalRejectedError (definitely not committed), ProposalOutcomeUnknownError /
        ProposalTimedOutError (may commit later: retry idempotently), QuorumNotRunningError.
        Never re-proposes on its own.
        Concurrency: cancel-safe in the sense that cancellation leaves the outcome unknown.
        """
        if not isinstance(command, bytes):
            raise TypeError("command must be bytes")
        if len(command) > self._config.max_command_bytes:
            raise CommandTooLargeError(len(command), self._config.max_command_bytes)
        if not self._running or self._voter is None:
            raise QuorumNotRunningError("the quorum is not running")
        if not self._is_leader:
            raise NotQuorumLeaderError(self._leader_id)
        if len(self._pending) >= MAX_PENDING_PROPOSALS:
            raise ProposalRejectedError("TOO_MANY_PENDING")
        voter = self._voter
        return self._index_or_raise(await self._outcome(lambda on_result: voter.propose(command, on_result),
                                                        timeout_s))

    async def _outcome(self, submit: Callable[[Callable[[ProposalOutcome], None]], None],
                       timeout_s: float) -> ProposalOutcome | None:
        """`submit(on_result)` to the voter and wait for its outcome (None: stopped first);
        ProposalTimedOutError after `timeout_s`."""
        proposal_id = next(self._proposal_ids)
        pending = _Pending(trio.Event())
        self._pending[proposal_id] = pending
        handoff = self._handoff
        assert handoff is not None

        def on_result(outcome: ProposalOutcome) -> None:  # ChildVoter's reader thread
            handoff.to_trio(self._on_result, proposal_id, outcome)

        try:
            with trio.move_on_after(timeout_s):
                submit(on_result)
                await pending.event.wait()
        finally:
            del self._pending[proposal_id]
        if not pending.event.is_set():
            raise ProposalTimedOutError(timeout_s)
        return pending.outcome

    async def change_voters(self, op: str, node_id: int, address: str | None, *, timeout_s: float) -> dict[int, str]:
        """Add (`op` "add", with its quorum `address`) or remove ("remove") one voter of the
        metadata quorum, on the leader; return the voters once the change has committed.

        Refused with InvalidRequestError, nothing proposed, when the change would lose the
        quorum or names a voter wrongly (quorum_voters.change_refusal); ProposalRejectedError
        (REQUEST_DENIED) while another change is uncommitted; otherwise as ``propose``.
        """
        if not self._running or self._voter is None:
            raise QuorumNotRunningError("the quorum is not running")
        if not self._is_leader:
            raise NotQuorumLeaderError(self._leader_id)
        live = self._live | {self._config.node_id}
        reason = quorum_voters.change_refusal(op, node_id, address, self._voters, live, self._config.node_id)
        if reason is not None:
            raise InvalidRequestError(reason)
        if self._raft_commit_index < self._log_end_index or self._raft_last_applied < self._raft_commit_index:
            # One change at a time, on a settled log: not while the new leader's no-op or other
            # entries are in flight (PySyncObj refuses some such cases with REQUEST_DENIED).
            raise ProposalRejectedError("UNSETTLED: the quorum's log is not all committed yet; ask again")
        target = address if op == "add" else self._voters[node_id]
        assert target is not None
        voter, kind = self._voter, "add" if op == "add" else "rem"
        outcome = await self._outcome(lambda on_result: voter.change_voters(kind, node_id, target, on_result),
                                      timeout_s)
        if outcome is not None and outcome.kind == "committed":
            self._voters = dict(self._voters)
            if op == "add":
                self._voters[node_id] = target
                self._id_by_address[target] = node_id
            else:
                self._voters.pop(node_id, None)
            return self.voters
        self._index_or_raise(outcome)
        raise AssertionError("unreachable")

    def _index_or_raise(self, outcome: ProposalOutcome | None) -> int:
        if outcome is None:
            raise ProposalOutcomeUnknownError("STOPPED")
        if outcome.kind == "committed":
            assert outcome.index is not None
            return outcome.index
        if outcome.kind == "not_leader":
            leader = self._leader_id if self._leader_id != self._config.node_id else None
            raise NotQuorumLeaderError(leader)
        if outcome.kind == "rejected":
            raise ProposalRejectedError(outcome.reason)
        raise ProposalOutcomeUnknownError(outcome.reason)
