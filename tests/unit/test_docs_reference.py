"""The reference pages of the docs site are what the code says now: each committed
docs/reference/*.md equals what scripts/docs_reference.py generates (every command and option,
node setting, metric, Kafka API, native op and error code), and the pages name what they must."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import docs_reference  # noqa: E402


def test_committed_reference_pages_are_not_stale():
    pages = docs_reference.generate()
    stale = docs_reference.stale(pages)
    diffs = []
    for name in stale:
        path = docs_reference.OUT / name
        old = path.read_text().splitlines() if path.is_file() else []
        diffs.append("\n".join(list(difflib.unified_diff(old, pages[name].splitlines(), f"docs/reference/{name}",
                                                         "generated", lineterm=""))[:40]))
    assert not stale, (f"docs/reference/{', '.join(stale)} differ from the code: run `scripts/docs gen` "
                       "and commit the pages\n" + "\n".join(diffs))


def test_every_command_setting_and_code_has_an_entry():
    from raftlog.base.errors import ERROR_CLASSES
    from raftlog.cli.main import main
    from raftlog.node import config
    from raftlog.node.kafka.versions import SUPPORTED_VERSIONS

    pages = docs_reference.generate()
    paths = [path for path, _, _ in docs_reference._commands(main, "raftlog")]
    assert "raftlog topics create" in paths and "raftlog node start" in paths and len(paths) > 30, paths
    for path in paths:
        assert f"\n## {path} " in pages["cli.md"], path
    for key in config._KEYS:
        assert f"| `{key}` |" in pages["settings.md"] and config.env_name(key) in pages["settings.md"], key
    assert "| `max_connections` | 1024 | 1 to 1,000,000 | `RAFTLOG_MAX_CONNECTIONS` |" in pages["settings.md"]
    assert "one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL" in pages["settings.md"]
    for code in ERROR_CLASSES:
        assert f"| `{code}` |" in pages["errors.md"], code
    for key, (low, high) in SUPPORTED_VERSIONS.items():
        assert f"| {key} | " in pages["kafka-apis.md"] and f" | {low} | {high} |" in pages["kafka-apis.md"], key
    assert "| 0 | Produce | 0 | 13 |" in pages["kafka-apis.md"]
    for op in ("produce", "fetch", "join_group", "create_topic", "replica_fetch", "broker_heartbeat"):
        assert f"| `{op}` |" in pages["native-protocol.md"], op


def test_metrics_are_read_from_the_registering_calls():
    families = docs_reference.metric_families()
    # One of each kind of registration: a listener's counter, a histogram, a callback gauge,
    # a scrape-time collector family, and a hand-built prometheus-client histogram family.
    assert families["raftlog_requests_total"][:2] == ("counter", ("listener", "op", "code"))
    assert families["raftlog_request_latency_ms"][:2] == ("histogram", ("listener", "op"))
    assert families["raftlog_data_dir_free_bytes"][0] == "gauge"
    assert families["raftlog_partition_high_watermark"][:2] == ("gauge", ("topic", "partition"))
    assert families["raftlog_log_fsync_seconds"][0] == "histogram"
    assert all(labels != ("?",) for _, labels, _, _ in families.values()), families
    assert all(help_text for _, _, help_text, _ in families.values())


def test_cli_page_does_not_depend_on_what_ran_before():
    # click caches each command's help option at its first use: a page generated after the
    # commands ran the usual way (as other tests run them) must be the same page.
    from click.testing import CliRunner

    from raftlog.cli.main import main

    before = docs_reference.cli_page()
    for args in (["--help"], ["topics", "--help"], ["perf", "produce", "--help"], ["node", "start", "-h"]):
        assert CliRunner().invoke(main, args).exit_code == 0, args
    assert docs_reference.cli_page() == before
