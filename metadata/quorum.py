"""What the metadata service needs from the metadata quorum, and the errors the quorum raises:
the port that `raftlog/node/metadata_quorum.py` (PySyncObj) implements and the node injects, so
that metadata/ never imports the node.

    quorum = factory(on_commit=..., on_leader_change=...)    # built by the node (voters only)
    await nursery.start(quorum.run)
    index = await quorum.propose(command_bytes, timeout_s=2.0)
    voters = await quorum.change_voters("add", 4, "10.0.0.4:9094", timeout_s=10.0)  # issue 44

Contract (metadata_quorum.py's docstring has the details): `on_commit(index, command)` runs on
the trio thread for every command, in index order, once per `run()`; it has run for index i
before `propose` returns i; `on_leader_change(leader_id | None, term)` runs on each change, ordered
with the commits around it. `term` is the controller epoch.

Errors, each a subclass of the registry class that says what a caller may assume:

    NotControllerError
     ├── NotQuorumLeaderError        this voter is not the leader (`leader_id`: the known one)
     └── QuorumNotRunningError       propose() outside run()
    MessageTooLargeError
     └── CommandTooLargeError        len(command) > max_command_bytes
    RejectedError
     ├── ProposalRejectedError       definitely not committed (`reason`: QUEUE_FULL, DISCARDED, ...)
     └── QuorumBindError             the quorum address could not be bound; from run()
    UnknownOutcomeError
     └── ProposalOutcomeUnknownError may or may not commit later: retry with the same request id
          └── ProposalTimedOutError  no result within timeout_s
    KafkaStorageError
     └── QuorumStorageError          a damaged journal, meta or dump; run() raises it
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import trio

from raftlog.base.errors import (
    KafkaStorageError,
    MessageTooLargeError,
    NotControllerError,
    RejectedError,
    UnknownOutcomeError,
)

__all__ = [
    "Quorum",
    "QuorumFactory",
    "NotQuorumLeaderError",
    "QuorumNotRunningError",
    "CommandTooLargeError",
    "ProposalRejectedError",
    "QuorumBindError",
    "ProposalOutcomeUnknownError",
    "ProposalTimedOutError",
    "QuorumStorageError",
]


class Quorum(Protocol):
    """One metadata-quorum voter, as the metadata service uses it (trio thread only)."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def leader_id(self) -> int | None: ...

    @property
    def term(self) -> int: ...

    @property
    def commit_index(self) -> int: ...

    @property
    def voters(self) -> dict[int, str]: ...

    def status(self) -> dict[str, Any]: ...

    async def change_voters(self, op: str, node_id: int, address: str | None, *, timeout_s: float) -> dict[int, str]: ...

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None: ...

    async def propose(self, command: bytes, *, timeout_s: float) -> int: ...


QuorumFactory = Callable[..., Quorum]
"""`factory(on_commit=..., on_leader_change=...) -> Quorum`; the node passes one to voters."""


class NotQuorumLeaderError(NotControllerError):
    def __init__(self, leader_id: int | None) -> None:
        super().__init__(f"not the quorum leader; leader is {leader_id}", controller_id=leader_id)
        self.leader_id = leader_id


class QuorumNotRunningError(NotControllerError):
    pass


class CommandTooLargeError(MessageTooLargeError):
    def __init__(self, size_bytes: int, max_command_bytes: int) -> None:
        super().__init__(f"command of {size_bytes} bytes exceeds {max_command_bytes}")
        self.size_bytes = size_bytes
        self.max_command_bytes = max_command_bytes


class ProposalRejectedError(RejectedError):
    """The command is definitely not committed (and will not be)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class QuorumBindError(RejectedError):
    pass


class ProposalOutcomeUnknownError(UnknownOutcomeError):
    """The command may still commit (or may have): retry with the same request id."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ProposalTimedOutError(ProposalOutcomeUnknownError):
    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"no result within {timeout_s} s")
        self.timeout_s = timeout_s


class QuorumStorageError(KafkaStorageError):
    pass
