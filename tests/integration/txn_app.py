"""A consume-transform-produce application for the transaction tests (issue 42; SIGKILL must be
real, so it is its own process): confluent-kafka's transactional producer and a read_committed
consumer in GROUP read SRC, write each value `v` as `v + b"!"` to DST (same partition) and
commit the input offsets with send_offsets_to_transaction, one transaction per poll. It writes
one JSON line per event to stdout, flushed at once:

    {"ev": "ready"}                              (init_transactions done: older instances fenced)
    {"ev": "flushed", "txn": n, "records": k}    (transaction n's output written, not committed)
    {"ev": "committed", "txn": n, "records": k, "total": t}
    {"ev": "holding", "txn": n}                  (--hold-at n: flushed, now waits to be killed)
    {"ev": "done", "total": t}                   (--until-end: every input record processed)

    python txn_app.py BOOTSTRAP SRC DST GROUP TRANSACTIONAL_ID [--hold-at N] [--until-end]

--until-end: exit when the group's position reaches the end of every SRC partition (checked
after each commit and on an empty poll). Every wait is bounded (--deadline-s).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import confluent_kafka as ck

TIMEOUT_S = 60.0


def out(**obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def at_end(consumer: ck.Consumer) -> bool:
    assignment = consumer.assignment()
    if not assignment:
        return False
    for tp in consumer.position(assignment):
        _, high = consumer.get_watermark_offsets(tp, timeout=TIMEOUT_S)
        if (tp.offset if tp.offset >= 0 else 0) < high:  # no position yet: at the end only if empty
            return False
    return True


def main() -> int:
    ap = argparse.ArgumentParser()
    for name in ("bootstrap", "src", "dst", "group", "transactional_id"):
        ap.add_argument(name)
    ap.add_argument("--hold-at", type=int, default=None)
    ap.add_argument("--until-end", action="store_true")
    ap.add_argument("--deadline-s", type=float, default=180.0)
    a = ap.parse_args()
    deadline = time.monotonic() + a.deadline_s
    producer = ck.Producer({"bootstrap.servers": a.bootstrap, "transactional.id": a.transactional_id,
                            "transaction.timeout.ms": 60_000})
    producer.init_transactions(TIMEOUT_S)
    out(ev="ready")
    consumer = ck.Consumer({"bootstrap.servers": a.bootstrap, "group.id": a.group,
                            "auto.offset.reset": "earliest", "enable.auto.commit": False,
                            "isolation.level": "read_committed", "session.timeout.ms": 6000})
    consumer.subscribe([a.src])
    txn = total = 0
    while time.monotonic() < deadline:
        msgs = [m for m in consumer.consume(10, 1.0) if not m.error()]
        if not msgs:
            if a.until_end and at_end(consumer):
                out(ev="done", total=total)
                consumer.close()
                return 0
            continue
        txn += 1
        producer.begin_transaction()
        for m in msgs:
            producer.produce(a.dst, m.value() + b"!", partition=m.partition())
        producer.flush(TIMEOUT_S)
        out(ev="flushed", txn=txn, records=len(msgs))
        if a.hold_at == txn:
            out(ev="holding", txn=txn)
            sys.stdin.readline()  # the test SIGKILLs this process here, mid transaction
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), TIMEOUT_S)
        producer.commit_transaction(TIMEOUT_S)
        total += len(msgs)
        out(ev="committed", txn=txn, records=len(msgs), total=total)
    out(ev="deadline", total=total)
    return 1


if __name__ == "__main__":
    sys.exit(main())
