"""Key partitioner (Kafka's murmur2, byte for byte: raftlog/base/murmur2.py) and the sticky partitioner for keyless records.

Invariants:
* `murmur2(data)` equals Java's `org.apache.kafka.common.utils.Utils.murmur2` as a signed
  32-bit int (seed 0x9747b28c), so a keyed record lands on the partition a Java client, Kafka
  Streams or librdkafka's `murmur2_random` would pick: `(murmur2(key) & 0x7fffffff) % n`.
* The sticky partitioner (KIP-480, as Kafka's producer before KIP-794) keeps one partition
  per topic while its open batch has room; when a keyless record would open a new batch
  (the batch filled up, or it was sent), `on_new_batch` picks another partition uniformly
  among the available ones (those with a known leader), avoiding the one just used when
  there is a choice. Randomness comes only from the injected `random.Random`.
"""

from __future__ import annotations

import random

from raftlog.base.murmur2 import murmur2, partition_for_key, to_positive

__all__ = ["murmur2", "to_positive", "partition_for_key", "StickyPartitioner"]


class StickyPartitioner:
    """Per-topic sticky choice for keyless records. Not thread-safe (the core owns it)."""

    __slots__ = ("_rng", "_sticky")

    def __init__(self, rng: random.Random):
        self._rng = rng
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int, available: list[int] | tuple[int, ...]) -> int:
        """The sticky partition of `topic`, choosing one first if there is none.

        `available` lists the partitions with a known leader; when it is empty, any of
        `range(num_partitions)` is chosen (the record waits in the accumulator for a leader).
        """
        p = self._sticky.get(topic)
        if p is not None and p < num_partitions:
            return p
        return self._choose(topic, num_partitions, available, avoid=None)

    def on_new_batch(self, topic: str, partition: int, num_partitions: int, available) -> int:
        """A keyless record for sticky `partition` would open a new batch: move on (if it
        is still the sticky one) and return the partition to use now."""
        if self._sticky.get(topic) == partition:
            return self._choose(topic, num_partitions, available, avoid=partition)
        return self.partition(topic, num_partitions, available)

    def forget(self, topic: str) -> None:
        self._sticky.pop(topic, None)

    def _choose(self, topic: str, num_partitions: int, available, avoid: int | None) -> int:
        candidates = [p for p in available if p < num_partitions] or list(range(num_partitions))
        if avoid is not None and len(candidates) > 1:
            candidates = [p for p in candidates if p != avoid]
        p = candidates[self._rng.randrange(len(candidates))]
        self._sticky[topic] = p
        return p
