"""The reference Apache Kafka (issue 40): the pinned release's jars in a cache outside the repo, a
real three-node KRaft cluster on loopback, and Kafka's own command-line tools as users type them.

    python tests/reference/kafka_ref.py fetch     # the jars, once (idempotent; scripts/test runs it)
                                                  # (+ connect-file and Spark's Kafka connector)
    python tests/reference/kafka_ref.py up        # a 3-node Kafka until Ctrl-C (prints bootstrap)

* Jars: `tests/reference/pom.xml` pins the release; `mvn dependency:copy-dependencies` copies
  every jar into `~/.cache/raftlog/kafka-<version>/` (`RAFTLOG_KAFKA_CACHE` moves the cache
  root). A cache is complete only once its `.complete` file exists, so an interrupted download
  is redone, never used half.
* Missing Maven, a missing or too old JDK, or no Maven Central is `ReferenceUnavailable`: the
  tests skip with its one-line reason. Maven Central reached but the download failing is
  `ReferenceDownloadFailed`: an error, never a skip.
* Cluster: combined broker+controller nodes (static voters), each a JVM with a small heap
  (`heap_mb`, 384 by default), on free loopback ports with a temp data dir; ready when every
  broker is in the metadata. Every JVM is stopped by its PID (SIGTERM, then SIGKILL after a
  grace), also when starting failed.
* Tools: `kafka_tool("kafka-topics", "--bootstrap-server", b, "--list")` runs the tool's main
  class with the cached jars, as Kafka's `bin/kafka-topics.sh` does.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from raftlog.cli.cluster import NodeProcess, free_ports, stop_all

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
JAVA_MIN_MAJOR = 17
DOWNLOAD_TIMEOUT_S = 900.0
TOOL_HEAP_MB = 256

# Each tool's main class, as Kafka 4.x's bin/*.sh scripts name it.
TOOL_CLASSES = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-e2e-latency": "org.apache.kafka.tools.EndToEndLatency",
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-server-start": "kafka.Kafka",
}

LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = out
appender.out.target = {target}
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = out
"""


class ReferenceUnavailable(Exception):
    """The reference cannot run on this machine (no Maven, no JDK 17+, no Maven Central): skip."""


class ReferenceDownloadFailed(Exception):
    """Maven Central answered but the pinned Kafka could not be fetched: an error, not a skip."""


def pom_property(name: str, pom: Path = POM) -> str:
    """The value of <name> in the properties of `pom` (a version it pins)."""
    match = re.search(rf"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", pom.read_text())
    assert match is not None, f"{pom} names no {name}"
    return match.group(1)


def kafka_version() -> str:
    return pom_property("kafka.version")


def cache_dir() -> Path:
    root = Path(os.environ.get("RAFTLOG_KAFKA_CACHE") or Path.home() / ".cache" / "raftlog")
    return root / f"kafka-{kafka_version()}"


