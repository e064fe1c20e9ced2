"""The registry's HTTP listener refuses bad input with Confluent's status and error body and
serves on: a schema that does not parse, a reference to a missing subject, a subject with '/'
or 10 KB long, a 100 MB body, a body that is not a JSON object, a garbled request."""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse

import pytest

pytestmark = pytest.mark.cluster

USER = json.dumps({"type": "record", "name": "User", "fields": [{"name": "a", "type": "int"}]})


def request(cluster, method, path, body=None, raw: bytes | None = None, node_id=1):
    """(status, JSON body) of one request to node `node_id`'s registry."""
    address = urllib.parse.urlparse(cluster.schema_registry(node_id))
    conn = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    try:
        payload = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        conn.request(method, path, body=payload, headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


@pytest.mark.parametrize("method, path, body, status, code", [
    ("POST", "/subjects/bad/versions", {"schema": "{not avro"}, 422, 42201),
    ("POST", "/subjects/bad/versions", {"schema": "message {", "schemaType": "PROTOBUF"}, 422, 42201),
    ("POST", "/subjects/bad/versions", {"schema": USER, "references": [{"name": "x", "subject": "nope", "version": 1}]}, 422, 42201),
    ("POST", "/subjects/a%2Fb/versions", {"schema": USER}, 422, 42208),
    ("POST", "/subjects/" + "s" * 10_240 + "/versions", {"schema": USER}, 422, 42208),
    ("POST", "/subjects/bad/versions", [1, 2, 3], 400, 400),
    ("POST", "/subjects/bad/versions", "a string", 400, 400),
    ("GET", "/schemas/ids/123456789", None, 404, 40403),
    ("GET", "/subjects/never/versions/latest", None, 404, 40401),
])
def test_bad_requests_get_confluent_errors(cluster, method, path, body, status, code):
    got_status, got = request(cluster, method, path, body)
    assert (got_status, got["error_code"]) == (status, code) and got["message"]


def test_a_body_that_is_not_json_is_400(cluster):
    status, body = request(cluster, "POST", "/subjects/bad/versions", raw=b"\x00\xffnot json")
    assert (status, body["error_code"]) == (400, 400)


def test_a_100_mb_body_is_refused_with_413_without_reading_it(cluster):
    address = urllib.parse.urlparse(cluster.schema_registry(2))
    with socket.create_connection((address.hostname, address.port), timeout=30) as sock:
        sock.sendall(b"POST /subjects/big/versions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 104857600\r\n\r\n" + b"{" * 65536)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_garbage_on_the_socket_then_the_node_serves_on(cluster):
    address = urllib.parse.urlparse(cluster.schema_registry(3))
    with socket.create_connection((address.hostname, address.port), timeout=30) as sock:
        sock.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
        sock.recv(1024)
    for node_id in (1, 2, 3):  # a 5xx while `_schemas` elects (a fresh cluster) is retriable
        status, answer = cluster.wait_for(lambda: (got := request(
            cluster, "POST", "/subjects/after-bad-input/versions", {"schema": USER}, node_id=node_id))[0] < 500
            and got, 60, f"node {node_id}'s registry answers")
        assert status == 200, answer
    assert request(cluster, "GET", "/subjects/after-bad-input/versions")[1] == [1]
