"""Write the compatibility matrix (client or tool x feature, Apache Kafka vs raftlog) into
docs/compatibility.md from the last run of the conformance suite (issue 40).

    python -m pytest tests/conformance -p no:cacheprovider --junitxml=/tmp/conformance.xml
    python scripts/compat_matrix.py /tmp/conformance.xml [more.xml ...] [--doc docs/compatibility.md]
    python scripts/compat_matrix.py --keep /tmp/some-files.xml    # a rerun of some files only
    python scripts/compat_matrix.py --readme-only                 # README's short form from the doc

Each test of tests/conformance/ runs one scenario on the reference Kafka and on raftlog and
compares what a user sees, so its outcome is the row: passed = the same answer on both;
xfail = a divergence the suite knows, with its reason; skipped = not served by raftlog yet
(the issue that brings it); failed = a divergence nobody has looked at yet. The table replaces
what lies between the `matrix:begin` and `matrix:end` markers of the document, with the
command and the date of the run. With `--keep` the document's rows that the reports do not
have stay as they are (a rerun of a few files updates their rows only) and the line says so.
README gets the same run in short (one column per family of clients and tools: how many of its
scenarios answer as Kafka) between the same markers, when the document written is the default one.
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- matrix:begin -->", "<!-- matrix:end -->"

# test module -> (client or tool, how a test's name becomes the feature)
CLIENTS = {
    "test_java_client": "Java client (kafka-clients)",
    "test_java_admin": "Java Admin client",
    "test_tools_topics": "kafka-topics",
    "test_tools_groups": "console tools, kafka-consumer-groups",
    "test_tools_operator": "operator tools",
    "test_streams": "Kafka Streams",
    "test_connect": "Kafka Connect (standalone)",
    "test_spark_kafka": "Spark's Kafka connector (spark-sql-kafka-0-10)",
    "test_java_share": "Java share consumer and share-group tools (KIP-932)",
    "test_tools_reassign": "kafka-reassign-partitions",
    "test_franz": "franz-go (Go)",
    "test_kip848_upgrade": "confluent-kafka (librdkafka), KIP-848",
}
# README's short form: client or tool -> its family's column
FAMILIES = {
    "Java client (kafka-clients)": "Java client and Admin client",
    "Java Admin client": "Java client and Admin client",
    "kafka-topics": "Kafka's tools",
    "console tools, kafka-consumer-groups": "Kafka's tools",
    "operator tools": "Kafka's tools",
    "kafka-reassign-partitions": "Kafka's tools",
    "Kafka Streams": "Streams, Connect, Spark's connector",
    "Kafka Connect (standalone)": "Streams, Connect, Spark's connector",
    "Spark's Kafka connector (spark-sql-kafka-0-10)": "Streams, Connect, Spark's connector",
    "Java share consumer and share-group tools (KIP-932)": "share groups (KIP-932)",
    "franz-go (Go)": "franz-go (Go)",
    "confluent-kafka (librdkafka), KIP-848": "KIP-848 upgrade",
}
FEATURES = {
    "test_kafka_topics_create_describe_alter_delete": "--create / --describe / --alter / --list / --delete",
    "test_console_producer_consumer_and_consumer_groups":
        "console producer/consumer (keys, headers, --group), --describe, --reset-offsets, get-offsets, delete-records",
    "test_consumer_groups_delete_offsets": "kafka-consumer-groups --delete-offsets",
    "test_producer_acks_and_compression": "idempotent producer, acks 0/1/all, compression",
    "test_consumer_assign_seek_offsets_for_times": "consumer assign / seek / offsetsForTimes",
    "test_transactions_read_committed_and_fencing":
        "transactions: read_committed / read_uncommitted and the LSO, sendOffsetsToTransaction, zombie fenced",
    "test_classic_group_cooperative_sticky_member_killed_commit_resume":
        "classic group of 3, cooperative-sticky, member killed, commit and resume",
    "test_configs_quorum_log_dirs_features": "kafka-configs, kafka-metadata-quorum, kafka-log-dirs, kafka-features",
    "test_verifiable_producer_and_consumer": "kafka-verifiable-producer / -consumer",
    "test_leader_election": "kafka-leader-election",
    "test_group_configs_through_kafka_configs": "kafka-configs --entity-type groups (Kafka 4's group configs)",
    "test_group_configs_through_the_admin_api":
        "DescribeConfigs / AlterConfigs of GROUP resources (confluent-kafka's AdminClient)",
    "test_group_configs_after_delete_groups": "group configs outlive DeleteGroups",
    "test_streams_word_count": "word count (repartition + changelog topics), processing.guarantee",
    "test_connect_standalone_file_source_and_sink": "FileStream source -> topic -> FileStream sink",
    "test_spark_kafka_batch_write_read_and_checkpointed_stream":
        "format(\"kafka\"): batch write, batch read, streaming query resumed from its checkpoint",
    "test_share_consumers_acknowledge_release_reject_and_admin":
        "two KafkaShareConsumers: accept / release / reject, delivery count limit, share-group Admin",
    "test_kafka_share_groups_tool": "kafka-share-groups --list / --describe / --reset-offsets / --delete-offsets",
    "test_execute_verify_cancel_and_a_bad_plan": "--execute / --verify / --cancel, a plan naming no broker",
    "test_produce_every_compression": "produce and consume, every compression codec",
    "test_group_rebalance_commit_resume": "consumer group: rebalance, commit, resume",
    "test_admin": "kadm: topics, offsets, configs",
    "test_kgo_suite_smoke": "franz-go's own pkg/kgo tests (smoke: a produce and a group test)",
    "test_rolling_upgrade_classic_to_consumer_and_back":
        "online upgrade: a classic group of 3 restarted one by one with group.protocol=consumer, and back",
}


def rows(*reports: Path) -> list[tuple[str, str, str, str]]:
    """(client, feature, Kafka, raftlog) per test case of the reports; a case in a later report
    replaces the same case of an earlier one (a rerun of one file after a fix)."""
    cases = {}
    for junit in reports:
        for case in ET.parse(junit).getroot().iter("testcase"):
            cases[(case.get("classname", ""), case.get("name", ""))] = case
    out = []
    for case in cases.values():
        module = case.get("classname", "").rpartition(".")[2]
        if module not in CLIENTS:
            continue
        name = case.get("name", "")
        base, _, param = name.partition("[")
        feature = FEATURES.get(base, base.removeprefix("test_").replace("_", " "))
        if param:
            feature = f"{param.rstrip(']')}" if base == "test_admin_call" else f"{feature}: {param.rstrip(']')}"
        kafka, raftlog = "yes", "same as Kafka"
        skipped, failure, error = case.find("skipped"), case.find("failure"), case.find("error")
        if skipped is not None:
            message = _short(skipped.get("message", ""))
            if skipped.get("type") == "pytest.xfail":
                raftlog = f"differs: {message}"
            elif "reference Kafka unavailable" in message:
                kafka = raftlog = "not run (no reference Kafka)"
            else:
                raftlog = f"not served: {message}"
        elif failure is not None:
            raftlog = f"FAILS: {_short(failure.get('message', ''))}"
        elif error is not None:
            kafka = raftlog = f"error: {_short(error.get('message', ''))}"
        out.append((CLIENTS[module], feature, kafka, raftlog))
    return out


def _short(text: str, limit: int = 160) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"^(Skipped|XFailed|reason): ", "", text)
    text = re.sub(r"^(raftlog differs|not served by raftlog yet): ", "", text)
    text = re.sub(r"; Kafka answered .*| \(Kafka .*", "", text)
    text = text.replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def kept_rows(text: str, table: list[tuple[str, str, str, str]]) -> list[tuple[str, str, str, str]]:
    """`table` with the rows of the document's current table (between the markers) that it
    does not have, in the document's order, the rows it replaces in their places and its new
    rows after their client's."""
    new = {(c, f): (c, f, k, r) for c, f, k, r in table}
    out, placed = [], set()
    for line in text.partition(BEGIN)[2].partition(END)[0].splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) != 4 or cells[0] in ("client / tool", "---"):
            continue
        key = (cells[0], cells[1])
        out.append(new.get(key, tuple(cells)))  # type: ignore[arg-type]
        placed.add(key)
    for key, row in new.items():  # a new row goes after the last of its client's, else last
        if key not in placed:
            at = max((i + 1 for i, r in enumerate(out) if r[0] == row[0]), default=len(out))
            out.insert(at, row)
    return out


