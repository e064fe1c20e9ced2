"""`raftlog produce`, `raftlog consume` and `raftlog perf produce|consume`: records from and to
the terminal, like kafka-console-producer / kcat -C and Kafka's perf tests.

    printf 'foo:first\\nfoo:second\\n' | raftlog produce demo --key-separator :
    raftlog consume demo --from-beginning --format kv --max-messages 2
    raftlog perf produce --topic bench --records 1000000 --record-bytes 100

Commands are registered on the root group by raftlog/cli/main.py. Rules kept here:
* stdout carries records only (consume) and nothing at all for produce; summaries,
  progress and notices go to stderr, so pipes stay clean.
* A topic is checked up front (the producer would wait max_block_ms for an unknown one):
  `consume` and `perf` fail at once naming near topic names; `produce` creates a missing
  topic with 3 partitions and replication factor min(3, live brokers) and says so on
  stderr (Kafka's auto.create.topics.enable; `--no-create` turns it off).
* User errors are one line and exit 1 (bad arguments: click's usage error, exit 2); `raftlog
  --debug` shows tracebacks. `consume` ends with exit 0 on Ctrl-C, SIGTERM and a closed
  pipe (`| head`).
"""

from __future__ import annotations

import base64
import difflib
import json
import os
import signal
import sys
import time
from typing import Any, BinaryIO, Callable, Iterator

import click

from raftlog.base.errors import RaftlogError, TopicAlreadyExistsError
from raftlog.base.topics import OFFSETS_TOPIC, partition_for_group
from raftlog.cli.common import (
    TOPIC_MAX_REPLICATION_FACTOR,
    TOPIC_PARTITIONS,
    CliFailure,
    await_leaders,
    client_kwargs,
    connect,
    connection_options,
    describe,
    describe_topic,
    friendly,
    offline_summary,
    security,
)

__all__ = ["produce_cmd", "consume_cmd", "perf"]

AUTO_CREATE_PARTITIONS = TOPIC_PARTITIONS
AUTO_CREATE_MAX_RF = TOPIC_MAX_REPLICATION_FACTOR
# How long produce/consume wait for partitions without a leader before failing: a leader
# election takes about one election timeout (1 s), so this covers one; a partition offline
# for longer has lost a majority of its replicas (or the cluster its controller).
LEADER_GRACE_S = 4.0
_COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


def _near_names(admin: Any, name: str) -> str:
    try:
        known = admin.list_topics()
    except RaftlogError:
        return ""
    near = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    if near:
        return f"; did you mean {', '.join(near)}?"
    if known:
        shown = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "")
        return f"; topics: {shown}"
    return "; there are no topics yet (raftlog topics create NAME)"


def _require_topic(admin: Any, topic: str) -> Any:
    info = describe_topic(admin, topic)
    if info is None:
        raise CliFailure(f"unknown topic {topic!r}{_near_names(admin, topic)}")
    return info


def _auto_create(admin: Any, topic: str) -> Any:
    status = admin.cluster_status()
    live = sum(1 for b in status.brokers if not b.get("fenced"))
    rf = max(1, min(AUTO_CREATE_MAX_RF, live))
    try:
        admin.create_topic(topic, AUTO_CREATE_PARTITIONS, rf)
        click.echo(f"raftlog: created topic {topic} ({AUTO_CREATE_PARTITIONS} partitions, "
                   f"replication factor {rf}); create it yourself for other settings", err=True)
    except RaftlogError as exc:
        if not isinstance(exc, TopicAlreadyExistsError):  # someone else made it meanwhile: fine
            raise
    info = await_leaders(admin, topic)  # not all led yet: the producer waits for them
    if info is None:
        raise CliFailure(f"created topic {topic!r} but it did not show up in metadata")
    return info


def _properties() -> dict[str, str] | None:
    """--command-config's settings as plain client properties (for perf's producer processes)."""
    found = security()
    return None if found is None else found.to_properties()


