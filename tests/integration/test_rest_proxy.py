"""The REST proxy over plain HTTP (curl-like requests) against three real nodes: v3 clusters,
topics, partitions, produce (JSON, binary, string, Avro and JSON Schema through the registry,
records:batch), v2 produce and consumer instances (subscribe, records, seek, commit, offsets),
consumer groups and lags; bad input gets Confluent's error body and the nodes serve on."""

from __future__ import annotations

import base64
import http.client
import json
import time
import urllib.parse

import pytest


pytestmark = pytest.mark.cluster

V2 = "application/vnd.kafka.v2+json"
V2_JSON = "application/vnd.kafka.json.v2+json"
V2_BINARY = "application/vnd.kafka.binary.v2+json"
AVRO_USER = json.dumps({"type": "record", "name": "User", "fields": [
    {"name": "name", "type": "string"}, {"name": "age", "type": "int"}]})
JSON_USER = json.dumps({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})


def request(cluster, method, path, body=None, node_id=1, content_type="application/json", raw=None):
    """(status, parsed body or None) of one request to node `node_id`'s registry listener."""
    address = urllib.parse.urlparse(cluster.schema_registry(node_id))
    conn = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
    try:
        payload = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        conn.request(method, path, body=payload, headers={"Content-Type": content_type})
        response = conn.getresponse()
        data = response.read()
        return response.status, (json.loads(data) if data else None)
    finally:
        conn.close()


def until(what, deadline_s=60.0):
    """Poll `what()` until it returns something truthy (a retriable answer on a loaded machine)."""
    end = time.monotonic() + deadline_s
    while True:
        got = what()
        if got or time.monotonic() > end:
            return got
        time.sleep(0.2)


def register(cluster, subject, body):
    """The schema's registered id, asked again while the answer is a 5xx (50003 while `_schemas`
    has its first leader: retriable, as with Confluent's registry)."""
    answers = []
    assert until(lambda: answers.append(request(cluster, "POST", f"/subjects/{subject}/versions", body))
                 or answers[-1][0] < 500), answers[-1]
    status, answer = answers[-1]
    assert status == 200, answer
    return answer


@pytest.fixture(scope="module")
def cid(cluster):
    status, body = request(cluster, "GET", "/v3/clusters")
    assert status == 200 and body["kind"] == "KafkaClusterList"
    return body["data"][0]["cluster_id"]


def create_topic(cluster, cid, name, partitions=3):
    status, body = request(cluster, "POST", f"/v3/clusters/{cid}/topics",
                           {"topic_name": name, "partitions_count": partitions, "replication_factor": 3})
    assert status == 200, body
    for node_id in (1, 2, 3):  # every node's metadata has it (the tests ask any node)
        assert until(lambda: request(cluster, "GET", f"/v3/clusters/{cid}/topics/{name}", node_id=node_id)[0] == 200)


def test_clusters_and_brokers(cluster, cid):
    assert cid == cluster.cluster_id
    status, body = request(cluster, "GET", f"/v3/clusters/{cid}/brokers", node_id=3)
    assert status == 200 and sorted(b["broker_id"] for b in body["data"]) == [1, 2, 3]
    assert request(cluster, "GET", "/v3/clusters/nope")[0] == 404


def test_topics_create_describe_list_delete(cluster, cid):
    create_topic(cluster, cid, "rest-topics", partitions=2)
    status, body = request(cluster, "GET", f"/v3/clusters/{cid}/topics/rest-topics")
    assert status == 200 and body["partitions_count"] == 2 and body["replication_factor"] == 3
    status, body = request(cluster, "GET", f"/v3/clusters/{cid}/topics")
    assert "rest-topics" in [t["topic_name"] for t in body["data"]]
    assert "_schemas" not in [t["topic_name"] for t in body["data"]]
    status, body = request(cluster, "GET", f"/v3/clusters/{cid}/topics/rest-topics/partitions")
    assert [p["partition_id"] for p in body["data"]] == [0, 1]
    status, body = request(cluster, "POST", f"/v3/clusters/{cid}/topics", {"topic_name": "rest-topics"})
    assert status == 400 and "TOPIC_ALREADY_EXISTS" in body["message"]
    assert request(cluster, "DELETE", f"/v3/clusters/{cid}/topics/rest-topics")[0] == 204
    assert until(lambda: request(cluster, "GET", f"/v3/clusters/{cid}/topics/rest-topics")[0] == 404)


