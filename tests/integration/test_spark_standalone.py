"""format("raftlog") on a Spark standalone cluster (a master and two workers from the pyspark package, executors in other processes) and through Spark Connect: source and sink on executors, exactly-once when an executor is SIGKILLed mid-write and when a task fails once and Spark retries it, and the README pipeline (group offsets in, counts per key out, progress committed) on the cluster."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark import cloudpickle  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _load(name: str, path: Path | None = None):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path or HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


import node_harness as harness  # noqa: E402
import sink_helpers as helpers  # noqa: E402
import spark_cluster  # noqa: E402
import spark_fixtures  # noqa: E402

pipeline = _load("spark_pipeline", ROOT / "scripts" / "spark_pipeline.py")

cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(helpers)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="session")
def standalone(tmp_path_factory):
    c = spark_cluster.StandaloneCluster(tmp_path_factory.mktemp("spark-standalone")).start()
    try:
        yield c
    finally:
        c.stop()  # master and workers by PID, then any executor left below them


@pytest.fixture(scope="session")
def spark_on_cluster(standalone):
    """This process's SparkSession, its driver on the standalone master (one 1-core executor
    per worker)."""
    conf = {
        "spark.cores.max": "2", "spark.executor.cores": "1", "spark.executor.memory": "1g",
        "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.extraJavaOptions": spark_cluster.JVM_OPTS,
        "spark.pyspark.python": sys.executable, "spark.task.maxFailures": "4",
    }
    s = spark_fixtures.session(standalone.master_url, conf)
    jsc = s.sparkContext._jsc.sc()
    deadline = time.monotonic() + 180
    while jsc.getExecutorMemoryStatus().size() < 3:  # the driver and two executors
        assert time.monotonic() < deadline, "the executors did not register in 180 s"
        time.sleep(0.2)
    from spark_source import register

    register(s)
    yield s
    if spark_fixtures._state["master"] == standalone.master_url:
        spark_fixtures._stop()


@pytest.fixture(scope="session")
def connect_server(standalone, tmp_path_factory):
    server = spark_cluster.ConnectServer(tmp_path_factory.mktemp("spark-connect"))
    server.start(standalone.master_url)
    try:
        yield server
    finally:
        server.stop()  # its JVM by PID, then its executors' leftovers


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with harness.NodeCluster(tmp_path_factory.mktemp("spark-standalone-nodes"), 3) as c:
        c.start_all()
        c.wait_ready(timeout_s=40)
        yield c


@pytest.fixture(scope="module")
def bootstrap(cluster) -> str:
    return ",".join(cluster.client(n) for n in sorted(cluster.configs))


def _pid(_value):
    return os.getpid()


def test_source_and_sink_run_on_executors_in_other_processes(spark_on_cluster, standalone,
                                                              bootstrap, tmp_path):
    from pyspark.sql import functions as F

    spark = spark_on_cluster
    helpers.create_topic(bootstrap, "sa-src", 3)
    helpers.create_topic(bootstrap, "sa-dst", 3)
    n = 10_000
    helpers.produce_ids(bootstrap, "sa-src", 0, n)
    df = (spark.read.format("raftlog").option("bootstrap", bootstrap)
          .option("subscribe", "sa-src").load())
    pid = F.udf(_pid, "int", useArrow=False)
    rows = df.select("value", pid("value").alias("pid")).collect()
    assert sorted(int(r.value.split(b"-")[1]) for r in rows) == list(range(n))
    # Every read task ran in a Python worker below an executor JVM of this application.
    executors = standalone.executor_pids(spark.sparkContext.applicationId)
    assert len(executors) == 2
    below = {p for e in executors for p in spark_cluster.descendants(e)}
    task_pids = {r.pid for r in rows}
    assert task_pids and task_pids <= below and os.getpid() not in task_pids
    helpers.await_query(helpers.copy_query(spark, bootstrap, "sa-src", "sa-dst",
                                           str(tmp_path / "cp"), max_offsets=n // 2))
    helpers.check_exactly_once(helpers.read_topic(bootstrap, "sa-dst"), range(n))


def _fail_once(marker: str, bootstrap: str, sink: str, at_id: int):
    def check(value: bytes) -> bytes:
        if value == b"id-%07d" % at_id and not os.path.exists(marker):
            with open(marker, "w") as f:
                f.write(str(os.getpid()))
            deadline = time.monotonic() + 60
            while helpers.count_records(bootstrap, sink) < 50:
                if time.monotonic() > deadline:
                    raise TimeoutError("the sink never received rows before the injected failure")
                time.sleep(0.05)
            raise RuntimeError("injected write failure")
        return value

    return check


def test_a_task_failing_mid_write_is_retried_by_spark_and_its_rows_land_once(
        spark_on_cluster, bootstrap, tmp_path):
    from pyspark.sql import functions as F

    spark = spark_on_cluster
    helpers.create_topic(bootstrap, "sa-retry-src", 3)
    helpers.create_topic(bootstrap, "sa-retry-dst", 3)
    n = 16_000
    helpers.produce_ids(bootstrap, "sa-retry-src", 0, n)
    marker = str(tmp_path / "failed-once")
    check = F.udf(_fail_once(marker, bootstrap, "sa-retry-dst", n // 2), "binary", useArrow=False)
    old = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    try:
        # spark.task.maxFailures=4: the failed task is retried within the same batch.
        helpers.await_query(helpers.copy_query(
            spark, bootstrap, "sa-retry-src", "sa-retry-dst", str(tmp_path / "cp"), max_offsets=n,
            transform=lambda df: df.select("key", check("value").alias("value"))))
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", old)
    assert os.path.exists(marker), "the injected failure did not happen"
    helpers.check_exactly_once(helpers.read_topic(bootstrap, "sa-retry-dst"), range(n))


def test_an_executor_sigkilled_mid_write_leaves_every_row_once(spark_on_cluster, standalone,
                                                               bootstrap, tmp_path):
    spark = spark_on_cluster
    helpers.create_topic(bootstrap, "sa-kill-src", 3)
    helpers.create_topic(bootstrap, "sa-kill-dst", 3)
    n = 60_000
    helpers.produce_ids(bootstrap, "sa-kill-src", 0, n)
    app = spark.sparkContext.applicationId
    q = helpers.copy_query(spark, bootstrap, "sa-kill-src", "sa-kill-dst", str(tmp_path / "cp"),
                           max_offsets=n, batch_bytes=1024)
    try:
        deadline = time.monotonic() + 120
        while helpers.count_records(bootstrap, "sa-kill-dst") < 3000:
            assert q.exception() is None, q.exception()
            assert time.monotonic() < deadline, "the sink never received rows"
            time.sleep(0.02)
        victim = standalone.executor_pids(app)[0]
        doomed = [victim, *spark_cluster.descendants(victim)]  # the JVM and its Python workers
        for p in doomed:
            os.kill(p, signal.SIGKILL)
        written = helpers.count_records(bootstrap, "sa-kill-dst")
        assert written < n, "the write finished before the executor was killed"
        helpers.await_query(q, timeout_s=300)
    finally:
        if q.isActive:
            q.stop()
    assert not any(spark_cluster.alive(p) for p in doomed)
    helpers.check_exactly_once(helpers.read_topic(bootstrap, "sa-kill-dst"), range(n))


def _expected_counts(first: int, count: int) -> dict[bytes, int]:
    out: dict[bytes, int] = {}
    for i in range(first, first + count):
        k = b"k%d" % (i % helpers.KEYS)
        out[k] = out.get(k, 0) + 1
    return out


def _latest_counts(bootstrap: str, topic: str) -> dict[bytes, int]:
    latest = {}
    for r in helpers.read_topic(bootstrap, topic):  # per partition in offset order; a key
        latest[r.key] = int(r.value)               # lives in one partition
    return latest


def test_the_readme_pipeline_counts_per_key_exactly_and_commits_to_the_group(
        spark_on_cluster, bootstrap, tmp_path):
    spark = spark_on_cluster
    helpers.create_topic(bootstrap, "clicks", 3)
    helpers.create_topic(bootstrap, "click-counts", 3)
    helpers.produce_ids(bootstrap, "clicks", 0, 5000)
    cp = str(tmp_path / "cp")

    def run():
        q = pipeline.build(spark, bootstrap=bootstrap, source="clicks", sink="click-counts",
                           group="click-counter", checkpoint=cp)
        helpers.await_query(q)

    run()
    assert _latest_counts(bootstrap, "click-counts") == _expected_counts(0, 5000)
    helpers.produce_ids(bootstrap, "clicks", 5000, 1300)
    run()  # the same checkpoint: counts go on from where they were
    assert _latest_counts(bootstrap, "click-counts") == _expected_counts(0, 6300)
    # The listener committed the source's end offsets to the group.
    from raftlog.client import Consumer

    # Where each partition's records end: a leader elected since (a stalled machine) adds
    # an epoch-start control batch, so the high watermark can lie past what Spark read.
    ends = {}
    for r in helpers.read_topic(bootstrap, "clicks"):
        ends[r.partition] = r.offset + 1
    with Consumer(bootstrap, group_id="click-counter", enable_auto_commit=False) as c:
        deadline = time.monotonic() + 30
        while c.committed([("clicks", p) for p in ends]) != {("clicks", p): e for p, e in ends.items()}:
            assert time.monotonic() < deadline, "the group commit of the last batch did not land"
            time.sleep(0.1)
    # What the README shows: `raftlog consume` of the counts.
    out = subprocess.run([sys.executable, "-m", "raftlog.cli", "consume", "click-counts",
                          "--bootstrap", bootstrap, "--from-beginning", "--format", "kv",
                          "--max-messages", str(len(helpers.read_topic(bootstrap, "click-counts")))],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    shown = {}
    for line in out.stdout.splitlines():
        k, _, v = line.partition("\t")
        shown[k] = int(v)  # the latest line of a key is its count
    assert shown == {k.decode(): v for k, v in _expected_counts(0, 6300).items()}


def test_source_and_sink_through_spark_connect(connect_server, bootstrap, tmp_path):
    n = 6_000
    for topic in ("sc-src", "sc-copy", "sc-written"):
        helpers.create_topic(bootstrap, topic, 3)
    helpers.produce_ids(bootstrap, "sc-src", 0, n)
    job = {"remote": connect_server.url, "bootstrap": bootstrap, "source": "sc-src", "n": n,
           "copy_to": "sc-copy", "checkpoint": str(tmp_path / "cp-copy"),
           "write_to": "sc-written"}
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "PYSPARK_PYTHON")}
    p = subprocess.run([sys.executable, str(HERE / "spark_connect_driver.py"), json.dumps(job)],
                       capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-4000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["connect"].startswith("pyspark.sql.connect")
    assert out["read_rows"] == n and out["read_distinct"] == n
    assert len(out["copy_batches"]) >= 2  # maxOffsetsPerTrigger = n / 2 (control batches count)
    helpers.check_exactly_once(helpers.read_topic(bootstrap, "sc-copy"), range(n))
    assert sorted(r.value for r in helpers.read_topic(bootstrap, "sc-written")) == sorted(
        b"w-%d" % i for i in range(100))