def render(table: list[tuple[str, str, str, str]], *reports: Path, rerun: int | None = None) -> str:
    when = _when(*reports)
    same = sum(1 for r in table if r[3] == "same as Kafka")
    source = "`python -m pytest tests/conformance --junitxml=...`"
    if rerun is not None:
        source += f" ({rerun} rows from a rerun of some files, `--keep`: the others from the last whole run)"
    lines = [BEGIN,
             f"Generated {when} by `python scripts/compat_matrix.py` from {source}: "
             f"{same} of {len(table)} rows answer the same as Apache Kafka.", "",
             "| client / tool | feature | Apache Kafka | raftlog |", "| --- | --- | --- | --- |"]
    lines += [f"| {c} | {f} | {k} | {r} |" for c, f, k, r in table]
    lines.append(END)
    return "\n".join(lines)


def summary(table: list[tuple[str, str, str, str]], *reports: Path, when: str | None = None) -> str:
    """README's short matrix, one column per family of clients and tools: how many of its
    scenarios answer the same as Kafka, with the command and the date of the run."""
    families: dict[str, list[int]] = {}
    for client, _, _, raftlog in table:
        counts = families.setdefault(FAMILIES.get(client, client), [0, 0])
        counts[0] += 1
        counts[1] += raftlog == "same as Kafka"
    same = sum(c[1] for c in families.values())
    lines = [BEGIN, f"Scenarios run on Apache Kafka 4.4 and on raftlog and compared ({when or _when(*reports)}, "
             f"`python scripts/compat_matrix.py`): **{same} of {len(table)} answer the same**.", "",
             "| client or tool | " + " | ".join(families) + " |", "| --- |" + " ---: |" * len(families),
             "| same as Kafka | " + " | ".join(f"{ok} of {n}" for n, ok in families.values()) + " |"]
    lines.append(END)
    return "\n".join(lines)


