"""The group coordinator shell's KIP-848 client ops (a mixin of `GroupCoordinatorService`,
service.py, which registers them): `consumer_group_heartbeat` and `consumer_group_describe`,
and the consumer groups' part of /metrics.

Ports (PROTOCOL.md's shapes; the Kafka listener adapts ConsumerGroupHeartbeat 68 and
ConsumerGroupDescribe 69 to them, topic ids to names):

    consumer_group_heartbeat {group_id, member_id, member_epoch, instance_id?, rack_id?,
        rebalance_timeout_ms (-1: unchanged), subscribed_topic_names? [str],
        subscribed_topic_regex?, server_assignor?, topic_partitions? [{topic, partitions}]}
      -> {member_id, member_epoch, heartbeat_interval_ms, assignment: [{topic, partitions}] | null}
    consumer_group_describe {group_ids} -> {groups: [...]}   (consumer_group_ops.describe)

The topics a heartbeat is resolved against (names and regexes) are the complete,
non-internal topics of the node's metadata image at that moment, with their partition counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raftlog.base.errors import InvalidRequestError
from raftlog.base.metrics import Metric, gauge_family
from raftlog.base.protocol import Request, field

__all__ = ["ConsumerGroupHandlers", "MAX_OWNED_TOPICS"]

MAX_OWNED_TOPICS = 10_000


class ConsumerGroupHandlers:
    """Mixed into GroupCoordinatorService: uses its core, `_apply`, `_answer`, `_wait_ms`,
    `_clock_ms` and `metadata`."""

    core: Any
    metadata: Any
    _topics_cache: tuple[Any, dict[str, int]] | None = None

    def _topic_counts(self) -> dict[str, int]:
        image = self.metadata.image
        cached = self._topics_cache
        if cached is not None and cached[0] is image:
            return cached[1]
        counts: dict[str, int] = {}
        for name in image.topic_names(include_internal=False):
            t = image.topic(name)
            if t is not None and t.complete:
                counts[name] = t.partition_count
        self._topics_cache = (image, counts)
        return counts

    async def _consumer_group_heartbeat(self, request: Request) -> dict[str, Any]:
        raw = field(request, "topic_partitions", list, items=dict, default=None, nullable=True)
        owned = None
        if raw is not None:
            if len(raw) > MAX_OWNED_TOPICS:
                raise InvalidRequestError(f"at most {MAX_OWNED_TOPICS} topics", field="topic_partitions")
            owned = frozenset(
                (field(d, "topic", str, where=f"topic_partitions[{i}]"), p)
                for i, d in enumerate(raw)
                for p in field(d, "partitions", list, items=int, where=f"topic_partitions[{i}]"))
        result = self.core.consumer_group_heartbeat(  # type: ignore[attr-defined]
            group_id=field(request, "group_id", str),
            member_id=field(request, "member_id", str, default=""),
            member_epoch=field(request, "member_epoch", int),
            topics=self._topic_counts(),
            now_ms=self._clock_ms(),  # type: ignore[attr-defined]
            instance_id=field(request, "instance_id", str, default=None, nullable=True),
            rack_id=field(request, "rack_id", str, default=None, nullable=True),
            rebalance_timeout_ms=field(request, "rebalance_timeout_ms", int, default=-1),
            subscribed_topic_names=field(request, "subscribed_topic_names", list, items=str, default=None,
                                         nullable=True),
            subscribed_topic_regex=field(request, "subscribed_topic_regex", str, default=None, nullable=True),
            server_assignor=field(request, "server_assignor", str, default=None, nullable=True),
            owned=owned,
            client_id=field(request, "client_id", str, default=""),
            client_host=field(request, "client_host", str, default=""),
        )
        answer = await self._answer(self._apply(result), self._wait_ms(request))  # type: ignore[attr-defined]
        tps = answer.get("assignment")
        if tps is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in tps:
                by_topic.setdefault(t, []).append(p)
            answer = {**answer, "assignment": [{"topic": t, "partitions": ps} for t, ps in sorted(by_topic.items())]}
        return answer

    async def _consumer_group_describe(self, request: Request) -> dict[str, Any]:
        ids = field(request, "group_ids", list, items=str)
        if len(ids) > 1000:
            raise InvalidRequestError("at most 1000 group ids", field="group_ids")
        return await self._answer(self._apply(self.core.consumer_group_describe(ids)), 0)  # type: ignore[attr-defined]

    def consumer_group_metrics(self) -> list[Metric]:
        """Per KIP-848 group coordinated here: its epochs and members by state."""
        epochs: dict[tuple[str, str], int] = {}
        members: dict[tuple[str, str], int] = {}
        for g in self.core.groups():
            cg = self.core.consumer_group(g.group_id)
            if cg is None:
                continue
            epochs[(g.group_id, "group")] = cg.group_epoch
            epochs[(g.group_id, "assignment")] = cg.assignment_epoch
            counts: Mapping[str, int] = {}
            for m in cg.members.values():
                counts = {**counts, m.state: counts.get(m.state, 0) + 1}
            for state, n in counts.items():
                members[(g.group_id, state)] = n
        return [
            gauge_family("raftlog_consumer_group_epoch", "A KIP-848 consumer group's group epoch and "
                         "target assignment epoch.", ("group", "epoch"), epochs),
            gauge_family("raftlog_consumer_group_members", "Members of a KIP-848 consumer group by "
                         "reconciliation state (stable, unrevoked_partitions, unreleased_partitions).",
                         ("group", "state"), members),
        ]