def test_produce_every_format_and_read_back_with_a_v2_consumer(cluster, cid):
    create_topic(cluster, cid, "rest-formats", partitions=3)
    avro = register(cluster, "rest-formats-value", {"schema": AVRO_USER})
    js = register(cluster, "rest-json-value", {"schema": JSON_USER, "schemaType": "JSON"})
    records = f"/v3/clusters/{cid}/topics/rest-formats/records"
    sent = [
        {"partition_id": 0, "key": {"type": "STRING", "data": "k"}, "value": {"type": "JSON", "data": {"a": 1}}},
        {"partition_id": 0, "value": {"type": "BINARY", "data": base64.b64encode(b"\x01\x02").decode()}},
        {"partition_id": 0, "value": {"type": "AVRO", "schema_id": avro["id"], "data": {"name": "ann", "age": 7}}},
        {"partition_id": 0, "value": {"type": "AVRO", "subject": "rest-formats-value",
                                      "data": {"name": "bob", "age": 8}}},
        {"partition_id": 0, "value": {"type": "JSONSCHEMA", "schema_id": js["id"], "data": {"name": "cy"}}},
    ]
    offsets = []
    for i, record in enumerate(sent):
        status, body = request(cluster, "POST", records, record, node_id=1 + i % 3)  # any node: forwarded
        assert status == 200, body
        assert body["partition_id"] == 0
        offsets.append(body["offset"])
    assert offsets == sorted(offsets) and len(set(offsets)) == 5

    # The same records through a v2 consumer in the avro format: schema records decoded, the rest shown
    # as undecodable with the reason.
    status, body = request(cluster, "POST", "/consumers/rest-g", {"name": "c1", "format": "avro",
                                                                  "auto.offset.reset": "earliest"}, content_type=V2)
    assert status == 200 and body["instance_id"] == "c1"
    base = body["base_uri"]
    assert request(cluster, "POST", f"{base}/assignments", {"partitions": [{"topic": "rest-formats", "partition": 0}]},
                   content_type=V2)[0] == 204
    status, got = request(cluster, "GET", f"{base}/records")
    assert status == 200 and len(got) == 5, got
    values = [r.get("value") for r in got]
    assert values[2] == {"name": "ann", "age": 7} and values[3] == {"name": "bob", "age": 8}
    assert values[4] == {"name": "cy"}
    assert got[0]["value"] is None and "bad magic" in got[0]["value_error"]
    # Commit, then the group's lag is 0 on partition 0.
    assert request(cluster, "POST", f"{base}/offsets", content_type=V2)[0] == 204
    status, committed = request(cluster, "GET", f"{base}/offsets",
                                {"partitions": [{"topic": "rest-formats", "partition": 0}]}, content_type=V2)
    assert committed["offsets"][0]["offset"] == offsets[-1] + 1
    status, lags = request(cluster, "GET", f"/v3/clusters/{cid}/consumer-groups/rest-g/lags", node_id=2)
    assert status == 200 and [(x["partition_id"], x["lag"]) for x in lags["data"]] == [(0, 0)]
    status, summary = request(cluster, "GET", f"/v3/clusters/{cid}/consumer-groups/rest-g/lag-summary")
    assert summary["total_lag"] == 0
    # Seek back and read again; then the instance is deleted.
    assert request(cluster, "POST", f"{base}/positions/beginning",
                   {"partitions": [{"topic": "rest-formats", "partition": 0}]}, content_type=V2)[0] == 204
    assert len(request(cluster, "GET", f"{base}/records")[1]) == 5
    assert request(cluster, "DELETE", base, content_type=V2)[0] == 204
    status, body = request(cluster, "GET", f"{base}/records")
    assert (status, body["error_code"]) == (404, 40403)


