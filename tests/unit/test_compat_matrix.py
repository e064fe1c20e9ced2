"""scripts/compat_matrix.py turns a conformance run's junit report into the matrix rows: a pass
is "same as Kafka", an xfail "differs" with its reason, a skip "not served" with its issue, a
failure "FAILS"; a run without the reference Kafka says so; the table replaces only what lies
between the markers of the document."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import compat_matrix  # noqa: E402

REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.conformance.test_java_admin" name="test_admin_call[describeTopics]" time="1"/>
<testcase classname="tests.conformance.test_java_admin" name="test_admin_call[describeFeatures]" time="1">
  <skipped type="pytest.xfail" message="raftlog differs: no finalized features (#41); Kafka answered {'ok': True}"/></testcase>
<testcase classname="tests.conformance.test_java_admin" name="test_admin_call[describeClientQuotas]" time="1">
  <skipped type="pytest.skip" message="not served by raftlog yet: #41 (client quotas)"/></testcase>
<testcase classname="tests.conformance.test_java_client" name="test_producer_acks_and_compression[zstd]" time="1">
  <failure message="AssertionError: Java producer | zstd">trace</failure></testcase>
<testcase classname="tests.conformance.test_tools_topics" name="test_kafka_topics_create_describe_alter_delete" time="1">
  <skipped type="pytest.skip" message="reference Kafka unavailable: no Maven (mvn)"/></testcase>
<testcase classname="tests.integration.test_other" name="test_not_ours" time="1"/>
</testsuite></testsuites>"""


def test_rows_and_document(tmp_path, monkeypatch):
    report = tmp_path / "conformance.xml"
    report.write_text(REPORT)
    rows = compat_matrix.rows(report)
    assert rows == [
        ("Java Admin client", "describeTopics", "yes", "same as Kafka"),
        ("Java Admin client", "describeFeatures", "yes", "differs: no finalized features (#41)"),
        ("Java Admin client", "describeClientQuotas", "yes", "not served: #41 (client quotas)"),
        ("Java client (kafka-clients)", "idempotent producer, acks 0/1/all, compression: zstd", "yes",
         "FAILS: AssertionError: Java producer \\| zstd"),
        ("kafka-topics", "--create / --describe / --alter / --list / --delete", "not run (no reference Kafka)",
         "not run (no reference Kafka)"),
    ]
    doc = tmp_path / "compatibility.md"
    doc.write_text(f"# Title\n\nbefore\n\n{compat_matrix.BEGIN}\nold table\n{compat_matrix.END}\n\nafter\n")
    monkeypatch.setattr(sys, "argv", ["compat_matrix.py", str(report), "--doc", str(doc)])
    assert compat_matrix.main() == 0
    text = doc.read_text()
    assert "old table" not in text and text.startswith("# Title\n\nbefore") and text.endswith("after\n")
    assert "1 of 5 rows answer the same as Apache Kafka" in text and "| Java Admin client | describeTopics |" in text


def test_keep_updates_only_the_rerun_rows(tmp_path, monkeypatch):
    """--keep: a rerun of some files replaces their rows in place, keeps the others, and adds
    new ones after their client's."""
    report = tmp_path / "rerun.xml"
    report.write_text("""<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.conformance.test_java_admin" name="test_admin_call[describeFeatures]" time="1"/>
<testcase classname="tests.conformance.test_java_admin" name="test_admin_call[listTransactions]" time="1"/>
</testsuite></testsuites>""")
    doc = tmp_path / "compatibility.md"
    doc.write_text(f"{compat_matrix.BEGIN}\nGenerated before\n\n| client / tool | feature | Apache Kafka | raftlog |\n"
                   "| --- | --- | --- | --- |\n"
                   "| Java Admin client | describeTopics | yes | same as Kafka |\n"
                   "| Java Admin client | describeFeatures | yes | differs: a \\| b |\n"
                   f"| kafka-topics | --list | yes | FAILS: x |\n{compat_matrix.END}\n")
    monkeypatch.setattr(sys, "argv", ["compat_matrix.py", "--keep", str(report), "--doc", str(doc)])
    assert compat_matrix.main() == 0
    table = [line for line in doc.read_text().splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert table == ["| Java Admin client | describeTopics | yes | same as Kafka |",
                     "| Java Admin client | describeFeatures | yes | same as Kafka |",
                     "| Java Admin client | listTransactions | yes | same as Kafka |",
                     "| kafka-topics | --list | yes | FAILS: x |"]
    assert "3 of 4 rows answer the same" in doc.read_text() and "2 rows from a rerun" in doc.read_text()


def test_readme_gets_the_short_form(tmp_path, monkeypatch):
    """README's matrix is one column per family of clients and tools, counted from the same run,
    written between README's markers only."""
    report = tmp_path / "conformance.xml"
    report.write_text(REPORT)
    doc, readme = tmp_path / "compatibility.md", tmp_path / "README.md"
    doc.write_text(f"{compat_matrix.BEGIN}\n{compat_matrix.END}\n")
    readme.write_text(f"# raftlog\n\n{compat_matrix.BEGIN}\nold\n{compat_matrix.END}\n\nmore\n")
    monkeypatch.setattr(sys, "argv", ["compat_matrix.py", str(report), "--doc", str(doc), "--readme", str(readme)])
    assert compat_matrix.main() == 0
    text = readme.read_text()
    assert "old" not in text and text.startswith("# raftlog\n\n") and text.endswith("\n\nmore\n")
    assert "**1 of 5 answer the same**" in text, text
    assert "| client or tool | Java client and Admin client | Kafka's tools |" in text, text
    assert "| same as Kafka | 1 of 4 | 0 of 1 |" in text, text


def test_readme_only_takes_the_documents_table(tmp_path, monkeypatch):
    """--readme-only: README's short form from the document's last generated table and its date."""
    doc, readme = tmp_path / "compatibility.md", tmp_path / "README.md"
    doc.write_text(f"{compat_matrix.BEGIN}\nGenerated 2026-01-02 03:04 UTC by x\n\n"
                   "| client / tool | feature | Apache Kafka | raftlog |\n| --- | --- | --- | --- |\n"
                   "| Java Admin client | describeTopics | yes | same as Kafka |\n"
                   f"| kafka-topics | --list | yes | FAILS: x |\n{compat_matrix.END}\n")
    readme.write_text(f"{compat_matrix.BEGIN}\n{compat_matrix.END}\n")
    monkeypatch.setattr(sys, "argv", ["compat_matrix.py", "--readme-only", "--doc", str(doc), "--readme", str(readme)])
    assert compat_matrix.main() == 0
    text = readme.read_text()
    assert "(2026-01-02 03:04 UTC," in text and "**1 of 2 answer the same**" in text, text
    assert "| same as Kafka | 1 of 1 | 0 of 1 |" in text, text


def test_a_file_that_is_not_a_report_is_one_clear_error(tmp_path, monkeypatch, capsys):
    not_xml = tmp_path / "README.md"
    not_xml.write_text("# raftlog\n")
    doc = tmp_path / "compatibility.md"
    monkeypatch.setattr(sys, "argv", ["compat_matrix.py", str(not_xml), "--doc", str(doc)])
    assert compat_matrix.main() == 2
    assert "is not a junit XML report" in capsys.readouterr().err and not doc.exists()