def _wait_for_leaders(admin: Any, topic: str, partitions: list[int] | None, *, need_controller: bool,
                      what: str, missing_ok: bool = False) -> Any:
    """The topic's metadata once the partitions to use (`partitions`, None: any one of them)
    have live leaders (and, with `need_controller`, the node answering has a controller),
    waiting up to LEADER_GRACE_S for an election. CliFailure naming each offline partition
    and why (and the controller problem) otherwise: fail fast rather than retry to the
    timeout. Returns the last TopicInfo (None for a missing topic with `missing_ok`)."""
    deadline = time.monotonic() + LEADER_GRACE_S
    while True:
        answer = describe(admin, [topic])
        info = answer.topics.get(topic)
        if info is None:
            if missing_ok:
                return None
            raise CliFailure(f"unknown topic {topic!r}")
        wanted = partitions if partitions is not None else [p.partition for p in info.partitions]
        offline = offline_summary(info, wanted)
        usable = sum(1 for p in info.partitions if p.partition in wanted and p.offline_reason is None)
        problem = answer.controller_problem if need_controller else None
        ready = problem is None and (usable == len(wanted) if partitions is not None else usable > 0)
        if ready:
            return info
        if time.monotonic() >= deadline:
            raise CliFailure(f"cannot {what}: " + "; ".join(offline + ([problem] if problem else [])))
        time.sleep(0.2)  # polling the metadata under a deadline


def _parse_headers(items: tuple[str, ...]) -> list[tuple[str, bytes]]:
    out = []
    for item in items:
        k, eq, v = item.partition("=")
        if not eq or not k:
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint="--header")
        out.append((k, v.encode()))
    return out


# ----------------------------------------------------------------------------- produce


def _lines(stream: BinaryIO, on_bytes: Callable[[int], None] | None) -> Iterator[bytes]:
    for raw in stream:
        if on_bytes is not None:
            on_bytes(len(raw))
        if raw.endswith(b"\n"):
            raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
        yield raw


def producer_timeout_options(fn: Any) -> Any:
    """--request-timeout-ms and --delivery-timeout-ms, Kafka's producer settings of those names."""
    fn = click.option("--delivery-timeout-ms", type=click.IntRange(1000, 86_400_000), default=120_000,
                      show_default=True,
                      help="How long a record may take, retries included, before it fails "
                           "(Kafka's delivery.timeout.ms; >= --linger-ms + --request-timeout-ms).")(fn)
    fn = click.option("--request-timeout-ms", type=click.IntRange(1000, 3_600_000), default=30_000,
                      show_default=True,
                      help="How long one produce request may go unanswered before it is retried "
                           "(Kafka's request.timeout.ms).")(fn)
    return fn


def _check_producer_timeouts(linger_ms: int, request_timeout_ms: int, delivery_timeout_ms: int) -> None:
    if delivery_timeout_ms < linger_ms + request_timeout_ms:
        raise click.BadParameter(f"{delivery_timeout_ms} < --linger-ms + --request-timeout-ms "
                                 f"({linger_ms + request_timeout_ms}), as in Kafka",
                                 param_hint="--delivery-timeout-ms")


@click.command("produce")
@click.argument("topic")
@click.option("--file", "-f", "file_path", type=click.Path(exists=True, dir_okay=False),
              help="Read records from this file instead of stdin.")
@click.option("--key-separator", "-K", metavar="SEP",
              help="Split each line at the first SEP into key and value (Kafka's parse.key).")
@click.option("--header", "-H", "headers", multiple=True, metavar="KEY=VALUE",
              help="A header on every record (repeatable).")
@click.option("--partition", "-p", type=click.IntRange(0), help="Send every record to this partition.")
@click.option("--acks", type=click.Choice(["0", "1", "all"]), default="all", show_default=True,
              help="Acknowledgements to wait for (all: every in-sync replica; idempotent).")
@click.option("--linger-ms", type=click.IntRange(0, 60_000), default=5, show_default=True,
              help="How long a batch waits for more records.")
