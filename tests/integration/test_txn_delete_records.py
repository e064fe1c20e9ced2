"""DeleteRecords below a transaction that is about to close (librdkafka 0103
`do_test_fatal_idempo_error_without_kip360`, issue 40): the client deletes right after
commit_transaction() returned, before the coordinator's marker reached the partition. raftlog
never cuts an open transaction (issue 42) and used to answer at once with the log start
unchanged (nothing deleted); it now waits, bounded, for the marker, then deletes as Kafka does."""

from __future__ import annotations

import threading
import uuid

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.cluster

DEADLINE_S = 60  # an upper bound on waiting, never a speed claim
RECORDS = 6


def test_delete_records_below_an_open_transaction_waits_for_its_marker_then_deletes(cluster):
    topic = f"txn-del-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=30)[topic].result(timeout=DEADLINE_S)
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "transactional.id": f"tx-{topic}",
                  "transaction.timeout.ms": 60_000})
    p.init_transactions(DEADLINE_S)
    p.begin_transaction()
    for i in range(RECORDS):
        p.produce(topic, b"v%d" % i, partition=0)
    assert p.flush(DEADLINE_S) == 0  # the records are acked (acks=all): under the high watermark
    answers: list = []

    def delete() -> None:  # the transaction is still open: this waits for its marker
        futures = admin.delete_records([TopicPartition(topic, 0, RECORDS)], operation_timeout=30,
                                       request_timeout=DEADLINE_S)
        answers.append(futures[TopicPartition(topic, 0, RECORDS)].result(timeout=DEADLINE_S))

    deleting = threading.Thread(target=delete)
    deleting.start()
    try:
        p.commit_transaction(DEADLINE_S)
    finally:
        deleting.join(DEADLINE_S)
    assert not deleting.is_alive() and answers, "DeleteRecords did not answer"
    # The old code answered at once with the log start left at 0 (the transaction was open).
    assert answers[0].low_watermark == RECORDS, answers[0]
