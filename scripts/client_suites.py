"""The Kafka clients' own test suites against raftlog (issue 40): `scripts/client_suites SUITE`.

    scripts/client_suites franz-go      [--bootstrap HOST:PORT] [--run REGEX] [--json]
    scripts/client_suites kafka-python  [--bootstrap HOST:PORT] [-k EXPR] [--json]
    scripts/client_suites librdkafka    [--bootstrap HOST:PORT] [--tests 0001,0002] [--json]
    scripts/client_suites kafkajs       [--bootstrap HOST:PORT] [-k PATH_REGEX] [--json]
    scripts/client_suites all           (every suite above, one raftlog cluster)

Without --bootstrap a three-node raftlog (the integration tests' harness, temp data dirs;
broker ids 0-2; ACLs checked, open where none is set; auto-created topics get 4 partitions and
RF 3, or the suite's own docker cluster's defaults when one suite runs alone) is started for the
run and stopped by PID at the end. Each suite's sources and tools are fetched
into ~/.cache/raftlog/ (outside the repo) by its package manager, at a pinned version:
* franz-go: the `pkg/kgo` tests of the module pinned in tests/go.mod (Go module proxy), their
  brokers named by KGO_SEEDS; tests/reference/franz.py names each test left out with its reason.
* kafka-python: the sdist of KAFKA_PYTHON_VERSION from PyPI (it carries `test/integration`),
  installed into its own virtualenv, run with KAFKA_URI naming one raftlog node and
  KAFKA_VERSION=KAFKA_PYTHON_BROKER (the Kafka release whose API versions raftlog's match, as
  kafka-python infers it from ApiVersions); KAFKA_PYTHON_EXCLUDED names the
  tests left out with their reasons.
* librdkafka: its `tests/` at LIBRDKAFKA_VERSION, the nearest to the librdkafka confluent-kafka
  ships that a registry serves with its tests (inside the npm package of Confluent's JavaScript
  client, LIBRDKAFKA_NPM), built with its own configure/make; the broker tests (`-L -Q -E`: no
  local-only tests, quick mode, no socket-emulation tests) with test.conf naming the cluster,
  BROKERS, and KAFKA_PATH a directory of `bin/kafka-*.sh` wrappers that run the reference Kafka's
  tools (tests/reference/kafka_ref.py), so the tests that call kafka-topics.sh run too;
  LIBRDKAFKA_EXCLUDED names the tests left out with their reasons (TESTS_SKIP).
* kafkajs: its git repository at KAFKAJS_TAG (the npm package ships no tests), cloned from
  KAFKAJS_GIT (env RAFTLOG_KAFKAJS_GIT: another URL or a local mirror), its devDependencies
  installed by npm, run by jest with its test helpers' broker addresses (hard-coded
  localhost:9092/9095/9098 in testHelpers/index.js) rewritten to the cluster's, and its two
  docker scripts the tests call (addPartitions, setClientQuota) rewritten to the reference
  Kafka's tools. Its SSL and SASL_SSL listeners are two more raftlog clusters started for the
  run (a one-node SSL one; a three-node SASL_SSL one with ACLs and KafkaJS's PLAIN and SCRAM
  users); KAFKAJS_EXCLUDED names the tests left out with their reasons.
Prints one summary line per suite (passed / failed / skipped / excluded) and, with --json, the
counts as one JSON object on the last line. A suite that cannot run here (no Go, no index) is
one line saying why, and counts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "reference"))
import franz  # noqa: E402 - the reference harness lives with the tests
from kafka_ref import ReferenceUnavailable  # noqa: E402

CACHE = Path(os.environ.get("RAFTLOG_SUITES_CACHE") or Path.home() / ".cache" / "raftlog" / "suites")
KAFKA_PYTHON_VERSION = "3.0.12"
# The broker release the kafka-python suite is told it runs against (its version gates, and
# test_kafka_version_infer's expectation): the one kafka-python 3.0.12 infers from raftlog's
# ApiVersions (ListOffsets v11 is Kafka 4.2's).
KAFKA_PYTHON_BROKER = "4.2.0"

LIBRDKAFKA_VERSION = "2.15.1"
LIBRDKAFKA_NPM = "@confluentinc/kafka-javascript@1.10.1"  # bundles librdkafka 2.15.1 with tests/
# librdkafka's broker tests that are left out against raftlog, each with its reason.
LIBRDKAFKA_EXCLUDED: dict[str, str] = {}
KAFKA_PYTHON_SERVICE = '''"""Written by raftlog's scripts/client_suites: the sdist lacks test/service.py; against an
external broker (KAFKA_URI) the fixtures only need an ExternalService that does nothing."""


class ExternalService:
    def __init__(self, host, port):
        self.host, self.port = host, port

    def start(self):
        pass

    def stop(self):
        pass

    def dump_logs(self):
        pass

    def wait_for(self, pattern, timeout=30):
        return True


class SpawnedService:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("kafka-python's sdist does not ship the broker launcher: set KAFKA_URI")
'''
# The cluster the suites run against when none is given: as the runs had it.
# ACLs are checked, a resource without any open to everyone: KafkaJS's docker-compose runs
# Kafka's authorizer with allow.everyone.if.no.acl.found on its PLAINTEXT listener too (its
# Broker createAcls/describeAcls/deleteAcls tests), and librdkafka's ACL tests need one.
CLUSTER_SETTINGS = {"heartbeat_ms": 300, "session_timeout_ms": 2000, "default_partitions": 4,
                    "default_replication_factor": 3, "acls_enabled": True, "allow_everyone_if_no_acl_found": True}
# A suite run alone gets its own docker cluster's broker settings over those: KafkaJS's
# docker-compose sets num.partitions 2, default.replication.factor 2 and
# group.initial.rebalance.delay.ms 0 (its createPartitions tests grow a default topic to 3).
SUITE_CLUSTER_SETTINGS = {"kafkajs": {"default_partitions": 2, "default_replication_factor": 2,
                                      "group_initial_rebalance_delay_ms": 0}}

# The cluster's broker ids: 0, 1, 2 as the suites' own docker clusters number them (KafkaJS's
# docker-compose, Kafka's KRaft quickstart): their tests assign replicas to broker 0 and look it up.
FIRST_NODE_ID = 0

# kafka-python's integration tests that are left out against raftlog, each with its reason.
KAFKA_PYTHON_EXCLUDED: dict[str, str] = {
    "test_sasl_integration.py": "cannot take an external broker: it skips itself when KAFKA_URI is set, and otherwise "
                                "formats and spawns its own Kafka JVM with SCRAM users (KafkaFixture); what it checks "
                                "runs against raftlog in tests/integration/test_kafka_secure_cluster.py "
                                "(test_kafka_python_logs_in_admin_produce_consume)",
    "test_ssl_integration.py": "cannot take an external broker: its fixture always spawns its own Kafka JVM with a "
                               "keystore it makes with keytool; what it checks runs against raftlog in "
                               "tests/integration/test_mtls_clients.py (test_kafka_python_connects_over_tls)",
}


@contextmanager
def raftlog_cluster(bootstrap: str | None, settings: dict = CLUSTER_SETTINGS) -> Iterator[str]:
    """`bootstrap` if given, else a started three-node raftlog's Kafka bootstrap (stopped after)."""
    if bootstrap:
        yield bootstrap
        return
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_kafka import load_harness

    with tempfile.TemporaryDirectory(prefix="client-suites-") as tmp:
        with load_harness().NodeCluster(Path(tmp), size=3, settings=settings,
                                        first_node_id=FIRST_NODE_ID) as cluster:
            cluster.start_all()
            cluster.wait_ready(timeout_s=90)
            yield cluster.kafka_bootstrap()