def test_v2_produce_and_subscribe_binary(cluster, cid):
    create_topic(cluster, cid, "rest-v2", partitions=2)
    status, body = request(cluster, "POST", "/topics/rest-v2", {"records": [
        {"key": base64.b64encode(b"k%d" % i).decode(), "value": base64.b64encode(b"v%d" % i).decode()}
        for i in range(20)]}, content_type=V2_BINARY)
    assert status == 200 and len(body["offsets"]) == 20
    status, body = request(cluster, "POST", "/topics/rest-v2/partitions/1", {"records": [{"value": {"x": 1}}]},
                           content_type=V2_JSON)
    assert status == 200 and body["offsets"][0]["partition"] == 1
    status, body = request(cluster, "POST", "/consumers/rest-v2-g", {"format": "binary",
                                                                     "auto.offset.reset": "earliest"}, content_type=V2)
    base = body["base_uri"]
    assert request(cluster, "POST", f"{base}/subscription", {"topics": ["rest-v2"]}, content_type=V2)[0] == 204
    status, got = request(cluster, "GET", f"{base}/records")
    assert status == 200 and len(got) == 21
    binary = sorted(base64.b64decode(r["value"]) for r in got if r["value"] and r["key"])
    assert binary == sorted(b"v%d" % i for i in range(20))
    assert request(cluster, "GET", f"{base}/records")[1] == []  # positions moved on


def test_records_batch_keeps_good_records_and_reports_bad_ones(cluster, cid):
    create_topic(cluster, cid, "rest-batch", partitions=2)
    entries = [{"id": str(i), "value": {"type": "JSON", "data": {"i": i}}} for i in range(100)]
    entries.append({"id": "bad", "value": {"type": "BINARY", "data": "***"}})
    status, body = request(cluster, "POST", f"/v3/clusters/{cid}/topics/rest-batch/records:batch",
                           {"entries": entries}, node_id=2)
    assert status == 207 and len(body["successes"]) == 100
    assert [f["id"] for f in body["failures"]] == ["bad"]
    by_partition: dict[int, list[int]] = {}
    for s in body["successes"]:
        by_partition.setdefault(s["partition_id"], []).append(s["offset"])
    assert all(len(set(o)) == len(o) for o in by_partition.values())


@pytest.mark.parametrize("method, path, body, content_type, status, code", [
    ("GET", "/v3/clusters/{cid}/topics/never", None, "application/json", 404, 40401),
    ("POST", "/v3/clusters/{cid}/topics/never/records", {"value": {"type": "JSON", "data": 1}}, "application/json",
     404, 40401),
    ("POST", "/v3/clusters/{cid}/topics/rest-formats/records", {"value": {"type": "BINARY", "data": "!!"}},
     "application/json", 422, 42207),
    ("POST", "/v3/clusters/{cid}/topics/rest-formats/records", {"value": {"type": "AVRO", "schema_id": 99999,
                                                                          "data": {}}}, "application/json", 404, 40403),
    ("POST", "/v3/clusters/{cid}/topics/rest-formats/records", {"value": {"type": "AVRO", "subject": "rest-formats-value",
                                                                          "data": {"name": 1}}}, "application/json", 422, 42207),
    ("POST", "/v3/clusters/{cid}/topics/rest-formats/records", {"partition_id": 99}, "application/json", 404, 40402),
    ("POST", "/v3/clusters/{cid}/topics/rest-formats/records", [1, 2], "application/json", 400, 400),
    ("POST", "/v3/clusters/{cid}/topics", {"topic_name": "a/b"}, "application/json", 400, 400),
    ("POST", "/topics/rest-formats", {"records": [{"value": 1}]}, "text/plain", 415, 415),
    ("GET", "/consumers/g/instances/nobody/records", None, V2, 404, 40403),
    ("POST", "/consumers/g", {"format": "xml"}, V2, 422, 42204),
])
def test_bad_input_gets_confluent_errors(cluster, cid, method, path, body, content_type, status, code):
    got_status, got = request(cluster, method, path.format(cid=cid), body, content_type=content_type)
    assert (got_status, got["error_code"]) == (status, code) and got["message"]


def test_a_duplicate_consumer_instance_is_409_and_the_nodes_serve_on(cluster, cid):
    assert request(cluster, "POST", "/consumers/dup", {"name": "x"}, content_type=V2)[0] == 200
    status, body = request(cluster, "POST", "/consumers/dup", {"name": "x"}, content_type=V2)
    assert (status, body["error_code"]) == (409, 40902)
    assert sorted(cluster.live()) == [1, 2, 3]
    assert all(request(cluster, "GET", "/v3/clusters", node_id=n)[0] == 200 for n in (1, 2, 3))
