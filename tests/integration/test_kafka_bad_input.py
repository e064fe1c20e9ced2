"""Bad input on a node's Kafka port (oversized frame, unknown API key, truncated request, garbage, an ApiVersions version we do not know, an API we do not serve, a request before ApiVersions) gets an error answer or a closed connection with one log line, and the node and its other connections keep working."""

from __future__ import annotations

import socket
import struct
from typing import Iterator

import pytest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

from raftlog.node.kafka import codec, versions

import node_harness as harness

UNSUPPORTED_VERSION = 35


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.NodeCluster]:
    with harness.NodeCluster(tmp_path_factory.mktemp("kafka-bad"), size=1,
                             settings={**harness.TEST_SETTINGS, "max_frame_bytes": 1 << 20}) as c:
        c.start_all()
        c.wait_ready(timeout_s=60)
        yield c


def connect(node) -> socket.socket:
    host, _, port = node.kafka(1).rpartition(":")
    return socket.create_connection((host, int(port)), timeout=10)


def request(sock: socket.socket, message, correlation_id: int, version: int) -> None:
    message.with_header(correlation_id=correlation_id, client_id="bad-input-test")
    sock.sendall(bytes(message.encode(version=version, header=True, framed=True)))


def read_frame(sock: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    (size,) = struct.unpack(">i", exact(4))
    return exact(size)


def closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def healthy(node) -> None:
    """A fresh connection still gets a Metadata answer listing this broker."""
    with connect(node) as sock:
        request(sock, MetadataRequest[12](topics=None, allow_auto_topic_creation=False), 99, 12)
        frame = read_frame(sock)
    assert struct.unpack(">i", frame[:4])[0] == 99
    response = MetadataResponse.decode(frame[5:], version=12)  # header v1: id + empty tags
    assert [b.node_id for b in response.brokers] == [1]


def log_lines(node, reason: str) -> list[str]:
    return [line for line in (node.configs[1].data_dir / "node.log").read_text().splitlines()
            if "kafka_conn_closed" in line and f"reason={reason}" in line]


def test_request_before_api_versions_is_served(node):
    healthy(node)  # Metadata as the first request of a connection: answered, as Kafka does


@pytest.mark.parametrize("reason,payload", [
    ("frame_too_large", struct.pack(">i", (1 << 20) + 1)),
    ("frame_size_negative", struct.pack(">i", -5)),
    ("unknown_api_key", struct.pack(">ihhih", 10, 9999, 0, 7, -1)),
    ("malformed_request", struct.pack(">ihhi", 8, 3, 12, 7)),  # Metadata v12, header cut short
    ("malformed_request", struct.pack(">ihh", 12, 3, 12) + b"\xff" * 8),  # Metadata, then garbage
])
def test_bad_frames_close_the_connection_with_one_log_line(node, reason, payload):
    before = len(log_lines(node, reason))
    with connect(node) as other:  # an innocent connection opened before the bad one
        with connect(node) as sock:
            sock.sendall(payload)
            assert closed(sock)
        request(other, ApiVersionsRequest[0](), 5, 0)
        assert struct.unpack(">i", read_frame(other)[:4])[0] == 5
    node.wait_for(lambda: len(log_lines(node, reason)) == before + 1, 10, f"one {reason} log line")
    healthy(node)


def test_truncated_body_closes_and_earlier_answers_are_sent(node):
    with connect(node) as sock:
        request(sock, ApiVersionsRequest[0](), 1, 0)
        body = bytes(MetadataRequest[4](topics=[MetadataRequest.MetadataRequestTopic(name="t")],
                                        allow_auto_topic_creation=False).encode(version=4))
        header = struct.pack(">hhih", 3, 4, 2, 0)
        frame = header + body[:3]  # a topic array that promises more than the frame holds
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        assert struct.unpack(">i", read_frame(sock)[:4])[0] == 1
        assert closed(sock)
    healthy(node)


def test_unknown_api_versions_version_gets_kip511_answer(node):
    with connect(node) as sock:
        header = struct.pack(">hhih", 18, 99, 42, 0)
        sock.sendall(struct.pack(">i", len(header) + 1) + header + b"\x00")
        frame = read_frame(sock)
    assert struct.unpack(">i", frame[:4])[0] == 42
    response = ApiVersionsResponse.decode(frame[4:], version=0)
    assert response.error_code == UNSUPPORTED_VERSION
    assert {k.api_key for k in response.api_keys} >= {0, 1, 2, 3, 18}


def test_api_we_do_not_serve_gets_unsupported_version(node):
    # ListConfigResources (74) is not served; its answer has a top-level error code
    assert 74 not in versions.SUPPORTED_VERSIONS
    with connect(node) as sock:
        request(sock, codec.REQUEST_CLASSES[74][0](), 8, 1)
        frame = read_frame(sock)
        assert struct.unpack(">i", frame[:4])[0] == 8
        assert codec.RESPONSE_CLASSES[74].decode(frame[5:], version=0).error_code == UNSUPPORTED_VERSION
        request(sock, ApiVersionsRequest[0](), 9, 0)  # the connection stays usable
        assert struct.unpack(">i", read_frame(sock)[:4])[0] == 9