@click.option("--batch-bytes", type=click.IntRange(128), default=None, help="Batch size bound (default 64 KiB).")
@click.option("--compression", type=click.Choice(_COMPRESSIONS), default="none", show_default=True)
@click.option("--max-request-bytes", type=click.IntRange(1024), default=None,
              help="Largest request (so record) the producer sends (default: 1 MiB, or the topic's "
                   "max_message_bytes when that is larger).")
@click.option("--create/--no-create", default=True, show_default=True,
              help=f"Create a missing topic ({AUTO_CREATE_PARTITIONS} partitions, RF min(3, brokers)).")
@producer_timeout_options
@connection_options
@click.pass_context
@friendly
def produce_cmd(ctx: click.Context, topic: str, file_path: str | None, key_separator: str | None,
                headers: tuple[str, ...], partition: int | None, acks: str, linger_ms: int,
                batch_bytes: int | None, compression: str, max_request_bytes: int | None, create: bool,
                request_timeout_ms: int, delivery_timeout_ms: int, bootstrap: str, timeout: float) -> None:
    """Send one record per line of stdin (or --file) to TOPIC.

    Prints a summary on stderr at the end (records, bytes, partitions, time); stdout stays
    empty. A missing topic is created with 3 partitions (see --no-create). A produce request
    unanswered for --request-timeout-ms is retried (idempotent with --acks all: never
    written twice); a record fails after --delivery-timeout-ms. --timeout bounds the
    commands' other waits (topic lookup and creation, metadata).

    \b
    Examples:
      printf 'foo:first\\nfoo:second\\nbar:first\\n' | raftlog produce streams-intro --key-separator :
      raftlog produce events --file events.txt --header source=import --acks 1
      seq 1000 | raftlog produce numbers --partition 0 --linger-ms 20 --compression zstd
      raftlog topics create blobs -c max_message_bytes=8388608 && raftlog produce blobs -f big.txt
    """
    from raftlog.client import Admin, Producer
    from raftlog.client.accumulator import DEFAULT_BUFFER_BYTES, DEFAULT_MAX_REQUEST_BYTES

    sep = key_separator.encode() if key_separator is not None else None
    if sep == b"":
        raise click.BadParameter("must not be empty", param_hint="--key-separator")
    hdrs = _parse_headers(headers)
    _check_producer_timeouts(linger_ms, request_timeout_ms, delivery_timeout_ms)
    addresses = connect(bootstrap)
    timeout_ms = int(timeout * 1000)
    with Admin(addresses, request_timeout_ms=timeout_ms, **client_kwargs()) as admin:
        info = describe_topic(admin, topic)
        if info is None:
            if not create:
                raise CliFailure(f"unknown topic {topic!r}{_near_names(admin, topic)} "
                                 "(leave out --no-create to create it)")
            info = _auto_create(admin, topic)
        if partition is not None and partition >= len(info.partitions):
            raise CliFailure(f"partition {partition} does not exist: {topic} has {len(info.partitions)}")
        # Every partition a keyed record may go to must have a leader; keyless records need one.
        info = _wait_for_leaders(admin, topic, [partition] if partition is not None else (
                                 None if sep is None else list(range(len(info.partitions)))),
                                 need_controller=acks == "all", what=f"produce to {topic}")

    options: dict[str, Any] = {"acks": acks, "linger_ms": linger_ms,
                               "enable_idempotence": acks == "all", "max_block_ms": timeout_ms}
    if batch_bytes:
        options["batch_bytes"] = batch_bytes
    if compression != "none":
        options["compression"] = compression
    if max_request_bytes is None:
        topic_limit = str(info.configs.get("max_message_bytes", ""))
        if topic_limit.isdigit() and int(topic_limit) > DEFAULT_MAX_REQUEST_BYTES:
            max_request_bytes = int(topic_limit)  # a topic made for big records: let them through
    if max_request_bytes is not None:
        options["max_request_bytes"] = max_request_bytes
        options["buffer_bytes"] = max(DEFAULT_BUFFER_BYTES, 2 * max_request_bytes)
    stats = {"records": 0, "bytes": 0, "failed": 0}
    partitions_used: set[int] = set()
    first_error: list[BaseException] = []

    def on_batch(fut: Any) -> None:  # on the producer's I/O thread: keep it short
        exc = fut.exception()
        if exc is not None:
            stats["failed"] += fut.batch_record_count
            if not first_error:
                first_error.append(exc)
        else:
            partitions_used.add(fut.result()[0])

    start = time.monotonic()
    stream: BinaryIO
    bar = None
    if file_path is not None:
        stream = open(file_path, "rb")
        if sys.stderr.isatty():
            bar = click.progressbar(length=os.path.getsize(file_path), label=f"producing to {topic}",
                                    file=sys.stderr, show_eta=True)
    else:
        stream = sys.stdin.buffer
    interrupted = False
    # A record not acknowledged within --delivery-timeout-ms fails with why (no leader, no
    # producer id, ...) rather than being dropped unsaid when the producer closes.
    producer = Producer(addresses, request_timeout_ms=request_timeout_ms,
                        delivery_timeout_ms=delivery_timeout_ms, **options, **client_kwargs())
    flush_s = delivery_timeout_ms / 1000 + 5  # delivery_timeout_ms ends each record before
    try:
        if bar is not None:
            bar.__enter__()
        send = producer.send
        for n, line in enumerate(_lines(stream, bar.update if bar is not None else None), 1):
            key = None
            if sep is not None:
                key, found, value = line.partition(sep)
                if not found:
                    raise CliFailure(f"line {n} has no key separator {key_separator!r} "
                                     f"({stats['records']} records before it were sent)")
            else:
                value = line
            fut = send(topic, value, key=key, headers=hdrs or None, partition=partition)
            stats["records"] += 1
            stats["bytes"] += len(value) + (len(key) if key is not None else 0)
            if fut.index == 0:
                fut.add_done_callback(on_batch)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
        if file_path is not None:
            stream.close()
        try:
            producer.flush(timeout=flush_s)
        except TimeoutError:
            click.echo(f"raftlog: not every record was acknowledged within {flush_s:g} s", err=True)
        producer.close(timeout=1)
    elapsed = time.monotonic() - start
    ok = stats["records"] - stats["failed"]
    used = ",".join(map(str, sorted(partitions_used))) or "-"
    rate = ok / elapsed if elapsed > 0 else 0.0
    click.echo(f"produced {ok} records ({stats['bytes']} bytes) to {topic} partitions {used} "
               f"in {elapsed:.2f} s ({rate:,.0f} records/s)", err=True)
    if stats["failed"]:
        raise CliFailure(f"{stats['failed']} records failed: {first_error[0] if first_error else '?'}")
    if interrupted:
        ctx.exit(130)


