"""bench replication's load worker: paced at `rate` batches/s it never sends ahead of
start + sent / rate (the RF=1 baseline is paced to the RF=3 run's rate), and every request it
sent is answered and counted. Runs against a loopback server that acknowledges each produce
frame, so what is checked is the worker alone."""

import socket
import sys
import threading
from pathlib import Path

from raftlog.base.protocol import FrameDecoder, encode_frame

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import bench_replication  # noqa: E402


class AckServer:
    """Accepts one connection and answers every frame with an acknowledgment."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(30)
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.served = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.listener.accept()
        conn.settimeout(30)
        decoder = FrameDecoder(1 << 24)
        with conn:
            while data := conn.recv(1 << 20):
                decoder.feed(data)
                while (frame := decoder.next_frame()) is not None:
                    self.served += 1
                    conn.sendall(encode_frame({"id": frame["id"], "partitions": [{"base_offset": 0}]}))

    def close(self):
        self.thread.join(timeout=30)
        self.listener.close()
        assert not self.thread.is_alive()


def test_a_paced_worker_sends_no_faster_than_its_rate():
    server = AckServer()
    try:
        m = bench_replication.worker(server.address, "t", 1024, 0.5, 8, rate=100.0)
    finally:
        server.close()
    # Paced: request n goes out at start + n / rate, none at or after start + seconds.
    assert 1 <= server.served <= 0.5 * 100 + 1, server.served
    assert round(m["batches_per_s"] * 0.5) >= 1 and m["errors"] == 0


def test_an_unpaced_worker_has_every_request_answered():
    server = AckServer()
    try:
        m = bench_replication.worker(server.address, "t", 1024, 0.2, 4)
    finally:
        server.close()
    assert server.served > 0 and m["errors"] == 0
    assert m["records_per_batch"] > 0 and m["p50_ms"] == m["p50_ms"]  # not NaN: answers were timed
