"""Blocking admin of consumer groups (Kafka's kafka-consumer-groups; the CLI's `raftlog groups`):
list, describe with lag, reset offsets (planned by `group.plan_offset_reset`), delete.
Each group's coordinator is reached through its own GroupCore, driven on the caller's thread.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from raftlog.base.errors import CorruptMessageError, error_from_wire
from raftlog.base.topics import OFFSETS_TOPIC, OFFSETS_TOPIC_PARTITIONS
from raftlog.client.assignor import decode_assignment
from raftlog.client.blocking import Admin
from raftlog.client.clock import SYSTEM_CLOCK, Clock
from raftlog.client.request import check_response, list_offsets_request
from raftlog.client.group import GroupCore, ResetSpec, TopicPartition, parse_offset_fetch, plan_offset_reset
from raftlog.client.network_blocking import Network, step
from raftlog.client.security import SecurityOption, client_security

__all__ = ["GroupAdmin"]


def _member_partitions(assignment: bytes) -> tuple[list[TopicPartition], bool]:
    """(partitions, True) from a member's ConsumerProtocol assignment; ([], False) when the
    bytes are not one (a group of another protocol type, or a member of an older raftlog that
    wrote CBOR): describe still lists the member, it just cannot say what it owns."""
    try:
        return sorted(decode_assignment(assignment).partitions), True
    except CorruptMessageError:
        return [], False


class GroupAdmin:
    """Blocking admin of consumer groups (the CLI's `raftlog groups ...`):

        list_groups() -> [{group_id, protocol_type, state, coordinator}]   (every broker asked)
        describe_group(group_id) -> {group_id, state, protocol, members: [{member_id,
                                     client_id, client_host, group_instance_id, partitions,
                                     assignment_readable}],
                                     partitions: [{topic, partition, committed_offset,
                                                   log_end_offset, lag, last_stable_offset,
                                                   stable_lag, member_id, client_id, host}]}
                                     (stable_lag: to the last stable offset, what a
                                     read_committed consumer has left)
        delete_group(group_id) -> None
        reset_offsets(group_id, topics, strategy, value=None, dry_run=False)
            -> {dry_run, partitions: [{topic, partition, previous_offset, offset}]}
        committed(group_id) -> {(topic, partition): offset}
    """

    def __init__(self, bootstrap: str | Iterable[str], *, request_timeout_ms: int = 30_000,
                 rng: random.Random | None = None, clock: Clock = SYSTEM_CLOCK,
                 security: SecurityOption = None):
        self._bootstrap = bootstrap
        self._rng = rng or random.Random()
        self._timeout_ms = request_timeout_ms
        self._clock = clock
        self._security = client_security(security)
        self.admin = Admin(bootstrap, request_timeout_ms=request_timeout_ms, rng=self._rng, clock=clock,
                           security=self._security)
        self._cores: dict[str, tuple[GroupCore, Any]] = {}

    def _coord(self, group_id: str, request: dict) -> dict:
        if group_id not in self._cores:
            if len(self._cores) >= 64:
                _, (old_core, old_net) = self._cores.popitem()
                old_net.close()
            core = GroupCore(self._bootstrap, group_id, rng=self._rng, request_timeout_ms=self._timeout_ms)
            net = Network(core, clock=self._clock, connect_timeout_ms=min(self._timeout_ms, 10_000),
                          send_timeout_ms=self._timeout_ms, security=self._security)
            self._cores[group_id] = (core, net)
        core, net = self._cores[group_id]
        call = core.coord_call({**request, "group_id": group_id}, self._clock.monotonic_ms())
        while not call.done:
            step(core, net, call.deadline_ms)
        return check_response(call.value())

    def list_groups(self) -> list[dict]:
        answers = self.admin.request_many(
            [({"op": "list_groups"}, (OFFSETS_TOPIC, p)) for p in range(OFFSETS_TOPIC_PARTITIONS)])
        seen: dict[str, dict] = {}
        for a in answers:
            for g in a.get("groups") or ():
                seen[g["group_id"]] = {**g, "coordinator": a.get("node_id")}
        return [seen[k] for k in sorted(seen)]

    def committed(self, group_id: str) -> dict[TopicPartition, int]:
        got = parse_offset_fetch(self._coord(group_id, {"op": "offset_fetch", "partitions": None}))
        return {tp: o for tp, o in got.items() if o is not None}

    def _bounds(self, tps: Iterable[TopicPartition], *, stable: bool = False) -> dict[TopicPartition, tuple[int, ...]]:
        """(log start, high watermark) per partition, and the last stable offset third with
        `stable`."""
        tps = sorted(set(tps))
        reqs = []
        for t, p in tps:
            reqs.append((list_offsets_request([(t, p, -2)]), (t, p)))
            reqs.append((list_offsets_request([(t, p, -1)]), (t, p)))
            if stable:
                reqs.append((list_offsets_request([(t, p, -1)], read_committed=True), (t, p)))
        answers = self.admin.request_many(reqs)
        per = 3 if stable else 2
        out = {}
        for i, tp in enumerate(tps):
            got = [answers[per * i + k]["partitions"][0] for k in range(per)]
            for g in got:
                if g.get("error"):
                    raise error_from_wire(g["error"])
            out[tp] = tuple(g["offset"] for g in got)
        return out

    def describe_group(self, group_id: str) -> dict:
        d = self._coord(group_id, {"op": "describe_groups", "group_ids": [group_id]})["groups"][0]
        if d.get("error"):
            raise error_from_wire(d["error"])
        owners: dict[TopicPartition, dict] = {}
        members = []
        consumer = d.get("protocol_type") == "consumer"
        kip848: dict = {}
        if d.get("type") == "consumer":  # a KIP-848 group: the coordinator holds its assignment
            kip848 = self._coord(group_id, {"op": "consumer_group_describe", "group_ids": [group_id]})["groups"][0]
            if kip848.get("error"):
                raise error_from_wire(kip848["error"])
            for m in kip848.get("members") or ():
                def tps(rows: Any) -> list[TopicPartition]:
                    return sorted((r["topic"], p) for r in rows or () for p in r["partitions"])
                member = {"member_id": m["member_id"], "client_id": m.get("client_id", ""),
                          "client_host": m.get("client_host", ""), "group_instance_id": m.get("instance_id"),
                          "partitions": tps(m.get("assignment")), "assignment_readable": True,
                          "member_epoch": m.get("member_epoch"), "member_state": m.get("state"),
                          "target": tps(m.get("target_assignment")),
                          "pending_revocation": tps(m.get("pending_revocation")),
                          "classic": bool(m.get("classic"))}
                members.append(member)
                for tp in member["partitions"]:
                    owners[tp] = member
        for m in () if kip848 else d.get("members") or ():
            parts, readable = _member_partitions(m.get("assignment") or b"") if consumer else ([], False)
            members.append({"member_id": m["member_id"], "client_id": m.get("client_id", ""),
                            "client_host": m.get("client_host", ""),
                            "group_instance_id": m.get("group_instance_id"), "partitions": parts,
                            "assignment_readable": readable})
            for tp in parts:
                owners[tp] = m
        committed = self.committed(group_id)
        tps = sorted(set(committed) | set(owners))
        bounds = self._bounds(tps, stable=True) if tps else {}
        rows = []
        for tp in tps:
            end, stable_end = bounds[tp][1], bounds[tp][2]
            c = committed.get(tp)
            owner = owners.get(tp)
            rows.append({"topic": tp[0], "partition": tp[1], "committed_offset": c,
                         "log_end_offset": end, "lag": None if c is None else max(0, end - c),
                         "last_stable_offset": stable_end,
                         "stable_lag": None if c is None else max(0, stable_end - c),
                         "member_id": owner["member_id"] if owner else None,
                         "client_id": owner.get("client_id") if owner else None,
                         "host": owner.get("client_host") or None if owner else None})
        return {"group_id": group_id, "state": d.get("state"), "protocol_type": d.get("protocol_type"),
                "protocol": d.get("protocol"), "type": d.get("type") or "classic",
                **({"group_epoch": kip848["group_epoch"], "assignment_epoch": kip848["assignment_epoch"],
                    "assignor": kip848["assignor"]} if kip848 else {}),
                "members": members, "partitions": rows}

    def delete_group(self, group_id: str) -> None:
        r = self._coord(group_id, {"op": "delete_groups", "group_ids": [group_id]})["groups"][0]
        if r.get("error"):
            raise error_from_wire(r["error"])

    def reset_offsets(self, group_id: str, topics: Iterable[str], strategy: str, value: int | None = None,
                      *, dry_run: bool = False) -> dict:
        """Plan (raftlog.client.group.plan_offset_reset over list_offsets bounds) and write
        the group's offsets for every partition of `topics`; the group must be inactive."""
        spec = ResetSpec(strategy, value)
        infos = self.admin.describe_topics(list(topics))
        tps = [(t, p.partition) for t, info in infos.items() for p in info.partitions]
        bounds = self._bounds(tps)
        ts_offsets = None
        if strategy == "timestamp":
            answers = self.admin.request_many(
                [(list_offsets_request([(t, p, value)]), (t, p)) for t, p in sorted(bounds)])
            ts_offsets = {}
            for tp, a in zip(sorted(bounds), answers):
                off = a["partitions"][0].get("offset", -1)
                ts_offsets[tp] = off if off >= 0 else None
        plan = plan_offset_reset(spec, bounds, ts_offsets)
        return self._coord(group_id, {
            "op": "reset_offsets", "dry_run": dry_run, "timeout_ms": 10_000,
            "partitions": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(plan.items())],
        })

    def close(self) -> None:
        for _core, net in self._cores.values():
            net.close()
        self._cores.clear()
        self.admin.close()

    def __enter__(self) -> "GroupAdmin":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
