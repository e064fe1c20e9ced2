"""OffsetDelete (Kafka API 47, `kafka-consumer-groups --delete-offsets`, Admin
deleteConsumerGroupOffsets) on a three-node cluster with kafka-python's admin client: an Empty
group's committed offset is deleted and the others kept, a partition of a topic that does not
exist is UNKNOWN_TOPIC_OR_PARTITION, and a group that does not exist is GROUP_ID_NOT_FOUND, as in
Kafka (the conformance suite found it unserved, issue 40)."""

from __future__ import annotations

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import GroupIdNotFoundError, KafkaError, NoError, UnknownTopicOrPartitionError
from kafka.structs import OffsetAndMetadata, TopicPartition


def test_offset_delete_removes_one_partitions_offset(cluster) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap(), request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic("od-topic", 2, 3)])
        tp0, tp1 = TopicPartition("od-topic", 0), TopicPartition("od-topic", 1)

        def commit() -> bool:
            try:
                return admin.alter_group_offsets(
                    "od-group", {tp0: OffsetAndMetadata(5, "", -1), tp1: OffsetAndMetadata(3, "", -1)}) is not None
            except KafkaError as exc:  # e.g. COORDINATOR_NOT_AVAILABLE while __consumer_offsets elects
                if not exc.retriable:
                    raise
                return False

        cluster.wait_for(commit, 60, "offsets committed")
        answer = admin.delete_group_offsets("od-group", [tp1, TopicPartition("od-missing", 0)])
        assert answer == {tp1: NoError, TopicPartition("od-missing", 0): UnknownTopicOrPartitionError}
        left = admin.list_group_offsets("od-group")  # {group: {TopicPartition: OffsetAndMetadata}}
        assert {tp: o.offset for tp, o in left["od-group"].items()} == {tp0: 5}

        def no_such_group() -> bool:
            try:
                admin.delete_group_offsets("od-no-such-group", [tp0])
            except GroupIdNotFoundError:
                return True
            except KafkaError as exc:  # its coordinator's partition of __consumer_offsets may be electing
                if not exc.retriable:
                    raise
            return False

        cluster.wait_for(no_such_group, 60, "GROUP_ID_NOT_FOUND for a group that does not exist")
    finally:
        admin.close()
