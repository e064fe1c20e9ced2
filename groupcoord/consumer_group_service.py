"""The group coordinator shell's KIP-848 ops (a mixin of `GroupCoordinatorService`, service.py):
`consumer_group_heartbeat` and `consumer_group_describe` of the group port (groupcoord/port.py;
the native adapter raftlog/node/native_groups.py keeps PROTOCOL.md's shapes, the Kafka listener
adapts ConsumerGroupHeartbeat 68 and ConsumerGroupDescribe 69 to them, topic ids to names),
and the consumer groups' part of /metrics.

The topics a heartbeat is resolved against (names and regexes) are the complete topics of the
node's metadata image at that moment, internal ones included (`__consumer_offsets`: Kafka's
broker resolves a SubscribedTopicRegex over all topics), with their partition counts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from groupcoord.coordinator import GroupCoordinator, Result
from groupcoord.internal_topic import MetadataView
from groupcoord.port import (
    ConsumerGroupDescription,
    ConsumerHeartbeat,
    ConsumerHeartbeatAnswer,
    ConsumerMember,
    TopicPartitions,
)
from raftlog.base.errors import InvalidRequestError, error_from_wire
from raftlog.base.metrics import Metric, gauge_family

__all__ = ["ConsumerGroupHandlers", "MAX_OWNED_TOPICS"]

MAX_OWNED_TOPICS = 10_000


class ConsumerGroupHandlers:
    """Mixed into GroupCoordinatorService: uses its core, `_apply`, `_answer`, `_budget_ms`,
    `_clock_ms` and `metadata`."""

    core: GroupCoordinator
    metadata: MetadataView
    _clock_ms: Callable[[], int]
    _apply: Callable[[Result], Any]
    _answer: Callable[[Any, int], Awaitable[dict[str, Any]]]
    _budget_ms: Callable[[int | None], int]
    _topics_cache: tuple[Any, dict[str, int]] | None = None

    def _topic_counts(self) -> dict[str, int]:
        image = self.metadata.image
        cached = self._topics_cache
        if cached is not None and cached[0] is image:
            return cached[1]
        counts: dict[str, int] = {}
        for name in image.topic_names(include_internal=True):
            t = image.topic(name)
            if t is not None and t.complete:
                counts[name] = t.partition_count
        self._topics_cache = (image, counts)
        return counts

    async def consumer_group_heartbeat(self, request: ConsumerHeartbeat) -> ConsumerHeartbeatAnswer:
        owned = None
        if request.owned is not None:
            if len(request.owned) > MAX_OWNED_TOPICS:
                raise InvalidRequestError(f"at most {MAX_OWNED_TOPICS} topics", field="topic_partitions")
            owned = frozenset((tp.topic, p) for tp in request.owned for p in tp.partitions)
        result = self.core.consumer_group_heartbeat(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            topics=self._topic_counts(),
            now_ms=self._clock_ms(),
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            subscribed_topic_names=None if request.subscribed_topic_names is None else list(request.subscribed_topic_names),
            subscribed_topic_regex=request.subscribed_topic_regex,
            server_assignor=request.server_assignor,
            owned=owned,
            client_id=request.client_id,
            client_host=request.client_host,
        )
        answer = await self._answer(self._apply(result), self._budget_ms(request.timeout_ms))
        tps = answer.get("assignment")
        assignment = None
        if tps is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in tps:
                by_topic.setdefault(t, []).append(p)
            assignment = [TopicPartitions(t, ps) for t, ps in sorted(by_topic.items())]
        return ConsumerHeartbeatAnswer(answer["member_id"], answer["member_epoch"], answer["heartbeat_interval_ms"],
                                       assignment)

    async def consumer_group_describe(self, group_ids: Sequence[str]) -> list[ConsumerGroupDescription]:
        if len(group_ids) > 1000:
            raise InvalidRequestError("at most 1000 group ids", field="group_ids")
        answer = await self._answer(self._apply(self.core.consumer_group_describe(list(group_ids))), 0)
        out = []
        for g in answer.get("groups") or ():
            if g.get("error") is not None:
                out.append(ConsumerGroupDescription(g["group_id"], error=error_from_wire(g["error"])))
                continue
            out.append(ConsumerGroupDescription(
                g["group_id"], g["state"], g["group_epoch"], g["assignment_epoch"], g["assignor"],
                [ConsumerMember(m["member_id"], m["instance_id"], m["rack_id"], m["member_epoch"], m["state"],
                                m["client_id"], m["client_host"], m["subscribed_topic_names"],
                                m["subscribed_topic_regex"], _rows(m["assignment"]), _rows(m["pending_revocation"]),
                                _rows(m["target_assignment"]), m["classic"]) for m in g["members"]]))  # fmt: skip
        return out

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


def _rows(rows: Sequence[Mapping[str, Any]]) -> list[TopicPartitions]:
    return [TopicPartitions(r["topic"], r["partitions"]) for r in rows]