def run_franz_go(bootstrap: str, args: argparse.Namespace) -> Counter:
    log = CACHE / "franz-go.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    result = franz.run_kgo_suite(bootstrap, run=args.run, log_path=log)
    print(result.summary(), flush=True)
    for name in result.failed:
        print(f"  failed: {name}")
    for name, reason in result.excluded.items():
        print(f"  excluded: {name}: {reason}")
    print(f"  log: {log}")
    return result.counts


def _kafka_python_tree() -> tuple[Path, Path]:
    """kafka-python's unpacked sdist and a virtualenv with it and its test requirements."""
    base = CACHE / f"kafka-python-{KAFKA_PYTHON_VERSION}"
    src = base / f"kafka_python-{KAFKA_PYTHON_VERSION}"
    venv = base / "venv"
    if (base / ".complete").exists() and (src / "test" / "service.py").exists():
        return src, venv
    base.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                    f"kafka-python=={KAFKA_PYTHON_VERSION}", "-d", str(base)], check=True, timeout=600)
    with tarfile.open(base / f"kafka_python-{KAFKA_PYTHON_VERSION}.tar.gz") as tar:
        tar.extractall(base, filter="data")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(src),
                    "pytest", "pytest-mock", "pytest-timeout", "lz4", "python-snappy", "zstandard", "crc32c"],
                   check=True, timeout=900)
    # The sdist's test/ is a namespace package, so the standard library's `test` package (a
    # regular one) would win the import; an empty __init__.py makes test/ the one imported.
    (src / "test" / "__init__.py").touch()
    # The sdist leaves out test/service.py (the broker processes the suite spawns itself); with
    # an external broker (KAFKA_URI) its fixtures only hold an ExternalService, which does nothing.
    (src / "test" / "service.py").write_text(KAFKA_PYTHON_SERVICE)
    (base / ".complete").write_text(KAFKA_PYTHON_VERSION + "\n")
    return src, venv