def java_bin() -> str:
    """`java` of JAVA_HOME or PATH, if its major version is at least 17; else ReferenceUnavailable."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise ReferenceUnavailable("no JDK: the reference Kafka needs Java 17+ (Debian: openjdk-17-jdk-headless)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    match = re.search(r'version "(\d+)', out)
    if match is None or int(match.group(1)) < JAVA_MIN_MAJOR:
        raise ReferenceUnavailable(f"{java} is not Java {JAVA_MIN_MAJOR}+: {out.splitlines()[:1]}")
    return java


_NO_NETWORK = ("UnknownHostException", "Connection refused", "Network is unreachable",
               "connect timed out", "No route to host", "Temporary failure in name resolution")


def ensure_jars(quiet: bool = True) -> Path:
    """The cache directory holding every jar of the pinned Kafka, downloading it once.
    Raises ReferenceUnavailable (no Maven/JDK, Maven Central unreachable) or
    ReferenceDownloadFailed (anything else that stopped the download)."""
    return maven_jars(POM, cache_dir(), f"Kafka {kafka_version()}", quiet=quiet)


# connect-file 4.3.0's connectors call a class kafka-clients 4.4.0 moved: this puts it back
# (ConnectStandalone's classpath).
CONNECT_FILE_BRIDGE = HERE.parent / "conformance" / "java" / "AppInfoParser.java"


def connect_file_plugin() -> Path:
    """The directory of Kafka Connect's FileStream connectors (connect-file, pinned in
    connect-file.pom.xml), for a worker's plugin.path; fetched once, like the Kafka jars.
    A worker running them needs CONNECT_FILE_BRIDGE too (ConnectStandalone adds it)."""
    pom = HERE / "connect-file.pom.xml"
    version = pom_property("connect-file.version", pom)
    return maven_jars(pom, ensure_jars() / "plugins" / f"connect-file-{version}", f"connect-file {version}")


def spark_kafka_jars() -> list[Path]:
    """The jars of Spark's Kafka connector (spark-sql-kafka-0-10, pinned in
    spark-kafka.pom.xml) for spark.jars; fetched once into the cache root."""
    pom = HERE / "spark-kafka.pom.xml"
    version = pom_property("spark.version", pom)
    java_bin()  # Maven and Spark both need the JDK: its absence is the skip reason
    target = cache_dir().parent / f"spark-sql-kafka-{version}"
    return sorted(maven_jars(pom, target, f"spark-sql-kafka-0-10 {version}").glob("*.jar"))


def maven_jars(pom: Path, target: Path, what: str, quiet: bool = True) -> Path:
    """`target`, holding the runtime jars of `pom`'s dependencies (`what` names them in errors),
    copied by `mvn dependency:copy-dependencies` once: complete only once its `.complete` exists."""
    if (target / ".complete").exists():
        return target
    java_bin()
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ReferenceUnavailable(f"no Maven (mvn): {what} is fetched with it (Debian: maven)")
    part = target.with_name(target.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    cmd = [mvn, "-B", "-f", str(pom), "dependency:copy-dependencies", "-DincludeScope=runtime",
           f"-DoutputDirectory={part}"] + (["-q"] if quiet else [])
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ReferenceDownloadFailed(f"mvn did not fetch {what} in {DOWNLOAD_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        text = done.stdout + done.stderr
        if any(marker in text for marker in _NO_NETWORK):
            raise ReferenceUnavailable(f"Maven Central is not reachable: {what} cannot be fetched")
        errors = [line for line in text.splitlines() if "ERROR" in line][:3]
        raise ReferenceDownloadFailed(f"mvn could not fetch {what}: {' | '.join(errors) or text[-600:]}")
    shutil.rmtree(target, ignore_errors=True)
    part.rename(target)
    (target / ".complete").write_text(what + "\n")
    return target


def _log4j(path: Path, *, level: str, target: str) -> Path:
    if not path.exists():
        path.write_text(LOG4J2.format(level=level, target=target))
    return path


# A broker's JVM flags as Kafka's bin/kafka-run-class.sh sets them; a short-lived tool's lighter.
SERVER_JVM = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35")
TOOL_JVM = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")  # C1 only: starts faster
PERF_JVM = ("-XX:+UseG1GC",)  # the perf tools run long enough for C2


def java_argv(main: str, *args: str, heap_mb: int, log4j: Path, extra_cp: Sequence[str] = (),
              jvm: Sequence[str] = TOOL_JVM) -> list[str]:
    """The command line that runs `main` on the cached jars (ensure_jars first)."""
    cp = os.pathsep.join([*extra_cp, str(cache_dir() / "*")])
    return [java_bin(), f"-Xmx{heap_mb}m", f"-Xms{min(heap_mb, 64)}m", *jvm,
            "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={log4j}", "-cp", cp, main, *args]


def kafka_tool(tool: str, *args: str, input_text: str | None = None, timeout_s: float = 120.0,
               workdir: Path | None = None, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools (`kafka-topics`, ...) with `args` as a user types them; returns
    the finished process (stdout, stderr, returncode). Killed by PID at `timeout_s`."""
    jars = ensure_jars()
    log4j = _log4j(jars / "tools-log4j2.properties", level="WARN", target="SYSTEM_ERR")
    perf = tool.endswith(("-perf-test", "-e2e-latency"))
    argv = java_argv(TOOL_CLASSES[tool], *args, heap_mb=512 if perf else TOOL_HEAP_MB, log4j=log4j,
                     jvm=PERF_JVM if perf else TOOL_JVM)
    done = subprocess.run(argv, input=input_text, capture_output=True, text=True, timeout=timeout_s,
                          cwd=workdir, stdin=None if input_text is not None else subprocess.DEVNULL)
    if check and done.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    return done


def compiled(source: Path) -> Path:
    """The classes directory of one Java source compiled against the cached jars with javac,
    kept in the cache under the source's content hash (compiled once per content)."""
    jars = ensure_jars()
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    out = jars / "classes" / f"{source.stem}-{digest}"
    if (out / ".complete").exists():
        return out
    javac = shutil.which("javac") if not os.environ.get("JAVA_HOME") else str(Path(os.environ["JAVA_HOME"]) / "bin" / "javac")
    if not javac or not Path(javac).exists():
        raise ReferenceUnavailable("no javac: the Java client scenarios need a JDK 17+, not only a JRE")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    done = subprocess.run([javac, "-nowarn", "-d", str(out), "-cp", str(jars / "*"), str(source)],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"javac {source.name} failed: {done.stderr[-2000:]}")
    (out / ".complete").write_text(digest + "\n")
    return out


