"""The message browser's pure decisions: URL parsing with clear errors, page starts for every seek mode, bounded scans with filters, paging cursors that neither skip nor repeat records, and byte rendering that never fails."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.client.consumer import ConsumerRecord
from raftlog.console import browse
from raftlog.console.browse import BrowseQuery, RecordFilter, parse_timestamp, plan_page, render_bytes, scan, select_page
from raftlog.console.errors import BadInputError


def rec(p: int, o: int, ts: int = 0, key: bytes | None = b"k", value: bytes | None = b"v", headers=()) -> ConsumerRecord:
    return ConsumerRecord("t", p, o, ts, key, value, tuple(headers))


@pytest.mark.parametrize("text, ms", [
    ("0", 0),
    ("1714564800000", 1714564800000),
    ("2024-05-01", 1714521600000),
    ("2024-05-01T12:00:00Z", 1714564800000),
    ("2024-05-01T12:00:00", 1714564800000),            # no zone: UTC
    ("2024-05-01 14:00:00+02:00", 1714564800000),
    ("2024-05-01T12:00:00.250Z", 1714564800250),
])
def test_timestamps_parse(text, ms):
    assert parse_timestamp(text) == ms


@pytest.mark.parametrize("text", ["", "  ", "yesterday", "2024-13-01", "12:00", "-5", "1e9", "2024-05-01T25:00"])
def test_malformed_timestamps_name_the_field(text):
    with pytest.raises(BadInputError) as info:
        parse_timestamp(text)
    assert info.value.field == "timestamp"
    assert "timestamp" in str(info.value)


def test_format_timestamp_round_trips_and_tolerates_junk():
    assert browse.format_timestamp(1714564800250) == "2024-05-01 12:00:00.250 UTC"
    assert browse.format_timestamp(-1) == "-"
    assert browse.format_timestamp(10**20) == str(10**20)


@pytest.mark.parametrize("params, field", [
    ({"partition": "7"}, "partition"),
    ({"partition": "-1"}, "partition"),
    ({"partition": "x"}, "partition"),
    ({"seek": "sideways"}, "seek"),
    ({"seek": "offset"}, "offset"),
    ({"seek": "offset", "offset": "-3"}, "offset"),
    ({"seek": "offset", "offset": "99999999999999999999999"}, "offset"),
    ({"seek": "timestamp", "timestamp": "soon"}, "timestamp"),
    ({"limit": "0"}, "limit"),
    ({"limit": "501"}, "limit"),
    ({"format": "xml"}, "format"),
    ({"from": "0-5"}, "from"),
    ({"from": "9:5"}, "from"),
    ({"key": "hex:zz"}, "key"),
    ({"key": "x" * 2000}, "key"),
    ({"header": "=v"}, "header"),
])
def test_bad_query_parameters_name_their_field(params, field):
    with pytest.raises(BadInputError) as info:
        BrowseQuery.parse(params, partition_count=3)
    assert info.value.field == field


def test_query_defaults_and_filters():
    q = BrowseQuery.parse({}, 3)
    assert (q.partitions, q.seek, q.limit, q.fmt, q.filter.empty) == ((0, 1, 2), "beginning", 50, "text", True)
    q = BrowseQuery.parse({"partition": "1", "seek": "offset", "offset": "10", "key": "hex:00ff",
                           "value": "café", "header": "trace=abc", "format": "decoded"}, 3)
    assert q.partitions == (1,) and q.offset == 10 and q.fmt == "text"
    assert q.filter == RecordFilter(key=b"\x00\xff", value="café".encode(), header_name="trace", header_value=b"abc")


@pytest.mark.parametrize("flt, record, keep", [
    (RecordFilter(key=b"user-4"), rec(0, 0, key=b"user-42"), True),
    (RecordFilter(key=b"user-4"), rec(0, 0, key=None), False),
    (RecordFilter(key=b"\xff"), rec(0, 0, key=b"\x00\xff\xfe"), True),   # non-UTF-8 keys are searchable
    (RecordFilter(value=b"err"), rec(0, 0, value=b"an error"), True),
    (RecordFilter(value=b"err"), rec(0, 0, value=None), False),
    (RecordFilter(header_name="h"), rec(0, 0, headers=[("h", None)]), True),
    (RecordFilter(header_name="h", header_value=b"1"), rec(0, 0, headers=[("h", b"x"), ("h", b"21")]), True),
    (RecordFilter(header_name="h", header_value=b"1"), rec(0, 0, headers=[("h", None)]), False),
    (RecordFilter(header_name="h"), rec(0, 0, headers=[("g", b"1")]), False),
])
def test_filters(flt, record, keep):
    assert flt.matches(record) is keep


BOUNDS = {0: (0, 100), 1: (10, 20), 2: (0, 0)}


@pytest.mark.parametrize("params, starts, tail, notice", [
    ({}, {0: 0, 1: 10, 2: 0}, False, None),
    ({"seek": "end", "limit": "5"}, {0: 95, 1: 15, 2: 0}, True, None),
    ({"seek": "offset", "offset": "50"}, {0: 50, 1: 20, 2: 0}, False, "past the end of partition 1"),
    ({"seek": "offset", "offset": "5", "partition": "1"}, {1: 10}, False, "before the start of partition 1"),
    ({"seek": "offset", "offset": "500", "partition": "0"}, {0: 100}, False, "offset 500 is past the end of partition 0"),
    ({"from": "0:40,1:99"}, {0: 40, 1: 20, 2: 0}, False, None),
])
def test_plan_page(params, starts, tail, notice):
    q = BrowseQuery.parse(params, 3)
    plan = plan_page(q, BOUNDS)
    assert plan.starts == starts and plan.tail is tail
    if notice is None:
        assert plan.notices == ()
    else:
        assert any(notice in n for n in plan.notices), plan.notices


def test_plan_by_timestamp_uses_the_found_offsets_and_says_when_none():
    q = BrowseQuery.parse({"seek": "timestamp", "timestamp": "1000"}, 3)
    plan = plan_page(q, BOUNDS, {0: 42, 1: None, 2: None})
    assert plan.starts == {0: 42, 1: 20, 2: 0}
    assert sum("no record at or after" in n for n in plan.notices) == 2


class Log:
    """Partitions as offset -> record, with gaps; fetch answers at most `per_fetch` records."""

    def __init__(self, data: dict[int, list[ConsumerRecord]], per_fetch: int = 7):
        self.data = data
        self.per_fetch = per_fetch
        self.calls = 0

    def bounds(self) -> dict[int, tuple[int, int]]:
        return {p: (rs[0].offset if rs else 0, rs[-1].offset + 1 if rs else 0) for p, rs in self.data.items()}

    def fetch_many(self, positions):
        self.calls += 1
        out = {}
        for p, pos in positions.items():
            got = [r for r in self.data[p] if r.offset >= pos][: self.per_fetch]
            nxt = got[-1].offset + 1 if got else pos
            out[p] = (got, nxt, 10 * len(got))
        return out


def pages(log: Log, params: dict, max_pages: int = 1000):
    q = BrowseQuery.parse(params, len(log.data))
    bounds = log.bounds()
    seen = []
    for _ in range(max_pages):
        plan = plan_page(q, bounds)
        page = select_page(scan(log.fetch_many, plan, q), plan, q)
        seen.append(page)
        if page.next_cursor is None:
            return seen
        q = BrowseQuery.parse({**params, "from": browse.format_cursor(page.next_cursor)}, len(log.data))
    raise AssertionError("paging did not end")


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=4), limit=st.integers(1, 12),
       gap=st.integers(1, 3), key_mod=st.integers(1, 4))
def test_paging_forward_shows_every_match_once_in_order(sizes, limit, gap, key_mod):
    data = {p: [rec(p, o * gap, ts=o * 10 + p, key=str(o % key_mod).encode()) for o in range(n)] for p, n in enumerate(sizes)}
    log = Log(data)
    for params, want in (
        ({"limit": str(limit)}, [r for rs in data.values() for r in rs]),
        ({"limit": str(limit), "key": "0"}, [r for rs in data.values() for r in rs if r.key == b"0"]),
    ):
        shown = [r for page in pages(log, params) for r in page.records]
        assert sorted(shown) == sorted(want) and len(set(shown)) == len(shown)
        for page in pages(log, params):
            assert len(page.records) <= limit
            assert page.records == sorted(page.records, key=lambda r: (r.timestamp, r.partition, r.offset))


def test_tail_shows_the_newest_records_and_previous_goes_back():
    data = {0: [rec(0, o, ts=o) for o in range(100)]}
    q = BrowseQuery.parse({"seek": "end", "limit": "10"}, 1)
    plan = plan_page(q, {0: (0, 100)})
    page = select_page(scan(Log(data).fetch_many, plan, q), plan, q)
    assert [r.offset for r in page.records] == list(range(90, 100))
    assert page.next_cursor is None and page.prev_cursor == {0: 80}


def test_a_filtered_scan_stops_at_its_budget_and_says_where():
    data = {0: [rec(0, o, value=b"x") for o in range(1000)]}
    q = BrowseQuery.parse({"value": "needle"}, 1)
    plan = plan_page(q, {0: (0, 1000)})
    result = scan(Log(data, per_fetch=50).fetch_many, plan, q, max_records=200)
    page = select_page(result, plan, q)
    assert result.budget_hit and page.records == [] and page.next_cursor == {0: 200}
    assert any("stopped there" in n and "up to offset 199" in n for n in page.notices)


def test_scan_ends_on_an_empty_fetch_and_at_control_batch_gaps():
    class Stuck(Log):
        def fetch_many(self, positions):
            self.calls += 1
            return {p: ([], pos, 0) for p, pos in positions.items()}

    log = Stuck({0: []})
    q = BrowseQuery.parse({}, 1)
    plan = plan_page(q, {0: (0, 10)})
    result = scan(log.fetch_many, plan, q)
    assert log.calls == 1 and result.matches == {0: []}


@pytest.mark.parametrize("data, fmt, kind, note", [
    (None, "text", "null", None),
    (b"hello", "text", "text", None),
    (b"\xff\xfe", "text", "hex", "not UTF-8"),
    (b'{"a": [1, 2]}', "json", "json", None),
    (b"not json", "json", "text", "not JSON"),
    (b"\xff", "json", "hex", "not UTF-8"),
    (b"abc", "hex", "hex", None),
    (b"[" * 100_000, "json", "text", "not JSON"),     # deep nesting: no RecursionError escapes
])
def test_render_bytes(data, fmt, kind, note):
    r = render_bytes(data, fmt)
    assert r.kind == kind
    assert (r.note is None) if note is None else (note in r.note)


def test_render_json_is_pretty_and_large_values_are_cut():
    assert json.loads(render_bytes(b'{"a":1}', "json").text) == {"a": 1}
    assert "\n" in render_bytes(b'{"a":1,"b":2}', "json").text
    big = render_bytes(b"x" * (10 << 20), "text")
    assert big.truncated and big.size == 10 << 20 and len(big.text) == browse.SHOW_MAX_BYTES
    assert render_bytes(b"\x00" * 100_000, "hex").truncated
    assert render_bytes(b"AB", "hex").text.startswith("00000000  41 42")
    assert browse.b64(b"\xff\x00") == "/wA=" and browse.b64(None) == ""


def test_a_filtered_scan_stops_at_its_time_budget():
    data = {0: [rec(0, o, value=b"x") for o in range(1000)]}
    q = BrowseQuery.parse({"value": "needle"}, 1)
    plan = plan_page(q, {0: (0, 1000)})
    ticks = iter(range(1000))
    result = scan(Log(data, per_fetch=50).fetch_many, plan, q, clock=lambda: next(ticks) * 0.1, max_s=0.25)
    assert result.budget_hit and result.scan_end == {0: 150}   # three rounds: 0.0, 0.1, 0.2 s; stops at 0.3 s