# ----------------------------------------------------------------------------- consume


def _text(b: bytes | None) -> str | dict[str, str] | None:
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(b).decode("ascii")}


def record_json(r: Any) -> dict[str, Any]:
    """One consumed record as a JSON-ready dict; bytes that are not UTF-8 become
    {"base64": "..."} (a string value is always the UTF-8 text itself)."""
    return {
        "topic": r.topic, "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
        "key": _text(r.key), "value": _text(r.value),
        "headers": [[k, _text(v)] for k, v in (r.headers or ())],
    }


def _formatter(fmt: str, separator: bytes) -> Callable[[Any], bytes]:
    if fmt == "text":
        return lambda r: (r.value or b"") + b"\n"
    if fmt == "kv":
        return lambda r: (r.key or b"") + separator + (r.value or b"") + b"\n"
    return lambda r: json.dumps(record_json(r), ensure_ascii=False).encode() + b"\n"


def _parse_offset(value: str | None) -> int | str | None:
    if value is None:
        return None
    if value in ("earliest", "beginning"):
        return "earliest"
    if value in ("latest", "end"):
        return "latest"
    try:
        n = int(value)
    except ValueError:
        raise click.BadParameter(f"expected a number, 'earliest' or 'latest', got {value!r}",
                                 param_hint="--offset") from None
    if n < 0:
        raise click.BadParameter("must be >= 0", param_hint="--offset")
    return n


