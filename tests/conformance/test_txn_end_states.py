"""Issue 42: EndTxn(abort) from a Transactions V1 producer whose transaction the coordinator
never saw begin (librdkafka sends it after an AddPartitionsToTxn of unknown outcome that was
never applied): raftlog answers what Apache Kafka 4.4 answers, over the Kafka wire (EndTxn v3;
InitProducerId v4; the coordinator found with FindCoordinator key_type 1)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.producer.transaction import EndTxnRequest, InitProducerIdRequest

from differential import assert_same
from test_kafka_group_versions import Conn

pytestmark = [pytest.mark.reference, pytest.mark.cluster]

DEADLINE_S = 90  # an upper bound on waiting (the first FindCoordinator creates __transaction_state)
INVALID_TXN_STATE = 48
RETRIABLE = (14, 15, 16, 51)  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS


def _retry(fn: Any) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        r = fn()
        if r.error_code not in RETRIABLE or time.monotonic() > deadline:
            return r
        time.sleep(0.3)


def _abort_without_a_transaction(bootstrap: str) -> dict[str, int]:
    tid = f"end-states-{uuid.uuid4().hex[:8]}"
    boot = Conn(bootstrap.split(",")[0])
    try:
        found = _retry(lambda: boot.call(FindCoordinatorRequest, 3, key=tid, key_type=1))
    finally:
        boot.close()
    assert found.error_code == 0, found
    host = bootstrap.split(",")[0].rpartition(":")[0]  # loopback: the reference advertises its own name
    conn = Conn(f"{host}:{found.port}")
    try:
        init = _retry(lambda: conn.call(InitProducerIdRequest, 4, transactional_id=tid, transaction_timeout_ms=60_000,
                                        producer_id=-1, producer_epoch=-1))
        assert init.error_code == 0, init

        def end(commit: bool) -> int:
            return _retry(lambda: conn.call(EndTxnRequest, 3, transactional_id=tid, producer_id=init.producer_id,
                                            producer_epoch=init.producer_epoch, committed=commit)).error_code

        return {"abort_empty": end(False), "commit_empty": end(True)}
    finally:
        conn.close()


def test_abort_of_a_transaction_never_begun_answers_as_kafka(sides):
    answers = sides.run(_abort_without_a_transaction)
    same = assert_same(answers, "EndTxn with no transaction begun (state Empty)")
    assert same == {"abort_empty": INVALID_TXN_STATE, "commit_empty": INVALID_TXN_STATE}  # Kafka 4.4's answer, fatal to librdkafka