def java_client_argv(source: Path, *args: str, heap_mb: int = TOOL_HEAP_MB) -> list[str]:
    """The command line that runs the main class of `source` (compiled) with `args`."""
    jars = ensure_jars()
    log4j = _log4j(jars / "tools-log4j2.properties", level="WARN", target="SYSTEM_ERR")
    return java_argv(source.stem, *args, heap_mb=heap_mb, log4j=log4j, extra_cp=[str(compiled(source))])


class KafkaProcess(NodeProcess):
    """One Kafka node's JVM (kafka.Kafka server.properties), stopped by its PID like a raftlog node."""

    def __init__(self, node_id: int, config_path: Path, log_path: Path, heap_mb: int):
        super().__init__(node_id, config_path, log_path)
        self.heap_mb = heap_mb

    def argv(self) -> list[str]:
        log4j = _log4j(self.config_path.with_name("log4j2.properties"), level="INFO", target="SYSTEM_OUT")
        return java_argv("kafka.Kafka", str(self.config_path), heap_mb=self.heap_mb, log4j=log4j, jvm=SERVER_JVM)


class ConnectStandalone(NodeProcess):
    """Kafka Connect in standalone mode (connect-standalone: ConnectStandalone worker.properties
    connector.properties...), one JVM stopped by its PID. `worker` is written to
    `root`/worker.properties, each connector to `root`/<name>.properties."""

    def __init__(self, root: Path, worker: dict[str, str], connectors: Sequence[dict[str, str]],
                 heap_mb: int = 384):
        root.mkdir(parents=True, exist_ok=True)
        super().__init__(0, root / "worker.properties", root / "connect.log")
        self.config_path.write_text(_properties_text(worker))
        self.connector_paths = []
        for c in connectors:
            path = root / f"{c['name']}.properties"
            path.write_text(_properties_text(c))
            self.connector_paths.append(path)
        self.heap_mb = heap_mb

    def argv(self) -> list[str]:
        log4j = _log4j(self.config_path.with_name("log4j2.properties"), level="INFO", target="SYSTEM_OUT")
        return java_argv("org.apache.kafka.connect.cli.ConnectStandalone", str(self.config_path),
                         *map(str, self.connector_paths), heap_mb=self.heap_mb, log4j=log4j, jvm=SERVER_JVM,
                         extra_cp=[str(compiled(CONNECT_FILE_BRIDGE))])


def _properties_text(props: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in props.items())


def _cluster_uuid() -> str:
    """A cluster id as Kafka's Uuid.randomUuid makes one: 16 random bytes, URL-safe base64,
    never starting with "-" (kafka-storage's argument parser would take it for an option)."""
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


