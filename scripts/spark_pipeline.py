#!/usr/bin/env python
"""A Spark pipeline end to end: read topic A from a consumer group's committed offsets, count
records per key, write the running counts to topic B exactly once, commit A's progress to the
group.

    .venv/bin/python scripts/spark_pipeline.py --bootstrap HOST:PORT \\
        --source clicks --sink click-counts --group click-counter \\
        --checkpoint /tmp/click-counter [--master local[2] | --remote sc://127.0.0.1:15002] \\
        [--every 5s]
    raftlog consume click-counts --from-beginning --format kv     # a key's latest line is its count

Without --every it runs Trigger.AvailableNow (everything there now, then stops); with it, a
micro-batch every interval until Ctrl-C. Run it again with the same --checkpoint and it goes
on where it stopped: the checkpoint holds A's offsets and the counts so far. A first run
starts from the group's committed offsets (earliest where it has none). B must exist.

What each part does:
* source: `startingOffsets = "group:<id>"`;
* aggregation: `groupBy("key").count()` in complete mode: each micro-batch emits the count
  of every key so far (Spark's Python data source sinks take append and complete mode, not
  update), so the latest record of a key in B is its count;
* sink: exactly-once (the default of streaming writes); `rowOrder=key`, because rows after
  an aggregation come in a different order when a task is retried, and exactly-once needs
  each task's rows in the same order every time (docs/spark-exactly-once.md);
* group: `group_commit_listener` commits every completed micro-batch's end offsets of A to
  the group (Kafka's "simple" commits), so `raftlog groups describe <group>` shows the lag.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build(spark, *, bootstrap: str, source: str, sink: str, group: str, checkpoint: str,
          every: str | None = None, query_name: str = "raftlog-pipeline"):
    """Start the pipeline's streaming query in `spark` (classic or Spark Connect) and return
    it. The group listener is added for classic sessions (Spark Connect has no Python
    listener objects of ours)."""
    from pyspark.sql import functions as F

    from spark_source import group_commit_listener, register

    register(spark)
    counts = (spark.readStream.format("raftlog")
              .option("bootstrap", bootstrap)
              .option("subscribe", source)
              .option("startingOffsets", f"group:{group}")
              .load()
              .groupBy("key").count()
              .select("key", F.col("count").cast("string").alias("value")))
    writer = (counts.writeStream.format("raftlog")
              .queryName(query_name)
              .outputMode("complete")
              .option("bootstrap", bootstrap)
              .option("topic", sink)
              .option("rowOrder", "key")
              .option("checkpointLocation", checkpoint))
    if not _is_connect(spark):
        spark.streams.addListener(group_commit_listener(bootstrap, group, query_name=query_name))
    trigger = {"availableNow": True} if every is None else {"processingTime": every}
    return writer.trigger(**trigger).start()


def _is_connect(spark) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    env_bootstrap = os.environ.get("RAFTLOG_BOOTSTRAP")
    ap.add_argument("--bootstrap", default=env_bootstrap, required=env_bootstrap is None,
                    help="host:port[,...] of the cluster (default: $RAFTLOG_BOOTSTRAP)")
    ap.add_argument("--source", required=True, help="topic A (read)")
    ap.add_argument("--sink", required=True, help="topic B (written, must exist)")
    ap.add_argument("--group", required=True, help="consumer group of A")
    ap.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    where.add_argument("--remote", help="Spark Connect URL, e.g. sc://127.0.0.1:15002")
    ap.add_argument("--every", help="micro-batch interval, e.g. 5s (default: AvailableNow)")
    args = ap.parse_args()

    from pyspark.sql import SparkSession

    if args.remote:
        spark = SparkSession.builder.remote(args.remote).getOrCreate()
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        spark = (SparkSession.builder.master(args.master).appName("raftlog-pipeline")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    q = build(spark, bootstrap=args.bootstrap, source=args.source, sink=args.sink,
              group=args.group, checkpoint=args.checkpoint,
              every=None if args.every is None else args.every.replace("s", " seconds"))
    from pyspark.errors import StreamingQueryException

    try:
        q.awaitTermination()
        print(f"done: {sum(p.numInputRows for p in q.recentProgress)} records read from "
              f"{args.source}; counts in {args.sink}", file=sys.stderr)
        return 0
    except KeyboardInterrupt:
        q.stop()
        return 0
    except StreamingQueryException as exc:
        print(f"the pipeline failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.remote is None:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
