"""Observability: the metrics registry renders Prometheus text 0.0.4 (through prometheus-client, collectors included) and keeps its limits, the HTTP listener answers /health and /metrics (and refuses the rest), and event lines are one-line logfmt."""

import io
import json
import logging

import pytest
import trio

from raftlog.base.eventlog import format_value, log_event, setup_logging
from raftlog.node.http import MAX_HEAD_BYTES, parse_request_head, serve_http
from raftlog.base.metrics import MetricsRegistry, counter_family, gauge_family


def test_counter_gauge_histogram_render():
    registry = MetricsRegistry()
    requests = registry.counter("raftlog_requests_total", "Requests.", ("op", "code"))
    requests.labels(op="produce", code="OK").inc()
    requests.labels(op="produce", code="OK").inc(2)
    requests.labels(op="fetch", code='we"ird\\\n').inc()
    gauge = registry.gauge("raftlog_connections", "Open\nconnections.")
    gauge.set(3)
    gauge.dec()
    latency = registry.histogram("raftlog_latency_ms", "Latency.", buckets=(1, 10, 100))
    for value in (0.5, 5, 5, 50, 5000):
        latency.observe(value)
    text = registry.render()
    assert text.endswith("\n")
    lines = text.splitlines()
    assert "# HELP raftlog_connections Open\\nconnections." in lines
    assert "# TYPE raftlog_requests_total counter" in lines
    assert 'raftlog_requests_total{code="OK",op="produce"} 3.0' in lines  # labels sorted
    assert 'raftlog_requests_total{code="we\\"ird\\\\\\n",op="fetch"} 1.0' in lines
    assert "raftlog_connections 2.0" in lines
    assert "# TYPE raftlog_latency_ms histogram" in lines
    assert 'raftlog_latency_ms_bucket{le="1.0"} 1.0' in lines
    assert 'raftlog_latency_ms_bucket{le="10.0"} 3.0' in lines
    assert 'raftlog_latency_ms_bucket{le="100.0"} 4.0' in lines
    assert 'raftlog_latency_ms_bucket{le="+Inf"} 5.0' in lines
    assert "raftlog_latency_ms_sum 5060.5" in lines
    assert "raftlog_latency_ms_count 5.0" in lines
    assert requests.value(op="produce", code="OK") == 3


def test_gauge_function_read_at_scrape():
    registry = MetricsRegistry()
    box = [1]
    registry.gauge("g", "G.", ("listener",)).labels(listener="client").set_function(lambda: box[0])
    box[0] = 42
    assert 'g{listener="client"} 42.0' in registry.render().splitlines()


def test_registry_rules():
    registry = MetricsRegistry(max_series=2)
    counter = registry.counter("c_total", "C.", ("k",))
    assert registry.counter("c_total", "C.", ("k",)) is counter  # same family
    with pytest.raises(ValueError):
        registry.gauge("c_total", "C.", ("k",))  # same name, other kind
    with pytest.raises(ValueError):
        registry.counter("c_total", "C.", ("other",))
    with pytest.raises(ValueError):
        registry.counter("bad-name", "x")
    with pytest.raises(ValueError):
        registry.counter("x_total", "x", ("__reserved",))
    with pytest.raises(ValueError):
        registry.histogram("h", "x", ("le",))
    with pytest.raises(ValueError):
        registry.histogram("h2", "x", buckets=(10, 1))
    with pytest.raises(ValueError):
        counter.labels(k="a").inc(-1)
    with pytest.raises(ValueError):
        counter.labels(wrong="a")
    with pytest.raises(ValueError):
        counter.inc()  # labelled family needs .labels()
    counter.labels(k="a").inc()
    counter.labels(k="b").inc()
    with pytest.raises(ValueError, match="already has 2 label combinations"):
        counter.labels(k="c")
    assert MetricsRegistry().render() == ""


def test_collector_families_are_made_at_scrape_time():
    """Per-partition families come from collectors over a service's state: nothing is
    stored between scrapes, and each scrape sees the state as it is then."""
    registry = MetricsRegistry()
    state = {("demo", 0): 10, ("demo", 1): 7}
    calls = []

    def collect():
        calls.append(1)
        return [gauge_family("raftlog_partition_high_watermark", "HW.", ("topic", "partition"),
                             {(t, p): hw for (t, p), hw in state.items()}),
                counter_family("raftlog_topic_bytes_in_total", "Bytes.", ("topic",), {("demo",): 5})]

    registry.collector(collect)
    assert calls == []  # not described at registration
    lines = registry.render().splitlines()
    assert 'raftlog_partition_high_watermark{partition="0",topic="demo"} 10.0' in lines
    assert 'raftlog_topic_bytes_in_total{topic="demo"} 5.0' in lines
    assert "# TYPE raftlog_topic_bytes_in_total counter" in lines
    state[("demo", 0)] = 11
    del state[("demo", 1)]
    text = registry.render()
    assert 'raftlog_partition_high_watermark{partition="0",topic="demo"} 11.0' in text
    assert 'partition="1"' not in text
    with pytest.raises(ValueError):
        gauge_family("bad-name", "x")


