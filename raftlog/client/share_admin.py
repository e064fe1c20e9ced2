"""Share-group administration (KIP-932; Kafka's kafka-share-groups): list, describe with each
share partition's start offset and lag, reset the start offsets of an empty group, delete.

    with ShareGroupAdmin("127.0.0.1:9093") as sa:
        sa.list_groups() -> [{group_id, state, members, coordinator}]   (every coordinator asked)
        sa.describe_group(g) -> {group_id, state, group_epoch, members: [...],
                                 partitions: [{topic, partition, start_offset, log_end_offset, lag, in_flight}]}
        sa.reset_offsets(g, topic, "earliest" | "latest" | offset) -> {(topic, partition): offset}
        sa.delete_group(g)

Requests go to the group's coordinator (the leader of its `__consumer_offsets` partition) and
to each partition's leader (which keeps the share partition), over `Admin.request`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from raftlog.base.topics import OFFSETS_TOPIC, OFFSETS_TOPIC_PARTITIONS, partition_for_group
from raftlog.client.blocking import Admin
from raftlog.base.errors import error_from_wire
from raftlog.client.request import EARLIEST, LATEST, list_offsets_request, parse_list_offsets

__all__ = ["ShareGroupAdmin"]


class ShareGroupAdmin:
    def __init__(self, bootstrap: str | Iterable[str], *, request_timeout_ms: int = 30_000, **options: Any):
        self.admin = Admin(bootstrap, request_timeout_ms=request_timeout_ms, **options)

    @classmethod
    def of(cls, admin: Admin) -> ShareGroupAdmin:
        """One over an Admin the caller owns (close() then closes it)."""
        self = cls.__new__(cls)
        self.admin = admin
        return self

    def _coord(self, group_id: str, request: dict) -> dict:
        return self.admin.request({**request, "group_id": group_id},
                                  route=(OFFSETS_TOPIC, partition_for_group(group_id)))

    def list_groups(self) -> list[dict]:
        answers = self.admin.request_many(
            [({"op": "share_groups_list"}, (OFFSETS_TOPIC, p)) for p in range(OFFSETS_TOPIC_PARTITIONS)])
        seen: dict[str, dict] = {}
        for a in answers:
            for g in a.get("groups") or ():
                seen[g["group_id"]] = g
        return [seen[k] for k in sorted(seen)]

    def _ends(self, topic: str, partitions: list[int], latest: bool = True) -> dict[int, int]:
        spec = LATEST if latest else EARLIEST
        answers = self.admin.request_many([(list_offsets_request([(topic, p, spec)]), (topic, p)) for p in partitions])
        out = {}
        for p, a in zip(partitions, answers):
            (found,) = parse_list_offsets(a).values()
            out[p] = found[0]
        return out

    def describe_group(self, group_id: str) -> dict:
        """Raises GroupIdNotFoundError for a group the coordinator does not know."""
        (g,) = self._coord(group_id, {"op": "share_group_describe", "group_ids": [group_id]})["groups"]
        if g.get("error"):
            raise error_from_wire(g["error"])
        topics = sorted({t for m in g["members"] for t in m["subscribed_topic_names"]})
        rows = []
        for topic in topics:
            info = self.admin.describe_topics([topic]).get(topic)
            if info is None:
                continue
            parts = list(range(len(info.partitions)))
            ends = self._ends(topic, parts)
            for p in parts:
                o = self.admin.request({"op": "share_group_offsets", "group_id": group_id, "topic": topic,
                                        "partition": p}, route=(topic, p))
                start = o.get("start_offset")
                rows.append({"topic": topic, "partition": p, "start_offset": start, "log_end_offset": ends[p],
                             "lag": None if start is None else max(0, ends[p] - start),
                             "in_flight": o.get("in_flight") or []})
        return {**g, "partitions": rows}

    def reset_offsets(self, group_id: str, topic: str, to: str | int) -> dict[tuple[str, int], int]:
        """Start the group's share partitions of `topic` again at `to` (the group must have no
        members: the leaders refuse while records are held)."""
        info = self.admin.describe_topics([topic])[topic]
        parts = list(range(len(info.partitions)))
        if to in ("earliest", "latest"):
            targets = self._ends(topic, parts, latest=to == "latest")
        else:
            targets = {p: int(to) for p in parts}
        for p, offset in targets.items():
            self.admin.request({"op": "share_group_reset", "group_id": group_id, "topic": topic, "partition": p,
                                "offset": offset}, route=(topic, p))
        return {(topic, p): o for p, o in targets.items()}

    def delete_group(self, group_id: str) -> None:
        """Raises GroupIdNotFoundError, NonEmptyGroupError."""
        self._coord(group_id, {"op": "share_group_delete"})

    def close(self) -> None:
        self.admin.close()

    def __enter__(self) -> ShareGroupAdmin:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
