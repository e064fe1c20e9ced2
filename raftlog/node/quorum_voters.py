"""The metadata quorum's voter set as it changes on a running cluster (issue 44): what the
Raft log says the voters are, and whether a requested change may go ahead. Pure.

A change is one voter at a time (Raft's single-server change, PySyncObj's dynamic
membership): it is in force on each voter from the moment that voter appends it (committed or
not), and it commits with a majority of the new set. Hence a change that leaves fewer live
voters than the new set's majority would stall every later write: `change_refusal` refuses it
before anything is proposed (issue 44, "Bad input": "removing a voter that would lose the
quorum").

Voters are kept as {quorum address: node id}; the bridge (raftlog/node/bridge.py) stores them in
its log-compaction dump and in each membership entry, so that a restart rebuilds the set the log
says (`fold`) rather than the one its config file started with.

May import: nothing of raftlog's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["Change", "fold", "apply_change", "majority", "change_refusal"]

Change = tuple[str, str, int | None]  # ("add" | "rem", quorum address, node id or None)


def majority(size: int) -> int:
    return size // 2 + 1


def apply_change(voters: dict[str, int | None], change: Change, *, reverse: bool = False) -> bool:
    """Apply one change to `voters` in place (or undo it, `reverse`); False if it changed nothing."""
    kind, address, node_id = change
    adding = (kind == "add") != reverse
    if kind not in ("add", "rem"):
        return False
    if adding:
        if address in voters:
            return False
        voters[address] = node_id
        return True
    return voters.pop(address, _MISSING) is not _MISSING


_MISSING = object()


def fold(voters: Mapping[str, int | None], changes: Iterable[Change]) -> dict[str, int | None]:
    """The voter set after `changes`, in log order, starting from `voters`."""
    result = dict(voters)
    for change in changes:
        apply_change(result, change)
    return result


def change_refusal(
    op: str,
    node_id: int,
    address: str | None,
    voters: Mapping[int, str],
    live: Iterable[int],
    leader_id: int | None,
) -> str | None:
    """Why the leader must not propose this change now (None: it may). `voters`: {id: address}
    in force; `live`: voters the leader heard from within its fallback timeout (itself
    included); `op`: "add" (with `address`) or "remove"."""
    live_set = set(live) & set(voters)
    if op == "add":
        if node_id in voters:
            return f"node {node_id} is already a voter of the metadata quorum"
        if address is None:
            return "adding a voter needs its quorum address (host:port)"
        if address in voters.values():
            return f"{address} is already the quorum address of a voter"
        new_size = len(voters) + 1
        # The new voter counts once it has caught up; until then it is not live.
        if len(live_set) < majority(new_size):
            return (f"adding node {node_id} makes {new_size} voters, whose majority ({majority(new_size)}) "
                    f"the {len(live_set)} live voter(s) {sorted(live_set)} cannot form: bring a voter back "
                    f"or remove a dead one first")
        return None
    if op != "remove":
        return f"unknown quorum change {op!r}"
    if node_id not in voters:
        return f"node {node_id} is not a voter of the metadata quorum (voters: {sorted(voters)})"
    if len(voters) == 1:
        return f"node {node_id} is the last voter: the metadata quorum cannot lose its last voter"
    if node_id == leader_id:
        return (f"node {node_id} leads the metadata quorum: stop it (another voter takes over) "
                f"or ask another voter's leader to remove it")
    remaining = set(voters) - {node_id}
    live_remaining = live_set & remaining
    if len(live_remaining) < majority(len(remaining)):
        return (f"removing node {node_id} leaves {len(remaining)} voters of which {len(live_remaining)} "
                f"are live ({sorted(live_remaining)}), fewer than their majority {majority(len(remaining))}: "
                f"the metadata quorum would be lost")
    return None
