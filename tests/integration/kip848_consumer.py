"""A confluent-kafka consumer with `group.protocol=consumer` (KIP-848) as its own process, for
tests/integration/test_kip848_kafka.py (SIGKILL must be real). It consumes in GROUP, commits
each record synchronously after it is read, and writes one JSON line per event to stdout,
flushed at once (t = time.monotonic(), one clock for every process of the machine):

    {"ev": "assigned", "partitions": [[topic, p], ...], "t": ...}   (incremental, after the callback)
    {"ev": "revoked", "partitions": [...], "t": ...}                 (before the coordinator hears of it)
    {"ev": "rec", "topic": t, "p": p, "o": offset, "v": value, "t": ...}
    {"ev": "committed", "topic": t, "p": p, "o": next offset, "t": ...}
    {"ev": "error", "code": name, "message": str, "t": ...}

    python kip848_consumer.py BOOTSTRAP GROUP (--topic NAME | --regex RE) [--client-id NAME]
                              [--protocol consumer|classic]
`--protocol classic` makes it a classic member (JoinGroup/SyncGroup/Heartbeat, the eager
range assignor: an online upgrade's members before and after). Stops on SIGTERM: closes
(leaves the group: epoch -1, or LeaveGroup).
"""

from __future__ import annotations

import argparse
import sys

from confluent_kafka import Consumer, KafkaException

from group_consumer import out, stop_on_sigterm  # the same JSON-lines events (this script's folder is on sys.path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("group")
    ap.add_argument("--topic")
    ap.add_argument("--regex")
    ap.add_argument("--client-id", default="kip848-consumer")
    ap.add_argument("--protocol", choices=("consumer", "classic"), default="consumer")
    args = ap.parse_args()
    stop = stop_on_sigterm()
    classic = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 500} if args.protocol == "classic" else {}
    consumer = Consumer({
        **classic, "bootstrap.servers": args.bootstrap, "group.id": args.group, "group.protocol": args.protocol,
        "client.id": args.client_id, "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "topic.metadata.refresh.interval.ms": 1000,
        "error_cb": lambda err: out({"ev": "error", "code": err.name(), "message": err.str()}),
    })

    def assigned(c, partitions):
        out({"ev": "assigned", "partitions": sorted([p.topic, p.partition] for p in partitions)})

    def revoked(c, partitions):
        out({"ev": "revoked", "partitions": sorted([p.topic, p.partition] for p in partitions)})

    consumer.subscribe([f"^{args.regex}" if args.regex else args.topic], on_assign=assigned, on_revoke=revoked,
                       on_lost=revoked)
    try:
        while not stop.is_set():
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                out({"ev": "error", "code": message.error().name(), "message": message.error().str()})
                continue
            out({"ev": "rec", "topic": message.topic(), "p": message.partition(), "o": message.offset(),
                 "v": message.value().decode()})
            try:
                consumer.commit(message=message, asynchronous=False)
            except KafkaException as exc:
                out({"ev": "error", "code": exc.args[0].name(), "message": exc.args[0].str()})
                continue
            out({"ev": "committed", "topic": message.topic(), "p": message.partition(), "o": message.offset() + 1})
    finally:
        consumer.close()
        out({"ev": "closed"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