async def http_get(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(raw)
        data = b""
        with trio.fail_after(5):
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), headers, body


async def test_http_health_and_metrics(nursery):
    registry = MetricsRegistry()
    registry.counter("raftlog_demo_total", "Demo.").inc(5)
    state = {"ok": True, "node_id": 1}
    port = await nursery.start(serve_http, registry, lambda: state, "127.0.0.1", 0)

    status, headers, body = await http_get(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 200 and json.loads(body) == {"ok": True, "node_id": 1}
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(body)

    state["ok"] = False
    status, _, body = await http_get(port, b"GET /health HTTP/1.1\r\n\r\n")
    assert status == 503 and json.loads(body)["ok"] is False

    status, headers, body = await http_get(port, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n")
    assert status == 200
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    assert b"raftlog_demo_total 5.0" in body.splitlines()

    assert (await http_get(port, b"GET /nope HTTP/1.1\r\n\r\n"))[0] == 404
    assert (await http_get(port, b"POST /metrics HTTP/1.1\r\n\r\n"))[0] == 405
    assert (await http_get(port, b"garbage\r\n\r\n"))[0] == 400
    big = b"GET /metrics HTTP/1.1\r\nX: " + b"a" * (MAX_HEAD_BYTES * 2) + b"\r\n\r\n"
    assert (await http_get(port, big))[0] == 431
    # Still serving after all that.
    assert (await http_get(port, b"GET /metrics HTTP/1.1\r\n\r\n"))[0] == 200


async def test_http_health_that_raises_is_503(nursery, caplog):
    def broken() -> dict:
        raise RuntimeError("probe exploded")

    port = await nursery.start(serve_http, MetricsRegistry(), broken, "127.0.0.1", 0)
    with caplog.at_level(logging.ERROR, logger="raftlog.node.http"):
        status, _, body = await http_get(port, b"GET /health HTTP/1.1\r\n\r\n")
    assert status == 503 and "probe exploded" in json.loads(body)["error"]
    assert any("health_failed" in r.getMessage() for r in caplog.records)


async def test_http_broken_gauge_is_500_and_listener_survives(nursery, caplog):
    registry = MetricsRegistry()
    registry.gauge("raftlog_broken", "Broken.").set_function(lambda: 1 / 0)
    port = await nursery.start(serve_http, registry, lambda: {"ok": True}, "127.0.0.1", 0)
    with caplog.at_level(logging.ERROR, logger="raftlog.node.http"):
        status, _, body = await http_get(port, b"GET /metrics HTTP/1.1\r\n\r\n")
    assert status == 500 and b"ZeroDivisionError" in body
    assert (await http_get(port, b"GET /health HTTP/1.1\r\n\r\n"))[0] == 200


@pytest.mark.parametrize(
    "head",
    [b"GET / HTTP/2.0", b"GET  / HTTP/1.1", b"get / HTTP/1.1", b"GET x HTTP/1.1",
     b"GET / HTTP/1.1\r\nno-colon", b"GET /\xff HTTP/1.1"],
)  # fmt: skip
def test_parse_request_head_rejects(head):
    with pytest.raises(ValueError):
        parse_request_head(head)


def test_logfmt_lines():
    stream = io.StringIO()
    level = logging.getLogger().level
    handlers = setup_logging("debug", stream=stream, node_id=3)
    try:
        logger = logging.getLogger("raftlog.test")
        log_event(logger, "conn_open", peer="127.0.0.1:5", note='two words "quoted"', n=None)
        logger.info("plain\nmessage")
        try:
            raise ValueError("boom")
        except ValueError:
            log_event(logger, "failed", level=logging.ERROR, exc_info=True)
    finally:
        logging.getLogger().removeHandler(handlers[0])
        logging.getLogger().setLevel(level)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3  # tracebacks stay on one line
    first = lines[0]
    assert first.startswith("ts=") and first.split()[0].endswith("Z")
    assert " level=info logger=raftlog.test node=3 event=conn_open peer=127.0.0.1:5 " in first
    assert first.endswith('note="two words \\"quoted\\"" n=null')
    assert 'msg="plain\\nmessage"' in lines[1]
    assert "event=failed" in lines[2] and "ValueError: boom" in lines[2]


def test_setup_logging_is_idempotent_and_checks_level(tmp_path):
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    try:
        setup_logging("INFO", stream=io.StringIO())
        handlers = setup_logging("INFO", file=tmp_path / "node.log")
        assert [h for h in root.handlers if h not in before] == handlers
        log_event(logging.getLogger("raftlog.x"), "hello", k=1)
        handlers[0].flush()
        assert "event=hello k=1" in (tmp_path / "node.log").read_text()
    finally:
        for handler in [h for h in root.handlers if h not in before]:
            root.removeHandler(handler)
            handler.close()
        root.setLevel(level)
    with pytest.raises(ValueError):
        setup_logging("LOUD")


def test_format_value():
    assert format_value("plain") == "plain"
    assert format_value("") == '""'
    assert format_value("a=b") == '"a=b"'
    assert format_value(True) == "true"
    assert format_value(b"\x01\x02") == "0102"
    assert format_value("tab\there\x00") == '"tab\\there\\x00"'
