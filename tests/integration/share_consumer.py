"""A ShareConsumer process for the share-group tests: prints one JSON line per record it gets
({"ev": "rec", "p", "o", "v", "n"}), acknowledges per --mode (accept: implicitly; ack: explicitly, printing
{"ev": "acked"} once an acknowledgement is durable; hold: keeps its first records; poison:
releases every record), and exits on SIGTERM (or is
SIGKILLed by the test)."""

import argparse
import json
import signal
import sys

from raftlog.client.share_consumer import ShareConsumer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("group")
    ap.add_argument("--mode", default="accept", choices=["accept", "ack", "hold", "poison"])
    ap.add_argument("--name", default="c")
    ap.add_argument("--max-poll-records", type=int, default=20)
    args = ap.parse_args()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    explicit = args.mode != "accept"
    with ShareConsumer(args.bootstrap.split(","), args.group, acknowledgement_mode="explicit" if explicit else "implicit",
                       auto_offset_reset="earliest", client_id=args.name, max_poll_records=args.max_poll_records) as c:
        c.subscribe([args.topic])
        print(json.dumps({"ev": "started"}), flush=True)
        while not stop:
            records = c.poll(timeout_ms=500)
            for r in records:
                print(json.dumps({"ev": "rec", "p": r.partition, "o": r.offset, "v": r.value.decode(),
                                  "n": r.delivery_count}), flush=True)
                if args.mode == "poison":
                    c.acknowledge(r, "release")
                elif args.mode == "ack":
                    c.acknowledge(r, "accept")
            if args.mode == "hold" and records:
                print(json.dumps({"ev": "holding"}), flush=True)
                signal.pause()  # keep the records in flight until the test kills this process
            if explicit:
                for (topic, partition), error in c.commit_sync().items():
                    done = [r.offset for r in records if r.partition == partition]
                    if error is None and args.mode == "ack":  # durable: must never come back
                        print(json.dumps({"ev": "acked", "p": partition, "offsets": done}), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
