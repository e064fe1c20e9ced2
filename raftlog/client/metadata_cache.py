"""The client's routing cache: topics → partitions → leader (with its epoch), broker ids →
addresses. Pure (no I/O, no clock: `now_ms` is an argument); the core owns one.

Invariants:
* The cache never moves a partition to an older leader epoch than the one it holds (a broker
  behind on metadata answers with an older one).
* A NOT_LEADER hint is applied at once; a hint naming no leader, or a broker whose address is
  unknown, leaves the partition leaderless until a refresh says more.
* Bootstrap addresses get negative broker ids (-1, -2, ...), as in Kafka.
"""

from __future__ import annotations

from typing import Iterable

from raftlog.base.errors import RaftlogError
from raftlog.client.request import BrokerInfo, ClusterMetadata, TopicInfo

__all__ = ["MetadataCache", "parse_address"]


def parse_address(address: str) -> tuple[str, int]:
    """'host:port' (or '[v6]:port') -> (host, port). Raises ValueError on anything else."""
    if not isinstance(address, str):
        raise ValueError(f"address must be 'host:port', got {address!r}")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"address must be 'host:port', got {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


class MetadataCache:
    """Topics → partitions → leader, brokers → address. Pure; the core owns one.

    `leader(topic, partition)` is on the producer's drain path: two dict/list lookups.
    `leaders` ({topic: [leader id or None by partition]}) is read-only outside this class.
    """

    def __init__(self, bootstrap: Iterable[str]):
        self.bootstrap: dict[int, tuple[str, int]] = {}
        for i, addr in enumerate(bootstrap):
            self.bootstrap[-1 - i] = parse_address(addr)
        if not self.bootstrap:
            raise ValueError("bootstrap needs at least one 'host:port'")
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.topic_errors: dict[str, RaftlogError] = {}
        self.cluster_id: str | None = None
        self.controller_id: int | None = None
        self.leaders: dict[str, list[int | None]] = {}  # read-only outside
        self._epochs: dict[str, list[int]] = {}
        self._available: dict[str, tuple[int, ...]] = {}
        self.updated_ms: int | None = None
        # Why partitions have no live leader, and why the last answering node could not
        # vouch for its metadata, as the last answer said (for error messages).
        self.offline: dict[tuple[str, int], str] = {}
        self.controller_problem: str | None = None
        self.max_request_bytes: int | None = None  # the nodes' limit on a request, as last answered

    def address(self, broker_id: int) -> tuple[str, int] | None:
        b = self.brokers.get(broker_id)
        if b is not None:
            return b.host, b.port
        return self.bootstrap.get(broker_id)

    def update(self, md: ClusterMetadata, now_ms: int) -> None:
        """Merge a metadata answer: brokers replaced, answered topics replaced (a topic the
        broker says does not exist is dropped), a partition's older leader epoch ignored."""
        self.cluster_id = md.cluster_id
        self.controller_id = md.controller_id
        self.controller_problem = md.controller_problem
        if md.max_request_bytes is not None:
            self.max_request_bytes = md.max_request_bytes
        if md.brokers:
            self.brokers = dict(md.brokers)
        for name, err in md.topic_errors.items():
            self._drop(name)
            self.topic_errors[name] = err
        for name, t in md.topics.items():
            self.topic_errors.pop(name, None)
            old_epochs = self._epochs.get(name)
            leaders: list[int | None] = [None] * len(t.partitions)
            epochs = [-1] * len(t.partitions)
            for p in t.partitions:
                if not 0 <= p.partition < len(t.partitions):
                    continue  # partitions must be 0..n-1; ignore a stray entry
                if p.offline_reason is not None:
                    self.offline[(name, p.partition)] = p.offline_reason
                else:
                    self.offline.pop((name, p.partition), None)
                if old_epochs is not None and p.partition < len(old_epochs) and (
                    old_epochs[p.partition] > p.leader_epoch
                ):
                    # Stale answer (a broker behind on metadata): keep what we know.
                    leaders[p.partition] = self.leaders[name][p.partition]
                    epochs[p.partition] = old_epochs[p.partition]
                else:
                    leaders[p.partition] = p.leader
                    epochs[p.partition] = p.leader_epoch
            self.topics[name] = t
            self.leaders[name] = leaders
            self._epochs[name] = epochs
            self._available[name] = tuple(i for i, ld in enumerate(leaders) if ld is not None)
        self.updated_ms = now_ms

    def why_no_leader(self, topic: str, partition: int) -> str:
        """Why `topic`-`partition` has no leader to send to, in words (for errors)."""
        reason = self.offline.get((topic, partition)) or "no leader known yet"
        if self.controller_problem and self.controller_problem not in reason:
            reason += f"; {self.controller_problem}"
        return f"{topic}-{partition}: {reason}"

    def _drop(self, name: str) -> None:
        self.topics.pop(name, None)
        self.leaders.pop(name, None)
        self._epochs.pop(name, None)
        self._available.pop(name, None)

    def partition_count(self, topic: str) -> int | None:
        leaders = self.leaders.get(topic)
        return None if leaders is None else len(leaders)

    def leader(self, topic: str, partition: int) -> int | None:
        leaders = self.leaders.get(topic)
        if leaders is None or partition >= len(leaders):
            return None
        return leaders[partition]

    def leader_epoch(self, topic: str, partition: int) -> int:
        epochs = self._epochs.get(topic)
        return -1 if epochs is None or partition >= len(epochs) else epochs[partition]

    def available_partitions(self, topic: str) -> tuple[int, ...]:
        return self._available.get(topic, ())

    def apply_leader_hint(
        self, topic: str, partition: int, leader_id: int | None, leader: str | None
    ) -> bool:
        """Use a NOT_LEADER answer's hint now. Returns True if the cache changed."""
        leaders = self.leaders.get(topic)
        if leaders is None or not 0 <= partition < len(leaders):
            return False
        if isinstance(leader_id, int) and leader_id >= 0:
            if leader_id not in self.brokers and isinstance(leader, str):
                try:
                    host, port = parse_address(leader)
                except ValueError:
                    host = None
                if host is not None:
                    self.brokers[leader_id] = BrokerInfo(leader_id, host, port)
            if leader_id not in self.brokers:
                leaders[partition] = None
            else:
                leaders[partition] = leader_id
        else:
            leaders[partition] = None  # an election is running: wait for a refresh
        self._available[topic] = tuple(i for i, ld in enumerate(leaders) if ld is not None)
        return True

    def invalidate_broker(self, broker_id: int) -> None:
        """Forget `broker_id` as a leader (its connection died); a refresh will say more."""
        for topic, leaders in self.leaders.items():
            if broker_id in leaders:
                for i, ld in enumerate(leaders):
                    if ld == broker_id:
                        leaders[i] = None
                self._available[topic] = tuple(i for i, ld in enumerate(leaders) if ld is not None)
