"""Share-group membership (KIP-932): ShareGroupHeartbeat with the server-side `simple`
assignor, ShareGroupDescribe, list and delete. A pure core: `now_ms` and the rng are
arguments; the coordinator shell drives it and the partition leaders ask it whether a member
may fetch a partition.

Kafka's rules, as the Java broker applies them:
* A member joins with member_epoch 0 (its member_id is the client's UUID; an empty one gets
  one here), leaves with -1, and otherwise heartbeats with the epoch it was last given:
  another epoch is FENCED_MEMBER_EPOCH, an unknown member UNKNOWN_MEMBER_ID (it rejoins
  with epoch 0).
* The group epoch moves on every membership or subscription change and when a subscribed
  topic's partition count changes; share groups revoke nothing (many members may hold a
  partition), so a member takes the new assignment, and the group epoch as its own, on its
  next heartbeat (the assignment is sent then, and on join; otherwise null).
* The `simple` assignor: every member gets every partition of the topics it subscribes to
  (records, not partitions, are what members share; the partition leader hands each record
  to one member at a time).
* A member not heard from for its group's `session_timeout_ms` (`config_of`) is removed (`expire`); its records are
  then released by the partition leaders (`removed` in the results).
* A group id held by a classic or consumer group is refused: GROUP_ID_NOT_FOUND ("not a
  share group"), as Kafka answers.

Membership is persisted by the coordinator's shell (share_service.py) in `__share_group_state`
(`snapshot` / `restore`, share_state.py's membership record) whenever it changes, so a new
coordinator takes the group over with its epochs: members keep heartbeating as before. The
share partitions' state is there too.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from raftlog.base.errors import (
    FencedMemberEpochError,
    GroupIdNotFoundError,
    InvalidGroupIdError,
    InvalidRequestError,
    NonEmptyGroupError,
    UnknownMemberIdError,
)

__all__ = ["ShareGroupConfig", "ShareGroups", "ShareGroup", "ShareMember", "Heartbeat", "ASSIGNOR",
           "LEAVE_EPOCH", "MAX_SUBSCRIBED_TOPICS"]

ASSIGNOR: Final = "simple"
LEAVE_EPOCH: Final = -1
MAX_SUBSCRIBED_TOPICS: Final = 10_000
MAX_ID_CHARS: Final = 255


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    session_timeout_ms: int = 45_000  # Kafka's group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # Kafka's group.share.heartbeat.interval.ms
    max_size: int = 200  # Kafka's group.share.max.size


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int
    subscribed_topic_names: tuple[str, ...]
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    last_heartbeat_ms: int = 0
    assignment: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    partition_counts: dict[str, int] = field(default_factory=dict)  # of subscribed topics, at group_epoch
    subscriptions: dict[str, tuple[str, ...]] = field(default_factory=dict)  # member -> topics, at group_epoch

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A heartbeat's answer; `removed` are members that left (their records are released)."""

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: list[dict[str, Any]] | None
    removed: tuple[tuple[str, str], ...] = ()