def junit_counts(path: Path, qualified: bool = True) -> tuple[Counter, list[str]]:
    """pass/fail/skip counts (errors count as failed) and the failed tests of a JUnit XML file;
    `qualified`: a class name is dotted (pytest's), its last part names the file."""
    counts: Counter = Counter()
    failed = []
    for case in ET.parse(path).getroot().iter("testcase"):
        classname = case.get("classname", "")
        name = f"{classname.rpartition('.')[2] if qualified else classname}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            counts["fail"] += 1
            failed.append(name)
        elif case.find("skipped") is not None:
            counts["skip"] += 1
        else:
            counts["pass"] += 1
    return counts, failed


def print_summary(headline: str, failed: list[str], excluded: dict[str, str], log: Path,
                  excluded_label: str = "{}") -> None:
    """A suite's summary: its headline, each failed test, each one left out with its reason."""
    print(headline, flush=True)
    for name in failed:
        print(f"  failed: {name}")
    for name, reason in excluded.items():
        print(f"  excluded: {excluded_label.format(name)}: {reason}")
    print(f"  log: {log}")


def run_kafka_python(bootstrap: str, args: argparse.Namespace) -> Counter:
    src, venv = _kafka_python_tree()
    first = bootstrap.split(",")[0]
    # KAFKA_ROOT: the fixtures insist that a Kafka distribution directory exists even with an
    # external broker; the wrappers of the reference Kafka's tools stand in for it.
    env = {**os.environ, "KAFKA_URI": f"kafka://{first}", "KAFKA_VERSION": KAFKA_PYTHON_BROKER, "KAFKA_ROOT": str(kafka_path())}
    report = CACHE / "kafka-python.xml"
    cmd = [str(venv / "bin" / "python"), "-m", "pytest", "test/integration", "-p", "no:cacheprovider", "-q",
           "--timeout=120", f"--junitxml={report}"]
    cmd += [f"--ignore=test/integration/{f}" for f in KAFKA_PYTHON_EXCLUDED if f.endswith(".py")]
    deselect = [t for t in KAFKA_PYTHON_EXCLUDED if "::" in t]
    cmd += [f"--deselect=test/integration/{t}" for t in deselect]
    if args.k:
        cmd += ["-k", args.k]
    log = CACHE / "kafka-python.log"
    report.unlink(missing_ok=True)
    with log.open("w") as out:
        subprocess.run(cmd, cwd=src, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=3600)
    if not report.exists():
        raise RuntimeError(f"kafka-python's suite did not run: see {log}")
    counts, failed = junit_counts(report)
    print_summary(f"kafka-python {KAFKA_PYTHON_VERSION} test/integration (KAFKA_URI=kafka://{first}, "
                  f"KAFKA_VERSION={KAFKA_PYTHON_BROKER}): "
                  f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped, "
                  f"{len(KAFKA_PYTHON_EXCLUDED)} excluded", failed, KAFKA_PYTHON_EXCLUDED, log)
    return counts