def _check_offset(admin: Any, topic: str, parts: list[int], offset: int) -> None:
    """CliFailure when `offset` is outside [log start, log end] of any partition in `parts`
    (the consumer would silently reset to the end and print nothing)."""
    from raftlog.client.request import EARLIEST, LATEST, list_offsets_request, parse_list_offsets

    requests = [(list_offsets_request([(topic, p, spec)]), (topic, p)) for p in parts for spec in (EARLIEST, LATEST)]
    answers = admin.request_many(requests)
    bounds: dict[int, list[int]] = {}
    for (_, (_, p)), answer in zip(requests, answers):
        (found,) = parse_list_offsets(answer).values()
        bounds.setdefault(p, []).append(found[0])
    bad = [f"{topic}-{p} has offsets {start}..{end}" for p, (start, end) in sorted(bounds.items())
           if not start <= offset <= end]
    if bad:
        raise CliFailure(f"--offset {offset} is out of range: " + "; ".join(bad)
                         + " (the end is where the next record will go)")


@click.command("consume")
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset (default: only new records).")
@click.option("--partition", "-p", type=click.IntRange(0), help="Read only this partition (default: all).")
@click.option("--offset", "-o", "offset_text", metavar="N|earliest|latest",
              help="Start at this offset (of --partition, or of every partition).")
@click.option("--group", "-g", help="Consume as a member of this consumer group (commits offsets).")
@click.option("--share-group", help="Consume as a member of this share group (KIP-932 queue: records are "
              "shared among its members, each accepted once read).")
@click.option("--max-messages", "-n", type=click.IntRange(1), help="Stop after this many records.")
@click.option("--timeout-ms", type=click.IntRange(1), help="Stop when no record came for this long.")
@click.option("--format", "fmt", type=click.Choice(["text", "kv", "json"]), default="text", show_default=True,
              help="text: the value; kv: key, separator, value; json: one object per record.")
