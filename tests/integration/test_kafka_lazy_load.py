"""A node starts without kafka-python's protocol classes (about a second of imports): the node's modules, the Kafka listener's included, import none of it; the listener loads it on its first request."""

from __future__ import annotations

import struct
import subprocess
import sys

import trio

from raftlog.node.kafka.context import KafkaContext
from raftlog.node.kafka.listener import serve_kafka

_CHECK = (
    "import sys; import raftlog.node.main, raftlog.node.kafka.listener; "
    "print(sorted(m for m in sys.modules if m == 'kafka' or m.startswith('kafka.')))"
)


def test_node_modules_import_no_kafka_python():
    out = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


async def test_the_first_request_loads_the_protocol_and_is_answered():
    ctx = KafkaContext(node_id=1, cluster_id="c", metadata=None, replicas=None)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(lambda task_status: serve_kafka(
            ctx, "127.0.0.1", 0, max_request_bytes=1 << 20, request_timeout_ms=5000,
            task_status=task_status))
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            # ApiVersions v0: api_key 18, version 0, correlation id 7, client id "t".
            body = struct.pack(">hhih", 18, 0, 7, 1) + b"t"
            await stream.send_all(struct.pack(">i", len(body)) + body)
            data = b""
            with trio.fail_after(60):  # the first request waits for the import
                while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
                    chunk = await stream.receive_some(1 << 16)
                    assert chunk, "the listener closed the connection"
                    data += chunk
        correlation_id, error_code = struct.unpack_from(">ih", data, 4)
        assert (correlation_id, error_code) == (7, 0)
        nursery.cancel_scope.cancel()