def _librdkafka_tree() -> Path:
    """librdkafka's source tree with its test-runner built (once)."""
    base = CACHE / "librdkafka"
    src = base / f"librdkafka-{LIBRDKAFKA_VERSION}"
    if (src / "tests" / ".built").exists():
        return src
    base.mkdir(parents=True, exist_ok=True)
    if not (src / "configure").exists():
        subprocess.run(["npm", "pack", "-q", LIBRDKAFKA_NPM], cwd=base, check=True, timeout=600,
                       stdout=subprocess.DEVNULL)
        tgz = next(base.glob("*.tgz"))
        with tarfile.open(tgz) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith("package/deps/librdkafka/")]
            tar.extractall(base, members=members, filter="data")
        (base / "package" / "deps" / "librdkafka").rename(src)
    log = base / "build.log"
    with log.open("w") as out:
        for cmd in (["./configure", "--disable-gssapi", "--disable-curl", "--disable-zstd"],
                    ["make", "-j2", "libs"], ["make", "-j2", "-C", "tests", "test-runner"]):
            if subprocess.run(cmd, cwd=src, stdout=out, stderr=subprocess.STDOUT, timeout=3600).returncode:
                raise RuntimeError(f"librdkafka: {' '.join(cmd)} failed; see {log}")
    (src / "tests" / ".built").write_text(LIBRDKAFKA_VERSION + "\n")
    return src


def kafka_path() -> Path:
    """A KAFKA_PATH for librdkafka's tests: bin/<tool>.sh runs the reference Kafka's tool."""
    import shlex

    import kafka_ref

    root = CACHE / f"kafka-path-{kafka_ref.kafka_version()}"
    bindir = root / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    jars = kafka_ref.ensure_jars()
    log4j = kafka_ref._log4j(jars / "tools-log4j2.properties", level="WARN", target="SYSTEM_ERR")
    for tool, main_class in kafka_ref.TOOL_CLASSES.items():
        argv = kafka_ref.java_argv(main_class, heap_mb=kafka_ref.TOOL_HEAP_MB, log4j=log4j)
        script = bindir / f"{tool}.sh"
        script.write_text(f"#!/bin/sh\nexec {shlex.join(argv)} \"$@\"\n")
        script.chmod(0o755)
    return root


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ROW = re.compile(r"^\|\s*(\d{4}_\S+)\s+\|\s+(PASSED|FAILED|SKIPPED)\s+\|")


def librdkafka_results(report: Path, log: Path) -> dict[str, str]:
    """Each test that ran -> PASSED / FAILED / SKIPPED: from test-runner's JSON report, or from
    the summary table of its log when the report is missing or not valid JSON (a test's
    message can hold a quote the runner does not escape)."""
    try:
        tests = json.loads(report.read_text(errors="replace"))["tests"]
        return {name: t["state"] for name, t in tests.items() if t["state"] in ("PASSED", "FAILED", "SKIPPED")}
    except (OSError, ValueError, KeyError):
        rows = (_ROW.match(_ANSI.sub("", line)) for line in log.read_text(errors="replace").splitlines())
        return {m.group(1): m.group(2) for m in rows if m}


def run_librdkafka(bootstrap: str, args: argparse.Namespace) -> Counter:
    src = _librdkafka_tree()
    tests = src / "tests"
    (tests / "test.conf").write_text(f"metadata.broker.list={bootstrap}\ntest.timeout.multiplier=3\n")
    report = CACHE / "librdkafka-report.json"
    report.unlink(missing_ok=True)
    env = {**os.environ, "KAFKA_PATH": str(kafka_path()), "BROKERS": bootstrap, "TEST_KAFKA_VERSION": "4.0.0",
           "TEST_REPORT": str(report), "RDKAFKA_GITVER": f"v{LIBRDKAFKA_VERSION}",
           "LD_LIBRARY_PATH": f"{src / 'src'}:{src / 'src-cpp'}"}
    if LIBRDKAFKA_EXCLUDED:
        env["TESTS_SKIP"] = ",".join(sorted(LIBRDKAFKA_EXCLUDED))
    if args.tests:
        env["TESTS"] = args.tests
    log = CACHE / "librdkafka.log"
    with log.open("w") as out:
        subprocess.run(["./test-runner", "-L", "-Q", "-E", "-p1"], cwd=tests, env=env, stdout=out,
                       stderr=subprocess.STDOUT, timeout=3 * 3600)
    counts: Counter = Counter()
    failed = []
    states = {"PASSED": "pass", "FAILED": "fail", "SKIPPED": "skip"}
    for name, state in librdkafka_results(report, log).items():
        counts[states[state]] += 1
        if state == "FAILED":
            failed.append(name)
    print_summary(f"librdkafka {LIBRDKAFKA_VERSION} tests/ (broker tests, -L -Q -E): {counts['pass']} passed, "
                  f"{counts['fail']} failed, {counts['skip']} skipped, {len(LIBRDKAFKA_EXCLUDED)} excluded",
                  failed, LIBRDKAFKA_EXCLUDED, log)
    return counts