class KafkaCluster:
    """A real `size`-node Apache Kafka (KRaft, combined roles) under `root` on loopback."""

    def __init__(self, root: Path, size: int = 3, heap_mb: int = 384,
                 overrides: dict[str, str] | None = None):
        self.root = root
        self.size = size
        self.heap_mb = heap_mb
        self.overrides = dict(overrides or {})
        ports = free_ports(2 * size)
        self.broker_ports = {n: ports[2 * (n - 1)] for n in range(1, size + 1)}
        self.controller_ports = {n: ports[2 * (n - 1) + 1] for n in range(1, size + 1)}
        self.processes: dict[int, KafkaProcess] = {}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.broker_ports.values())

    def kafka(self, node_id: int) -> str:
        return f"127.0.0.1:{self.broker_ports[node_id]}"

    def _properties(self, node_id: int) -> str:
        voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in self.controller_ports.items())
        rf = str(min(3, self.size))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.broker_ports[node_id]},"
                         f"CONTROLLER://127.0.0.1:{self.controller_ports[node_id]}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.broker_ports[node_id]}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.root / f"node{node_id}" / "data"),
            # The same defaults as a raftlog node's (raftlog/node/config.py, groupcoord/service.py).
            "num.partitions": "1",
            "default.replication.factor": "1",
            "group.initial.rebalance.delay.ms": "1000",
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "6",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": str(min(2, self.size)),
            "share.coordinator.state.topic.replication.factor": rf,
            # Small: two cores shared with the raftlog nodes and the clients.
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "log.cleaner.threads": "1",
            **self.overrides,
        }
        return _properties_text(props)

    def start(self, timeout_s: float = 180.0) -> None:
        """Format every node's storage, start every JVM, wait until every broker serves."""
        self.format()
        self.launch()
        self.wait_serving(timeout_s)

    def format(self) -> None:
        """Write each node's server.properties and format its KRaft storage (kafka-storage format)."""
        jars = ensure_jars()
        cluster_id = _cluster_uuid()
        for n in range(1, self.size + 1):
            node_dir = self.root / f"node{n}"
            node_dir.mkdir(parents=True, exist_ok=True)
            config = node_dir / "server.properties"
            config.write_text(self._properties(n))
            log4j = _log4j(node_dir / "log4j2.properties", level="INFO", target="SYSTEM_OUT")
            fmt = subprocess.run(java_argv("kafka.tools.StorageTool", "format", "-t", cluster_id,
                                           "-c", str(config), heap_mb=256, log4j=log4j),
                                 capture_output=True, text=True, timeout=180, cwd=jars)
            if fmt.returncode != 0:
                raise RuntimeError(f"kafka-storage format (node {n}) failed: {(fmt.stdout + fmt.stderr)[-800:]}")

    def launch(self) -> None:
        """Start every node's JVM (formatted first); returns at once."""
        for n in range(1, self.size + 1):
            node_dir = self.root / f"node{n}"
            self.processes[n] = KafkaProcess(n, node_dir / "server.properties", node_dir / "server.log",
                                             self.heap_mb).start()

    def wait_serving(self, timeout_s: float) -> None:
        """Until the metadata names every live broker and a controller (polled; raises on timeout
        or when a JVM exits)."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout_s
        live = [n for n, p in self.processes.items() if p.alive()]
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0,
                             "logger": _quiet_logger()})
        last = "no answer"
        while time.monotonic() < deadline:
            dead = [n for n, p in self.processes.items() if n in live and not p.alive()]
            if dead:
                raise RuntimeError(f"Kafka node {dead[0]} exited: {self.processes[dead[0]].log_tail(20)}")
            try:
                desc = admin.describe_cluster(request_timeout=5).result(timeout=10)
                ids = sorted(node.id for node in desc.nodes)
                if len(ids) >= len(live) and desc.controller is not None:
                    return
                last = f"brokers {ids}"
            except Exception as e:  # noqa: BLE001 - not serving yet: poll again
                last = str(e)
            time.sleep(0.5)
        raise RuntimeError(f"the reference Kafka did not serve in {timeout_s:.0f} s ({last})")

    def stop(self, grace_s: float = 30.0) -> dict[int, int | None]:
        return stop_all(self.processes.values(), grace_s)

    def kill(self, node_id: int) -> int | None:
        return self.processes[node_id].kill()

    def pids(self) -> dict[int, int | None]:
        return {n: p.pid for n, p in self.processes.items()}


def _quiet_logger():
    import logging

    logger = logging.getLogger("kafka_ref.admin")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


@contextmanager
def running_kafka(root: Path, size: int = 3, heap_mb: int = 384,
                  overrides: dict[str, str] | None = None) -> Iterator[KafkaCluster]:
    """A started KafkaCluster, every JVM stopped by PID on the way out (also when starting failed)."""
    cluster = KafkaCluster(root, size=size, heap_mb=heap_mb, overrides=overrides)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def main(argv: Sequence[str]) -> int:
    command = argv[0] if argv else "fetch"
    try:
        jars = ensure_jars(quiet=True)
        # Connect's FileStream connectors and Spark's Kafka connector: the conformance suite's too.
        extras = [connect_file_plugin(), *spark_kafka_jars()] if command == "fetch" else []
    except ReferenceUnavailable as e:
        print(f"reference Kafka skipped: {e}", file=sys.stderr)
        return 0 if command == "fetch" else 1
    except ReferenceDownloadFailed as e:
        print(f"reference Kafka: {e}", file=sys.stderr)
        return 1
    if command == "fetch":
        print(f"Apache Kafka {kafka_version()}: {len(list(jars.glob('*.jar')))} jars in {jars}; "
              f"connect-file in {extras[0]}; Spark's Kafka connector in {extras[1].parent}")
        return 0
    if command == "up":
        import tempfile

        with tempfile.TemporaryDirectory(prefix="kafka-ref-") as tmp, running_kafka(Path(tmp)) as cluster:
            print(f"Apache Kafka {kafka_version()} serving: bootstrap {cluster.bootstrap} pids {cluster.pids()}",
                  flush=True)
            signals = {signal.SIGINT, signal.SIGTERM}
            signal.pthread_sigmask(signal.SIG_BLOCK, signals)
            signal.sigwait(signals)
        return 0
    print(f"usage: {sys.argv[0]} [fetch|up]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
