"""Spark with typed values through the registry against three real nodes: the sink encodes a
struct column as Avro (Confluent's wire format, the subject's latest schema), the source decodes
Avro and Protobuf values into struct columns, and a record that does not decode (no magic
byte, an unknown schema id) is a null struct with the reason in value_error."""

from __future__ import annotations

import base64
import http.client
import json
import sys
import urllib.parse

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark import cloudpickle  # noqa: E402

from spark_fixtures import spark  # noqa: E402,F401

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.spark

AVRO_USER = json.dumps({"type": "record", "name": "User", "fields": [
    {"name": "name", "type": "string"}, {"name": "age", "type": "int"},
    {"name": "tags", "type": {"type": "array", "items": "string"}}]})
PROTO = 'syntax = "proto3";\npackage p;\nmessage Point { int32 x = 1; int32 y = 2; string label = 3; }\n'


def rest(cluster, method, path, body=None):
    address = urllib.parse.urlparse(cluster.schema_registry(1))
    conn = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else None
    finally:
        conn.close()


@pytest.fixture(scope="module", autouse=True)
def _registered(spark):  # noqa: F811
    from spark_source import register

    register(spark)


@pytest.fixture(scope="module")
def bootstrap(cluster) -> str:
    return ",".join(cluster.client(n) for n in sorted(cluster.configs))


def make_topic(cluster, name):
    [cid] = [c["cluster_id"] for c in rest(cluster, "GET", "/v3/clusters")[1]["data"]]
    status, body = rest(cluster, "POST", f"/v3/clusters/{cid}/topics",
                        {"topic_name": name, "partitions_count": 1, "replication_factor": 3})
    assert status == 200, body
    return cid


def test_avro_written_from_a_struct_and_read_back_into_columns(spark, cluster, bootstrap):  # noqa: F811
    from pyspark.sql.types import ArrayType, IntegerType, StringType, StructField, StructType

    cid = make_topic(cluster, "spark-avro")
    status, registered = rest(cluster, "POST", "/subjects/spark-avro-value/versions", {"schema": AVRO_USER})
    assert status == 200
    user = StructType([StructField("name", StringType()), StructField("age", IntegerType()),
                       StructField("tags", ArrayType(StringType()))])
    rows = [((f"u{i}", i, ["a"] * (i % 3)),) for i in range(20)]
    (spark.createDataFrame(rows, StructType([StructField("value", user)]))
     .write.format("raftlog").option("bootstrap", bootstrap).option("topic", "spark-avro")
     .option("valueFormat", "avro").option("schemaRegistryUrl", cluster.schema_registry(1)).mode("append").save())
    # Two records no registry decodes: plain bytes, and a header naming an id nobody registered.
    for raw in (b"plain bytes", b"\x00\x00\x01\x86\x9f" + b"\x02"):
        status, _ = rest(cluster, "POST", f"/v3/clusters/{cid}/topics/spark-avro/records",
                         {"value": {"type": "BINARY", "data": base64.b64encode(raw).decode()}})
        assert status == 200

    df = (spark.read.format("raftlog").option("bootstrap", bootstrap).option("subscribe", "spark-avro")
          .option("startingOffsets", "earliest").option("valueFormat", "avro")
          .option("schemaRegistryUrl", cluster.schema_registry(2)).load())
    assert dict(df.dtypes)["value"] == "struct<name:string,age:int,tags:array<string>>"
    got = df.orderBy("offset").select("value.name", "value.age", "value.tags", "value_error").collect()
    written = sorted((r["name"], r["age"], r["tags"]) for r in got[:20])  # Spark's tasks wrote in any order
    assert written == sorted((f"u{i}", i, ["a"] * (i % 3)) for i in range(20))
    assert got[20]["name"] is None and "bad magic byte" in got[20]["value_error"]
    assert got[21]["name"] is None and "unknown schema id 99999" in got[21]["value_error"]
    assert all(r["value_error"] is None for r in got[:20])
    # Every record carries the registered id in its header.
    raw = (spark.read.format("raftlog").option("bootstrap", bootstrap).option("subscribe", "spark-avro")
           .option("startingOffsets", "earliest").load().orderBy("offset").limit(1).collect()[0]["value"])
    assert raw[:5] == b"\x00" + registered["id"].to_bytes(4, "big")


def test_protobuf_values_produced_over_rest_read_into_columns(spark, cluster, bootstrap):  # noqa: F811
    cid = make_topic(cluster, "spark-proto")
    status, registered = rest(cluster, "POST", "/subjects/spark-proto-value/versions",
                              {"schema": PROTO, "schemaType": "PROTOBUF"})
    assert status == 200
    for i in range(5):
        status, body = rest(cluster, "POST", f"/v3/clusters/{cid}/topics/spark-proto/records",
                            {"value": {"type": "PROTOBUF", "schema_id": registered["id"],
                                       "data": {"x": i, "y": -i, "label": f"p{i}"}}})
        assert status == 200, body
    df = (spark.read.format("raftlog").option("bootstrap", bootstrap).option("subscribe", "spark-proto")
          .option("startingOffsets", "earliest").option("valueFormat", "protobuf")
          .option("schemaRegistryUrl", cluster.schema_registry(3)).load())
    got = df.orderBy("offset").select("value.x", "value.y", "value.label").collect()
    assert [tuple(r) for r in got] == [(i, -i, f"p{i}") for i in range(5)]


def test_a_bad_format_option_is_refused_before_reading(spark, cluster, bootstrap):  # noqa: F811
    from spark_source import InvalidOption

    with pytest.raises(Exception, match="valueFormat"):
        (spark.read.format("raftlog").option("bootstrap", bootstrap).option("subscribe", "spark-avro")
         .option("valueFormat", "xml").option("schemaRegistryUrl", cluster.schema_registry(1)).load().collect())
    from spark_source.schemas import parse_format_options
    with pytest.raises(InvalidOption, match="schemaRegistryUrl"):
        parse_format_options({"valueformat": "avro"})