KAFKAJS_TAG = "v2.2.4"
KAFKAJS_GIT = os.environ.get("RAFTLOG_KAFKAJS_GIT") or "https://github.com/tulios/kafkajs.git"
# KafkaJS's tests left out against raftlog (a jest -t pattern keeps them from running), each
# with its reason. None: its OAUTHBEARER broker tests skip themselves unless OAUTHBEARER_ENABLED=1
# (its separate compose file), and raftlog serves SCRAM-SHA-512/256 and PLAIN, not OAUTHBEARER.
KAFKAJS_EXCLUDED: dict[str, str] = {}
# KafkaJS's users (testHelpers/kafka/server-jaas.conf's PLAIN users, scripts/createScramCredentials.sh's
# SCRAM user): raftlog checks PLAIN against the user's SCRAM credential.
KAFKAJS_USERS = {("test", "SCRAM-SHA-512"): "testtest", ("bob", "SCRAM-SHA-512"): "bobbob",
                 ("alice", "SCRAM-SHA-512"): "alicealice", ("testscram", "SCRAM-SHA-256"): "testtestscram=256",
                 ("testscram", "SCRAM-SHA-512"): "testtestscram=512"}
_SASL_PORT = "Number(process.env.KAFKAJS_SASL_BROKERS.split(',')[0].split(':')[1])"
# The files of KafkaJS's tree rewritten for this cluster (from the pristine file at each run),
# each (text, what it becomes): the broker addresses its test helpers hard-code for its docker
# cluster (PLAINTEXT localhost:9092/9095/9098, SSL :9093/9096/9099, SASL_SSL :9094/9097/9100)
# become the clusters' addresses from KAFKAJS_BROKERS, KAFKAJS_SSL_BROKERS, KAFKAJS_SASL_BROKERS.
_KAFKAJS_PATCHES = {
    "testHelpers/index.js": [
        ("const plainTextBrokers = (host = getHost()) => [`${host}:9092`, `${host}:9095`, `${host}:9098`]",
         "const plainTextBrokers = () => process.env.KAFKAJS_BROKERS.split(',')"),
        ("const sslBrokers = (host = getHost()) => [`${host}:9093`, `${host}:9096`, `${host}:9099`]",
         "const sslBrokers = () => process.env.KAFKAJS_SSL_BROKERS.split(',')"),
        ("const saslBrokers = (host = getHost()) => [`${host}:9094`, `${host}:9097`, `${host}:9100`]",
         "const saslBrokers = () => process.env.KAFKAJS_SASL_BROKERS.split(',')"),
        ("  host: getHost(),\n  port: 9092,",
         "  host: plainTextBrokers()[0].split(':')[0],\n  port: Number(plainTextBrokers()[0].split(':')[1]),"),
        ("    port: 9093,", "    port: Number(sslBrokers()[0].split(':')[1]),"),
        ("    port: 9094,", "    port: Number(saslBrokers()[0].split(':')[1]),"),
        ("brokers: [`${getHost()}:9092`]", "brokers: plainTextBrokers()"),
    ],
    "src/admin/__tests__/createAcls.spec.js": [("      port: 9094,", f"      port: {_SASL_PORT},")],
    "src/broker/__tests__/connect.spec.js": [("port: 9094,", f"port: {_SASL_PORT},")],
}
# Its scripts that `docker exec` into the compose cluster, as the reference Kafka's tools.
_KAFKAJS_SCRIPTS = {
    "addPartitions.sh": '"$KAFKA_PATH/bin/kafka-topics.sh" --bootstrap-server "$KAFKAJS_BROKERS" --alter '
                        '--topic "$TOPIC" --partitions "$PARTITIONS"',
    "setClientQuota.sh": '"$KAFKA_PATH/bin/kafka-configs.sh" --bootstrap-server "$KAFKAJS_BROKERS" --alter '
                         '--add-config "producer_byte_rate=${PRODUCER_BYTES:-1024},consumer_byte_rate='
                         '${CONSUMER_BYTES:-1024}" --entity-type clients --entity-name "${CLIENT_ID:-example-producer}"',
}