@click.option("--separator", default="\t", show_default="TAB", help="Between key and value with --format kv.")
@connection_options
@click.pass_context
@friendly
def consume_cmd(ctx: click.Context, topic: str, from_beginning: bool, partition: int | None,
                offset_text: str | None, group: str | None, share_group: str | None, max_messages: int | None,
                timeout_ms: int | None, fmt: str, separator: str, bootstrap: str, timeout: float) -> None:
    """Print TOPIC's records on stdout, one per line, following new ones until Ctrl-C
    (or --max-messages / --timeout-ms). Exit 0 on Ctrl-C, SIGTERM or a closed pipe.

    In --format json, keys, values and header values that are not UTF-8 are written as
    {"base64": "..."}; null stays null.

    \b
    Examples:
      raftlog consume streams-intro --from-beginning --format kv --separator :
      raftlog consume events --partition 2 --offset 1000 --max-messages 10 --format json
      raftlog consume events --from-beginning --timeout-ms 2000 | wc -l
      raftlog consume orders --share-group workers --from-beginning
    """
    from raftlog.client import Admin, Consumer

    offset = _parse_offset(offset_text)
    if offset is not None and from_beginning:
        raise click.UsageError("give --from-beginning or --offset, not both")
    if share_group is not None and (group is not None or partition is not None or offset is not None):
        raise click.UsageError("--share-group reads the partitions the share group hands out: leave out "
                               "--group/--partition/--offset")
    if group is not None and (partition is not None or offset is not None):
        raise click.UsageError("--group reads the partitions the group assigns from its committed "
                               "offsets: leave out --partition/--offset")
    addresses = connect(bootstrap)
    with Admin(addresses, request_timeout_ms=int(timeout * 1000), **client_kwargs()) as admin:
        info = _require_topic(admin, topic)
        count = len(info.partitions)
        if partition is not None and partition >= count:
            raise CliFailure(f"partition {partition} does not exist: {topic} has {count} "
                             f"(0..{count - 1})")
        parts = [partition] if partition is not None else list(range(count))
        # Fail fast when nothing can be read: every partition asked for has no live leader
        # (or, with --group, the group's coordinator partition has none).
        _wait_for_leaders(admin, topic, parts if partition is not None else None, need_controller=False,
                          what=f"consume {topic}")
        if group is not None:
            _wait_for_leaders(admin, OFFSETS_TOPIC, [partition_for_group(group)], need_controller=False,
                              what=f"consume as group {group!r} (its coordinator's partition)", missing_ok=True)
        if isinstance(offset, int):
            _check_offset(admin, topic, parts, offset)

    out = sys.stdout.buffer
    fmt_record = _formatter(fmt, separator.encode())
    previous = signal.getsignal(signal.SIGTERM)
    stopping = False

    def on_term(signum: int, frame: Any) -> None:
        # A flag the loop reads between polls (each at most 500 ms), not an exception: raised
        # from a signal handler, one can land in a finalizer, which prints and drops it, and
        # the consume went on following (seen in CI).
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    seen = 0
    group_options = {} if group is None else {"group_id": group, "enable_auto_commit": True}
    reset = "earliest" if from_beginning else "latest"
    if share_group is not None:  # share.auto.offset.reset: where a new share group starts
        from raftlog.client.share_consumer import ShareConsumer

        consumer: Any = ShareConsumer(addresses, share_group, auto_offset_reset=reset,
                                      request_timeout_ms=int(timeout * 1000), **client_kwargs())
    else:
        consumer = Consumer(addresses, auto_offset_reset=reset, request_timeout_ms=int(timeout * 1000),
                            **group_options, **client_kwargs())
    try:
        tps = [(topic, p) for p in parts]
        if share_group is not None:
            consumer.subscribe([topic])
        elif group is not None:
            consumer.subscribe([topic])  # positions: the group's committed offsets, else the reset
        else:
            consumer.assign(tps)
            if from_beginning or offset == "earliest":
                consumer.seek_to_beginning()
            elif isinstance(offset, int):
                for tp in tps:
                    consumer.seek(tp, offset)
            else:
                consumer.seek_to_end()
        idle_since = time.monotonic()
        while not stopping and (max_messages is None or seen < max_messages):
            wait_ms = 500
            if timeout_ms is not None:
                left = timeout_ms - (time.monotonic() - idle_since) * 1000
                if left <= 0:
                    break
                wait_ms = int(max(1, min(wait_ms, left)))
            records = consumer.poll(wait_ms, max_records=None if max_messages is None
                                    else max_messages - seen)
            if not records:
                continue
            idle_since = time.monotonic()
            out.write(b"".join(fmt_record(r) for r in records))
            out.flush()
            seen += len(records)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        # The reader went away (`| head`): not an error. Point stdout at /dev/null so the
        # interpreter's final flush does not complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    finally:
        signal.signal(signal.SIGTERM, previous)
        consumer.close()


# ----------------------------------------------------------------------------- perf


@click.group("perf")
def perf() -> None:
    """Throughput and latency tests (like kafka-producer-perf-test / kafka-consumer-perf-test)."""


def _progress(line: str) -> None:
    click.echo(line, err=True)


@perf.command("produce")
@click.option("--topic", "-t", required=True, help="An existing topic.")
@click.option("--records", "-n", type=click.IntRange(1), required=True, help="Records to send.")
@click.option("--record-bytes", "-s", type=click.IntRange(0, 10 * 1024 * 1024), default=100, show_default=True,
              help="Value size of every record.")
@click.option("--acks", type=click.Choice(["0", "1", "all"]), default="all", show_default=True)
@click.option("--batch-bytes", type=click.IntRange(128), default=None, help="Batch size bound (default 64 KiB).")
@click.option("--linger-ms", type=click.IntRange(0, 60_000), default=5, show_default=True)
@click.option("--compression", type=click.Choice(_COMPRESSIONS), default="none", show_default=True)
@click.option("--throughput", type=click.FloatRange(0), default=0, show_default=True,
              help="Target records/s over all producers (0: as fast as possible).")