class ShareGroups:
    """Every share group of one coordinator. Not thread-safe (one shell task drives it)."""

    def __init__(self, config: ShareGroupConfig | None = None, rng: random.Random | None = None) -> None:
        self.config = config or ShareGroupConfig()
        self._rng = rng or random.Random()
        self.groups: dict[str, ShareGroup] = {}
        # A group's own session timeout and heartbeat interval (Kafka 4's group configs
        # share.session.timeout.ms / share.heartbeat.interval.ms): the shell sets this to
        # read them from the metadata image; absent, the broker's (`config`).
        self.config_of: Callable[[str], ShareGroupConfig] = lambda group_id: self.config

    def heartbeat(self, *, group_id: str, member_id: str, member_epoch: int, now_ms: int,
                  topics: Mapping[str, int], subscribed_topic_names: Sequence[str] | None = None,
                  rack_id: str | None = None, client_id: str = "", client_host: str = "",
                  other_protocol: bool = False) -> Heartbeat:
        """ShareGroupHeartbeat. `topics` are the cluster's topics and partition counts;
        `other_protocol` says a classic or consumer group holds `group_id`.

        Raises InvalidGroupIdError, InvalidRequestError (a join without subscriptions, bad
        ids), GroupIdNotFoundError (another protocol's group), UnknownMemberIdError,
        FencedMemberEpochError; nothing changes then."""
        if not group_id or len(group_id) > MAX_ID_CHARS:
            raise InvalidGroupIdError(f"group id must be 1-{MAX_ID_CHARS} characters")
        if len(member_id) > MAX_ID_CHARS:
            raise InvalidRequestError(f"member id over {MAX_ID_CHARS} characters", field="member_id")
        if subscribed_topic_names is not None and len(subscribed_topic_names) > MAX_SUBSCRIBED_TOPICS:
            raise InvalidRequestError(f"at most {MAX_SUBSCRIBED_TOPICS} topics", field="subscribed_topic_names")
        if other_protocol:
            raise GroupIdNotFoundError(f"group {group_id} is not a share group")
        group = self.groups.get(group_id)
        if member_epoch == LEAVE_EPOCH:
            if group is None or member_id not in group.members:
                raise UnknownMemberIdError(f"member {member_id} is not in share group {group_id}")
            del group.members[member_id]
            self._reassign(group, topics)
            return Heartbeat(member_id, LEAVE_EPOCH, 0, None, ((group_id, member_id),))
        if member_epoch == 0:
            if not subscribed_topic_names:
                raise InvalidRequestError("a joining member must subscribe to topics", field="subscribed_topic_names")
            if group is None:
                group = self.groups[group_id] = ShareGroup(group_id)
            if member_id not in group.members and len(group.members) >= self.config.max_size:
                raise InvalidRequestError(f"share group {group_id} has {self.config.max_size} members "
                                          "(group.share.max.size)", field="group_id")
            member_id = member_id or str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
            # A rejoin with the same id (after a fence) starts over: what it held is released.
            rejoined = member_id in group.members
            group.members[member_id] = ShareMember(member_id, 0, tuple(sorted(set(subscribed_topic_names))))
            removed: tuple[tuple[str, str], ...] = ((group_id, member_id),) if rejoined else ()
        else:
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                raise UnknownMemberIdError(f"member {member_id} is not in share group {group_id}")
            if member_epoch != member.member_epoch:
                raise FencedMemberEpochError(f"member {member_id} has epoch {member.member_epoch}, "
                                             f"not {member_epoch}")
            if subscribed_topic_names is not None:
                member.subscribed_topic_names = tuple(sorted(set(subscribed_topic_names)))
            removed = ()
        member = group.members[member_id]
        member.last_heartbeat_ms = now_ms
        member.rack_id, member.client_id, member.client_host = rack_id, client_id or member.client_id, \
            client_host or member.client_host
        self._reassign(group, topics)
        assignment = None
        if member.member_epoch != group.group_epoch or member_epoch == 0:
            member.member_epoch = group.group_epoch
            member.assignment = {t: tuple(range(topics[t])) for t in member.subscribed_topic_names if t in topics}
            assignment = [{"topic": t, "partitions": list(ps)} for t, ps in sorted(member.assignment.items())]
        return Heartbeat(member_id, member.member_epoch, self.config_of(group_id).heartbeat_interval_ms, assignment,
                         removed)

    def expire(self, now_ms: int, topics: Mapping[str, int]) -> list[tuple[str, str]]:
        """Remove members silent for the session timeout; returns (group_id, member_id) of each."""
        gone: list[tuple[str, str]] = []
        for group in self.groups.values():
            session_timeout_ms = self.config_of(group.group_id).session_timeout_ms
            stale = [m for m, mem in group.members.items()
                     if now_ms - mem.last_heartbeat_ms >= session_timeout_ms]
            for m in stale:
                del group.members[m]
                gone.append((group.group_id, m))
            if stale:
                self._reassign(group, topics)
        return gone

    def next_deadline_ms(self) -> int | None:
        times = [m.last_heartbeat_ms + self.config_of(g.group_id).session_timeout_ms
                 for g in self.groups.values() for m in g.members.values()]
        return min(times) if times else None

    def may_fetch(self, group_id: str, member_id: str, topic: str, partition: int) -> bool:
        """Whether `member_id` of `group_id` is assigned (topic, partition) (ShareFetch's check)."""
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        return member is not None and partition in member.assignment.get(topic, ())

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    def describe(self, group_ids: Sequence[str]) -> list[dict[str, Any]]:
        """ShareGroupDescribe: per id a group or an error (GROUP_ID_NOT_FOUND)."""
        out: list[dict[str, Any]] = []
        for gid in group_ids:
            g = self.groups.get(gid)
            if g is None:
                out.append({"group_id": gid, "error": GroupIdNotFoundError(f"no share group {gid}").to_wire()})
                continue
            out.append({
                "group_id": gid, "state": g.state, "group_epoch": g.group_epoch, "assignment_epoch": g.group_epoch,
                "assignor": ASSIGNOR,
                "members": [{"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "subscribed_topic_names": list(m.subscribed_topic_names),
                             "assignment": [{"topic": t, "partitions": list(ps)}
                                            for t, ps in sorted(m.assignment.items())]}
                            for m in g.members.values()],
            })
        return out

    def list(self) -> list[dict[str, Any]]:
        return [{"group_id": g.group_id, "state": g.state, "members": len(g.members)}
                for g in sorted(self.groups.values(), key=lambda g: g.group_id)]

    def delete(self, group_id: str) -> None:
        """Forget an empty share group. Raises GroupIdNotFoundError, NonEmptyGroupError."""
        g = self.groups.get(group_id)
        if g is None:
            raise GroupIdNotFoundError(f"no share group {group_id}")
        if g.members:
            raise NonEmptyGroupError(f"share group {group_id} has {len(g.members)} members")
        del self.groups[group_id]

    def snapshot(self, group_id: str) -> dict[str, Any] | None:
        """What is persisted of a group (share_state.encode_members), None if it is unknown:
        its epoch and each member's id, epoch, subscriptions and client (not its last
        heartbeat: a restored member's session starts again)."""
        g = self.groups.get(group_id)
        if g is None:
            return None
        return {"group_epoch": g.group_epoch, "members": [
            {"member_id": m.member_id, "member_epoch": m.member_epoch,
             "subscribed_topic_names": list(m.subscribed_topic_names), "rack_id": m.rack_id,
             "client_id": m.client_id, "client_host": m.client_host} for m in g.members.values()]}

    def restore(self, group_id: str, snapshot: Mapping[str, Any], *, now_ms: int, topics: Mapping[str, int]) -> None:
        """A new coordinator takes a group over from its snapshot: same group epoch, members
        with their epochs (their next heartbeats are accepted as before), assignments as the
        `simple` assignor gives them, sessions starting at `now_ms`."""
        g = self.groups[group_id] = ShareGroup(group_id, group_epoch=int(snapshot["group_epoch"]))
        for m in snapshot["members"]:
            subs = tuple(sorted(set(m["subscribed_topic_names"])))
            g.members[m["member_id"]] = ShareMember(
                m["member_id"], int(m["member_epoch"]), subs, m.get("rack_id"), m.get("client_id") or "",
                m.get("client_host") or "", now_ms, {t: tuple(range(topics[t])) for t in subs if t in topics})
        g.partition_counts = {t: topics[t] for t in sorted(g.subscribed()) if t in topics}
        g.subscriptions = {m: mem.subscribed_topic_names for m, mem in g.members.items()}

    def _reassign(self, group: ShareGroup, topics: Mapping[str, int]) -> None:
        counts = {t: topics[t] for t in sorted(group.subscribed()) if t in topics}
        membership = {m: mem.subscribed_topic_names for m, mem in group.members.items()}
        if (counts, membership) != (group.partition_counts, group.subscriptions):
            group.partition_counts, group.subscriptions = counts, membership
            group.group_epoch += 1