def _kafkajs_tree() -> Path:
    """KafkaJS's source tree at KAFKAJS_TAG with its devDependencies (once) and its files
    rewritten for this cluster (each run); ReferenceUnavailable when its repository cannot be
    cloned."""
    base = CACHE / f"kafkajs-{KAFKAJS_TAG}"
    src = base / "src"
    git_dir = base / "git"
    if not (base / ".complete").exists():
        base.mkdir(parents=True, exist_ok=True)
        if not (git_dir / "HEAD").exists():
            clone = subprocess.run(["git", "clone", "--bare", "--quiet", "--depth", "1", "--branch", KAFKAJS_TAG,
                                    KAFKAJS_GIT, str(git_dir)], capture_output=True, text=True, timeout=600,
                                   env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
            if clone.returncode:
                reason = (clone.stderr.strip().splitlines() or ["no output"])[-1]
                raise ReferenceUnavailable(f"cannot clone KafkaJS {KAFKAJS_TAG} from {KAFKAJS_GIT} ({reason}); "
                                           "set RAFTLOG_KAFKAJS_GIT to a reachable URL or a local mirror")
        src.mkdir(exist_ok=True)
        archive = subprocess.run(["git", "--git-dir", str(git_dir), "archive", KAFKAJS_TAG], capture_output=True,
                                 check=True, timeout=300)
        subprocess.run(["tar", "x", "-C", str(src)], input=archive.stdout, check=True, timeout=300)
        log = base / "npm.log"
        with log.open("w") as out:
            if subprocess.run(["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=src, stdout=out,
                              stderr=subprocess.STDOUT, timeout=1800).returncode:
                raise RuntimeError(f"kafkajs: npm install failed; see {log}")
        (base / ".complete").write_text(KAFKAJS_TAG + "\n")
    for name, edits in _KAFKAJS_PATCHES.items():
        text = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{KAFKAJS_TAG}:{name}"],
                              capture_output=True, text=True, check=True, timeout=60).stdout
        for old, new in edits:
            if old not in text:
                raise RuntimeError(f"kafkajs: {name} at {KAFKAJS_TAG} no longer holds {old!r}")
            text = text.replace(old, new)
        (src / name).write_text(text)
    for name, command in _KAFKAJS_SCRIPTS.items():
        (src / "scripts" / name).write_text(f"#!/bin/sh\nset -e\nexec {command}\n")
    return src


@contextmanager
def kafkajs_secure_clusters() -> Iterator[dict[str, str]]:
    """KafkaJS's SSL and SASL_SSL listeners, as raftlog clusters of their own beside the
    PLAINTEXT one (a raftlog node has one security protocol on its Kafka listener; Kafka's broker
    one listener per protocol): a one-node SSL cluster, and a three-node SASL_SSL one with ACLs,
    Kafka's allow.everyone.if.no.acl.found (as KafkaJS's docker-compose) and KafkaJS's users.
    Yields the environment naming them; every node is stopped by PID after."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_kafka import load_harness
    from raftlog.base.client_properties import ClientSecurity

    harness = load_harness()
    with tempfile.TemporaryDirectory(prefix="client-suites-secure-") as tmp:
        root = Path(tmp)
        with harness.secure_cluster(root / "sasl", secrets.token_urlsafe(18), size=3, users=KAFKAJS_USERS,
                                    settings={"allow_everyone_if_no_acl_found": True}) as sasl:
            material = sasl.material
            # KafkaJS's clients take any certificate (rejectUnauthorized: false); the harness checks it.
            ssl_settings = {**harness.TEST_SETTINGS, "security_protocol": "SSL",
                            "tls_cert_file": material.cert_file(1).resolve(),
                            "tls_key_file": material.key_file(1).resolve()}
            security = ClientSecurity(protocol="SSL", ca_location=str(material.ca_file.resolve()))
            with harness.NodeCluster(root / "ssl", size=1, settings=ssl_settings, security=security) as ssl:
                ssl.start_all()
                ssl.wait_ready(timeout_s=90)
                yield {"KAFKAJS_SSL_BROKERS": ssl.kafka_bootstrap(), "KAFKAJS_SASL_BROKERS": sasl.kafka_bootstrap()}


def run_kafkajs(bootstrap: str, args: argparse.Namespace) -> Counter:
    src = _kafkajs_tree()
    report = CACHE / "kafkajs.xml"
    report.unlink(missing_ok=True)
    # KAFKA_VERSION: the newest broker its docker-compose files run (its tests' version gates).
    env = {**os.environ, "KAFKAJS_BROKERS": bootstrap, "KAFKA_PATH": str(kafka_path()), "KAFKA_VERSION": "2.4",
           "NODE_ENV": "test", "KAFKAJS_DEBUG_PROTOCOL_BUFFERS": "1", "JEST_JUNIT_OUTPUT_DIR": str(CACHE),
           "JEST_JUNIT_OUTPUT_NAME": report.name, "JEST_JUNIT_CLASSNAME": "{filepath}",
           "JEST_JUNIT_TITLE": "{classname} {title}"}
    cmd = ["node_modules/.bin/jest", "--ci", "--forceExit", "--maxWorkers=2", "--no-watchman"]
    if KAFKAJS_EXCLUDED:
        cmd += ["-t", f"^(?!.*({'|'.join(KAFKAJS_EXCLUDED)})).*$"]
    if args.k:
        cmd += ["--testPathPattern", args.k]
    log = CACHE / "kafkajs.log"
    with kafkajs_secure_clusters() as secure_env, log.open("w") as out:
        subprocess.run(cmd, cwd=src, env={**env, **secure_env}, stdout=out, stderr=subprocess.STDOUT,
                       timeout=3 * 3600)
    if not report.exists():
        raise RuntimeError(f"kafkajs' suite did not run: see {log}")
    counts, failed = junit_counts(report, qualified=False)
    print_summary(f"kafkajs {KAFKAJS_TAG} (jest, KAFKAJS_BROKERS={bootstrap}): {counts['pass']} passed, "
                  f"{counts['fail']} failed, {counts['skip']} skipped, {len(KAFKAJS_EXCLUDED)} excluded",
                  failed, KAFKAJS_EXCLUDED, log, excluded_label="tests named *{}*")
    return counts


SUITES = {"franz-go": run_franz_go, "kafka-python": run_kafka_python, "librdkafka": run_librdkafka,
          "kafkajs": run_kafkajs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suite", choices=[*SUITES, "all"])
    ap.add_argument("--bootstrap", help="a running raftlog's Kafka bootstrap (default: start a 3-node one)")
    ap.add_argument("--run", help="franz-go: only the tests matching this regex (go test -run)")
    ap.add_argument("-k", help="kafka-python: only the tests matching this expression (pytest -k); "
                    "kafkajs: only the spec files matching this regex (jest --testPathPattern)")
    ap.add_argument("--tests", help="librdkafka: only these tests (TESTS=0001,0002)")
    ap.add_argument("--json", action="store_true", help="print the counts as JSON on the last line")
    args = ap.parse_args()
    # SIGTERM (timeout, a CI runner) ends the run as Ctrl-C does, through the cleanup that stops
    # the cluster's node processes by PID.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    names = list(SUITES) if args.suite == "all" else [args.suite]
    totals: dict[str, dict[str, int]] = {}
    with raftlog_cluster(args.bootstrap, {**CLUSTER_SETTINGS, **SUITE_CLUSTER_SETTINGS.get(args.suite, {})}) as bootstrap:
        for name in names:
            try:
                counts = SUITES[name](bootstrap, args)
            except ReferenceUnavailable as e:
                print(f"{name}: skipped: {e}", flush=True)
                continue
            totals[name] = {k: counts[k] for k in ("pass", "fail", "skip")}
    if args.json:
        print(json.dumps(totals, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