@click.option("--producers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Producer processes, each sending its share.")
@click.option("--warmup-records", type=click.IntRange(0), default=0, show_default=True,
              help="Records each producer sends and waits for before the timed run (not counted).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
@producer_timeout_options
@connection_options
@click.pass_context
@friendly
def perf_produce(ctx: click.Context, topic: str, records: int, record_bytes: int, acks: str,
                 batch_bytes: int | None, linger_ms: int, compression: str, throughput: float,
                 producers: int, warmup_records: int, as_json: bool, quiet: bool,
                 request_timeout_ms: int, delivery_timeout_ms: int, bootstrap: str,
                 timeout: float) -> None:
    """Send RECORDS records as fast as allowed; report records/s, MB/s and per-record
    send-to-ack latency (avg, p50, p95, p99, p99.9, max). A progress line every second on stderr.

    \b
    Examples:
      raftlog perf produce --topic bench --records 1000000 --record-bytes 100
      raftlog perf produce -t bench -n 500000 --throughput 100000 --producers 2 --json
      raftlog perf produce -t bench -n 500000 --throughput 100000 --warmup-records 10000
    """
    from raftlog.client import Admin
    from raftlog.cli.perf import format_produce, produce_perf, summarize_produce

    _check_producer_timeouts(linger_ms, request_timeout_ms, delivery_timeout_ms)
    addresses = connect(bootstrap)
    with Admin(addresses, request_timeout_ms=int(timeout * 1000), **client_kwargs()) as admin:
        _require_topic(admin, topic)
    try:
        result = produce_perf(",".join(addresses), topic, records, record_bytes, producers=producers,
                              throughput=throughput, progress=None if quiet else _progress,
                              acks=acks, linger_ms=linger_ms, batch_bytes=batch_bytes,
                              compression=compression, warmup_records=warmup_records,
                              request_timeout_ms=request_timeout_ms,
                              delivery_timeout_ms=delivery_timeout_ms, security=_properties())
    except RuntimeError as exc:
        raise CliFailure(f"perf produce failed: {exc}") from None
    summary = summarize_produce(result)
    if as_json:
        click.echo(json.dumps(summary, sort_keys=True))
    else:
        click.echo(format_produce(summary))
    if result.errors:
        raise CliFailure(f"{result.errors} records were not acknowledged (first: {result.first_error})")


@perf.command("consume")
@click.option("--topic", "-t", required=True, help="An existing topic.")
@click.option("--records", "-n", type=click.IntRange(1), required=True, help="Records to read (from the beginning).")
@click.option("--idle-timeout", type=click.FloatRange(0.1), default=10.0, show_default=True,
              help="Give up after this many seconds with no record.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
@connection_options
@click.pass_context
@friendly
def perf_consume(ctx: click.Context, topic: str, records: int, idle_timeout: float, as_json: bool,
                 quiet: bool, bootstrap: str, timeout: float) -> None:
    """Read RECORDS records of every partition from the beginning; report records/s, MB/s
    and the time to the first record.

    \b
    Example:
      raftlog perf consume --topic bench --records 1000000
    """
    from raftlog.client import Admin
    from raftlog.cli.perf import format_consume, run_consumer, summarize_consume

    addresses = connect(bootstrap)
    with Admin(addresses, request_timeout_ms=int(timeout * 1000), **client_kwargs()) as admin:
        _require_topic(admin, topic)
    result = run_consumer(",".join(addresses), topic, records, timeout_s=idle_timeout,
                          progress=None if quiet else _progress, security=_properties())
    summary = summarize_consume(result)
    click.echo(json.dumps(summary, sort_keys=True) if as_json else format_consume(summary))
    if result.records < records:
        raise CliFailure(f"only {result.records} of {records} records arrived "
                         f"(none for {idle_timeout:g} s)")
