"""A Spark Connect client run by test_spark_standalone.py in its own process (a Spark Connect
session sets process-wide state that would turn the test process's classic session into a
Connect one). Reads its job as JSON from argv[1], prints one JSON line of results.

Job: {"remote", "bootstrap", "source", "n", "copy_to", "checkpoint", "write_to"}:
* a batch read of `source` through format("raftlog"): its row count and distinct values;
* a streaming copy of `source` to `copy_to` with the exactly-once sink (AvailableNow);
* a batch write of 100 rows to `write_to`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main() -> int:
    job = json.loads(sys.argv[1])
    from pyspark.sql import SparkSession

    import sink_helpers as helpers
    from spark_source import register

    spark = SparkSession.builder.remote(job["remote"]).getOrCreate()
    out: dict = {"connect": type(spark).__module__}
    register(spark)
    df = (spark.read.format("raftlog").option("bootstrap", job["bootstrap"])
          .option("subscribe", job["source"]).load())
    out["read_rows"] = df.count()
    out["read_distinct"] = df.select("value").distinct().count()
    q = helpers.copy_query(spark, job["bootstrap"], job["source"], job["copy_to"],
                           job["checkpoint"], max_offsets=job["n"] // 2)
    helpers.await_query(q)
    out["copy_batches"] = [p.batchId for p in q.recentProgress if p.numInputRows]
    (spark.range(100).selectExpr("cast(id as string) as key", "concat('w-', id) as value")
     .write.format("raftlog").option("bootstrap", job["bootstrap"])
     .option("topic", job["write_to"]).mode("append").save())
    print(json.dumps(out), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
