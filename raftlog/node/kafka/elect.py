"""ElectLeaders (43) on the Kafka listener: `kafka-leader-election --election-type preferred |
unclean` and the admin clients' electLeaders (docs/operator-apis.md).

PREFERRED calls the metadata port's `elect_leaders` (metadata/port.py; forwarded to the active controller, which
asks each partition's leader to hand leadership over to its preferred replica, the first of
its replicas; metadata/election.py judges each partition): per partition NONE once the
leader accepted, ELECTION_NOT_NEEDED when the preferred replica already leads,
PREFERRED_LEADER_NOT_AVAILABLE when its broker is fenced or the partition has no leader to
hand over from. A null partition list means every partition off its preferred replica.

UNCLEAN maps onto raftlog's unclean recovery (`recover_partition ... unclean: true`, the
port's operator op; raft.py "Damaged storage"): a partition with a leader answers
ELECTION_NOT_NEEDED; otherwise this broker's own replica of it is recovered, so the request
must go to a broker that hosts one (another answers INVALID_REQUEST naming the replicas).
A null partition list is refused (INVALID_REQUEST): an unclean election is named one by one.
The whole request needs ALTER on the cluster (Kafka's rule); versions 0-2 (v0: preferred).
"""

from __future__ import annotations

from typing import Any, Final

from kafka.protocol.admin.topics import ElectLeadersResponse

from raftlog.base.errors import RaftlogError
from raftlog.node.kafka import errors
from raftlog.node.kafka.context import Call, KafkaContext, Later, Reply

__all__ = ["HANDLERS"]

ELECT_LEADERS_KEY: Final = 43
PREFERRED, UNCLEAN = 0, 1
ELECTION_NOT_NEEDED: Final = 84


async def _unclean(ctx: KafkaContext, topic: str, partition: int) -> tuple[int, str | None]:
    p = ctx.metadata.image.partition(topic, partition)
    if p is None:
        return errors.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} does not exist"
    if p.leader != -1:
        return ELECTION_NOT_NEEDED, f"{topic}-{partition} has a leader, broker {p.leader}"
    try:
        await ctx.port().recover_partition(topic, partition, unclean=True)
        return errors.NONE, None
    except Exception as exc:  # noqa: BLE001 - this partition's answer
        return errors.kafka_error(exc)


async def handle_elect_leaders(ctx: KafkaContext, call: Call) -> Reply:
    R = ElectLeadersResponse
    Result = R.ReplicaElectionResult
    Part = Result.PartitionResult
    request = call.request
    election_type = getattr(request, "election_type", PREFERRED) if call.version >= 1 else PREFERRED
    items = None if request.topic_partitions is None else [
        (t.topic, p) for t in request.topic_partitions for p in t.partitions]

    def whole(code: int, message: str | None) -> Reply:
        return R(throttle_time_ms=0, error_code=code, replica_election_results=[])

    async def answer() -> Reply:
        try:
            ctx.admin().authorize_elections()  # the whole request first: a refused one learns nothing
        except RaftlogError as exc:
            return whole(*errors.kafka_error(exc))
        results: list[tuple[str, int, int, str | None]] = []
        if election_type == UNCLEAN:
            if items is None:
                return whole(errors.INVALID_REQUEST, "an unclean election names its partitions")
            for topic, partition in items:
                results.append((topic, partition, *await _unclean(ctx, topic, partition)))
        elif election_type == PREFERRED:
            try:
                elected = await ctx.admin().elect_leaders(items)
            except Exception as exc:  # noqa: BLE001 - the whole request's answer
                return whole(*errors.kafka_error(exc))
            for r in elected:
                results.append((r.topic, r.partition, errors.NONE if r.error is None else errors.kafka_error_code(r.error.code),
                                None if r.error is None else r.error.message))
        else:
            return whole(errors.INVALID_REQUEST, f"election type {election_type} is not PREFERRED (0) or UNCLEAN (1)")
        by_topic: dict[str, list[Any]] = {}
        for topic, partition, code, message in results:
            by_topic.setdefault(topic, []).append(Part(partition_id=partition, error_code=code, error_message=message))
        return R(throttle_time_ms=0, error_code=errors.NONE,
                 replica_election_results=[Result(topic=t, partition_result=ps) for t, ps in by_topic.items()])

    return Later(answer)


HANDLERS: Final = {ELECT_LEADERS_KEY: handle_elect_leaders}