def _when(*reports: Path) -> str:
    newest = max(junit.stat().st_mtime for junit in reports)
    return datetime.fromtimestamp(newest, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _replace_between_markers(text: str, block: str) -> str:
    head, _, rest = text.partition(BEGIN)
    return head + block + rest.partition(END)[2]


def _readme_from_doc(doc: Path, readme: Path) -> int:
    text = doc.read_text()
    table = kept_rows(text, [])
    generated = re.search(r"Generated (\d{4}-\d\d-\d\d \d\d:\d\d UTC)", text)
    if not table or generated is None or BEGIN not in readme.read_text():
        print(f"compat_matrix: no generated table in {doc} or no markers in {readme}", file=sys.stderr)
        return 2
    readme.write_text(_replace_between_markers(readme.read_text(), summary(table, when=generated.group(1))))
    print(f"{readme}: the short form of {len(table)} rows")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("junit", type=Path, nargs="*",
                    help="pytest's --junitxml report(s) of tests/conformance (a later one's cases win)")
    ap.add_argument("--doc", type=Path, default=ROOT / "docs" / "compatibility.md")
    ap.add_argument("--readme", type=Path, default=None,
                    help="where the short form goes (default: README.md when --doc is the default)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the document's rows these reports do not have (a rerun of some files)")
    ap.add_argument("--readme-only", action="store_true",
                    help="write README's short form from the document's table (no report)")
    args = ap.parse_args()
    if args.readme_only:
        return _readme_from_doc(args.doc, args.readme or ROOT / "README.md")
    if not args.junit:
        ap.error("a junit report is needed (or --readme-only)")
    missing = [str(j) for j in args.junit if not j.exists()]
    if missing:
        print(f"compat_matrix: no report at {', '.join(missing)}: run the suite with --junitxml first", file=sys.stderr)
        return 2
    try:
        table = rows(*args.junit)
    except ET.ParseError as exc:
        print(f"compat_matrix: {' '.join(map(str, args.junit))} is not a junit XML report ({exc})", file=sys.stderr)
        return 2
    if not table:
        print(f"compat_matrix: {' '.join(map(str, args.junit))} has no conformance test", file=sys.stderr)
        return 2
    text = args.doc.read_text() if args.doc.exists() else f"# Compatibility\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        text = text.rstrip("\n") + f"\n\n{BEGIN}\n{END}\n"
    rerun = None
    if args.keep:
        rerun, table = len(table), kept_rows(text, table)
    args.doc.write_text(_replace_between_markers(text, render(table, *args.junit, rerun=rerun)))
    print(f"{args.doc}: {len(table)} rows")
    readme = args.readme or (ROOT / "README.md" if args.doc == ap.get_default("doc") else None)
    if readme is not None and readme.exists() and BEGIN in (text := readme.read_text()):
        readme.write_text(_replace_between_markers(text, summary(table, *args.junit)))
        print(f"{readme}: the short form")
    return 0


if __name__ == "__main__":
    sys.exit(main())
