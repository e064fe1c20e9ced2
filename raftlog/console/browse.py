"""The message browser's decisions, pure: what the URL asks for, where each partition's page
starts, which records a page shows, where the next and previous pages start, and how a key,
value or header is shown. The shell (views.py) fetches; nothing here does I/O.

    query = BrowseQuery.parse(params, partition_count)      # BadInputError on bad input
    plan = plan_page(query, bounds, ts_offsets)             # start offset per partition + notices
    result = scan(fetch_many, plan, query)                  # bounded reads, filter applied
    page = select_page(result, query)                       # merged records, next/prev cursors

Limits (the browser reads pages, never whole partitions): a page shows at most MAX_LIMIT
records; a filtered scan reads at most SCAN_MAX_RECORDS records, SCAN_MAX_BYTES bytes or
SCAN_MAX_S seconds per page, whichever comes first, then says where it stopped so "Next" continues from there; a
shown value is cut at SHOW_MAX_BYTES (the download link gives all of it).

Paging: "Next" starts each partition after the last record the page took from it (or at the
first match it did not take, or where its scan stopped); "Previous" starts each partition
`limit` offsets before this page's start (offset arithmetic, as Kafdrop does: with filters or
compaction gaps a previous page may hold fewer records).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from raftlog.client.consumer import ConsumerRecord
from raftlog.console.errors import BadInputError

__all__ = [
    "BrowseQuery",
    "RecordFilter",
    "PagePlan",
    "ScanResult",
    "Page",
    "Rendered",
    "plan_page",
    "scan",
    "select_page",
    "render_bytes",
    "parse_timestamp",
    "format_timestamp",
    "parse_cursor",
    "format_cursor",
    "b64",
]

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 500
MAX_FILTER_CHARS: Final = 1024
MAX_CURSOR_PARTITIONS: Final = 10_000
SCAN_MAX_RECORDS: Final = 50_000
SCAN_MAX_BYTES: Final = 32 << 20
SCAN_MAX_S: Final = 0.12        # a filtered scan's time budget per page (issue 18: pages under 300 ms)
UNFILTERED_FETCH_BYTES: Final = 64 << 10   # a page of records without a filter needs few bytes
FILTERED_FETCH_BYTES: Final = 256 << 10   # small rounds, so the time budget is checked often
TAIL_SCAN_RECORDS: Final = 5_000  # seek=end with a filter searches this far back per partition
SHOW_MAX_BYTES: Final = 64 << 10
HEX_SHOW_MAX_BYTES: Final = 4 << 10
FORMATS: Final = ("text", "json", "hex", "schema")  # schema: through the registry (views.py)
DECODED: Final = "decoded"   # __consumer_offsets as a table (the page decides; bytes show as text)
SEEKS: Final = ("beginning", "end", "offset", "timestamp")


# ---------------------------------------------------------------- parsing the URL


def parse_timestamp(text: str, field_name: str = "timestamp") -> int:
    """Milliseconds since the epoch from `text`: an integer (ms), or an ISO 8601 date or
    date-time ('2024-05-01', '2024-05-01T12:30', '2024-05-01 12:30:00.250+02:00', 'Z' for
    UTC). A date-time without a zone is UTC. Raises BadInputError."""
    text = text.strip()
    if not text:
        raise BadInputError(field_name, "empty; give ms since the epoch or an ISO 8601 date-time")
    if re.fullmatch(r"\d{1,16}", text):
        return int(text)
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise BadInputError(field_name, f"{text[:64]!r} is neither ms since the epoch nor an ISO 8601 "
                                        "date-time like 2024-05-01T12:30:00Z") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    ms = int(value.timestamp() * 1000)
    if ms < 0:
        raise BadInputError(field_name, f"{text[:64]!r} is before 1970")
    return ms


def format_timestamp(ms: int) -> str:
    """'2024-05-01 12:30:00.250 UTC' (or the raw number when it is no date)."""
    if ms < 0:
        return "-"
    try:
        value = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


def parse_cursor(text: str, partitions: Sequence[int], field_name: str = "from") -> dict[int, int]:
    """'0:15,1:20' -> {0: 15, 1: 20}; partitions must belong to the topic."""
    out: dict[int, int] = {}
    known = set(partitions)
    for item in text.split(","):
        p, sep, o = item.strip().partition(":")
        if not sep or not p.isdigit() or not o.isdigit():
            raise BadInputError(field_name, f"expected partition:offset[,partition:offset...], got {item[:40]!r}")
        if int(p) not in known:
            raise BadInputError(field_name, f"no partition {int(p)} in this topic")
        out[int(p)] = int(o)
        if len(out) > MAX_CURSOR_PARTITIONS:
            raise BadInputError(field_name, "too many partitions")
    return out


def format_cursor(cursor: Mapping[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(cursor.items()))


def _filter_bytes(text: str, field_name: str) -> bytes:
    if len(text) > MAX_FILTER_CHARS:
        raise BadInputError(field_name, f"longer than {MAX_FILTER_CHARS} characters")
    if text.startswith("hex:"):
        try:
            return bytes.fromhex(text[4:])
        except ValueError:
            raise BadInputError(field_name, "hex: must be followed by hex digits, e.g. hex:00ff") from None
    return text.encode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class RecordFilter:
    """Keep records whose key contains `key`, whose value contains `value`, and that have a
    header named `header_name` (whose value contains `header_value`, when given). Empty
    filter: keep everything. Matching is on bytes (text filters are UTF-8; 'hex:..' gives
    raw bytes), so non-UTF-8 keys can be found too."""

    key: bytes | None = None
    value: bytes | None = None
    header_name: str | None = None
    header_value: bytes | None = None

    @property
    def empty(self) -> bool:
        return self.key is None and self.value is None and self.header_name is None

    def matches(self, r: ConsumerRecord) -> bool:
        if self.key is not None and (r.key is None or self.key not in r.key):
            return False
        if self.value is not None and (r.value is None or self.value not in r.value):
            return False
        if self.header_name is not None:
            for name, value in r.headers or ():
                if name == self.header_name and (
                    self.header_value is None or (value is not None and self.header_value in value)
                ):
                    return True
            return False
        return True


@dataclass(frozen=True)
class BrowseQuery:
    """What one message-browser URL asks for (validated)."""

    partitions: tuple[int, ...]       # the partitions read (one, or every one for "all")
    seek: str                         # beginning | end | offset | timestamp
    offset: int | None = None
    timestamp_ms: int | None = None
    cursor: Mapping[int, int] | None = None   # explicit starts ("from"): paging
    limit: int = DEFAULT_LIMIT
    fmt: str = "text"
    filter: RecordFilter = field(default_factory=RecordFilter)

    @property
    def all_partitions(self) -> bool:
        return len(self.partitions) != 1

    @classmethod
    def parse(cls, params: Mapping[str, str], partition_count: int) -> "BrowseQuery":
        """From URL query parameters: partition (N or 'all'), seek, offset, timestamp, from
        (a cursor), limit, format, key, value, header ('name' or 'name=value')."""
        every = tuple(range(partition_count))
        raw_p = (params.get("partition") or "all").strip()
        if raw_p == "all":
            partitions = every
        elif raw_p.isdigit() and int(raw_p) < partition_count:
            partitions = (int(raw_p),)
        else:
            raise BadInputError("partition", f"{raw_p[:20]!r} is not a partition of this topic "
                                              f"(0..{partition_count - 1} or all)")
        seek = (params.get("seek") or "beginning").strip()
        if seek not in SEEKS:
            raise BadInputError("seek", f"expected one of {', '.join(SEEKS)}")
        offset = timestamp_ms = None
        if seek == "offset":
            raw = (params.get("offset") or "").strip()
            if not raw.isdigit() or len(raw) > 19:
                raise BadInputError("offset", f"expected a whole number >= 0, got {raw[:30]!r}")
            offset = int(raw)
        elif seek == "timestamp":
            timestamp_ms = parse_timestamp(params.get("timestamp") or "")
        cursor = None
        if params.get("from"):
            cursor = parse_cursor(params["from"], partitions)
        raw_limit = (params.get("limit") or str(DEFAULT_LIMIT)).strip()
        if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= MAX_LIMIT:
            raise BadInputError("limit", f"expected 1..{MAX_LIMIT}, got {raw_limit[:20]!r}")
        fmt = (params.get("format") or "text").strip()
        if fmt == DECODED:
            fmt = "text"
        elif fmt not in FORMATS:
            raise BadInputError("format", f"expected one of {', '.join(FORMATS)}")
        key = params.get("key") or None
        value = params.get("value") or None
        header = params.get("header") or None
        header_name = header_value = None
        if header is not None:
            name, eq, hv = header.partition("=")
            if not name.strip():
                raise BadInputError("header", "expected name or name=value")
            header_name = name.strip()
            header_value = _filter_bytes(hv, "header") if eq and hv else None
        flt = RecordFilter(
            key=None if key is None else _filter_bytes(key, "key"),
            value=None if value is None else _filter_bytes(value, "value"),
            header_name=header_name, header_value=header_value,
        )  # fmt: skip
        return cls(partitions, seek, offset, timestamp_ms, cursor, int(raw_limit), fmt, flt)


# ---------------------------------------------------------------- planning and scanning


@dataclass(frozen=True)
class PagePlan:
    """Where each partition's read starts and stops (exclusive), what to tell the user."""

    starts: dict[int, int]
    stops: dict[int, int]
    bounds: dict[int, tuple[int, int]]     # (log_start_offset, high watermark) at planning
    tail: bool                             # seek=end without a cursor: show the newest records
    notices: tuple[str, ...] = ()


def plan_page(query: BrowseQuery, bounds: Mapping[int, tuple[int, int]],
              ts_offsets: Mapping[int, int | None] | None = None) -> PagePlan:
    """Start offsets for `query` given each partition's (log start, high watermark) and, for
    seek=timestamp, the first offset at or after the timestamp (None: no record that late)."""
    starts: dict[int, int] = {}
    notices: list[str] = []
    tail = False
    for p in query.partitions:
        low, high = bounds[p]
        if query.cursor is not None:
            want = query.cursor.get(p, low)
        elif query.seek == "beginning":
            want = low
        elif query.seek == "end":
            tail = True
            back = query.limit if query.filter.empty else max(query.limit, TAIL_SCAN_RECORDS)
            want = max(low, high - back)
        elif query.seek == "offset":
            assert query.offset is not None
            want = query.offset
            if want > high:
                notices.append(f"offset {want} is past the end of partition {p} (its last offset is "
                               f"{high - 1}; next offset {high}): nothing to show there")
            elif want < low:
                notices.append(f"offset {want} is before the start of partition {p}: starting at {low}")
        else:
            got = (ts_offsets or {}).get(p)
            want = high if got is None or got < 0 else got
            if got is None or got < 0:
                notices.append(f"partition {p} has no record at or after {format_timestamp(query.timestamp_ms or 0)}")
        starts[p] = min(max(want, low), high)
    return PagePlan(starts, {p: bounds[p][1] for p in query.partitions}, dict(bounds), tail, tuple(notices))


FetchMany = Callable[[Mapping[int, int]], Mapping[int, tuple[list[ConsumerRecord], int, int]]]
"""{partition: position} -> {partition: (records from position on, next position, bytes read)}."""


@dataclass
class ScanResult:
    matches: dict[int, list[ConsumerRecord]]
    scan_end: dict[int, int]        # next offset to read per partition
    scanned_records: int = 0
    scanned_bytes: int = 0
    budget_hit: bool = False


def scan(fetch_many: FetchMany, plan: PagePlan, query: BrowseQuery, *,
         max_records: int = SCAN_MAX_RECORDS, max_bytes: int = SCAN_MAX_BYTES,
         clock: Callable[[], float] | None = None, max_s: float = SCAN_MAX_S) -> ScanResult:
    """Read forward from `plan.starts` until each partition has `query.limit` matches (all
    of them, in tail mode), reaches its stop, or the scan budget is spent: records, bytes,
    or (given a `clock` in seconds) `max_s` of time, checked between rounds. Every round
    reads all unfinished partitions at once (one `fetch_many`)."""
    started = clock() if clock is not None else 0.0
    pos = dict(plan.starts)
    matches: dict[int, list[ConsumerRecord]] = {p: [] for p in pos}
    done = {p for p in pos if pos[p] >= plan.stops[p]}
    result = ScanResult(matches, pos)
    while len(done) < len(pos):
        if (result.scanned_records >= max_records or result.scanned_bytes >= max_bytes
                or (clock is not None and result.scanned_records and clock() - started >= max_s)):
            result.budget_hit = True
            break
        want = {p: o for p, o in pos.items() if p not in done}
        got = fetch_many(want)
        for p, start in want.items():
            records, next_pos, nbytes = got.get(p, ([], start, 0))
            result.scanned_bytes += nbytes
            stop = plan.stops[p]
            full = False
            for r in records:
                if r.offset < pos[p]:
                    continue
                if r.offset >= stop:
                    pos[p] = stop
                    break
                if not plan.tail and len(matches[p]) >= query.limit:
                    full = True
                    break
                result.scanned_records += 1
                pos[p] = r.offset + 1
                if query.filter.matches(r):
                    matches[p].append(r)
            else:
                # Control batches and compaction gaps: the reader's next position is past them.
                pos[p] = max(pos[p], min(next_pos, stop))
            full = full or (not plan.tail and len(matches[p]) >= query.limit)
            if full or next_pos <= start or pos[p] >= stop:
                done.add(p)
    return result


@dataclass(frozen=True)
class Page:
    records: list[ConsumerRecord]
    next_cursor: dict[int, int] | None    # None: nothing after this page (yet)
    prev_cursor: dict[int, int] | None    # None: this is the first page
    notices: tuple[str, ...]


def select_page(result: ScanResult, plan: PagePlan, query: BrowseQuery) -> Page:
    """Merge the partitions' matches by (timestamp, partition, offset) and take one page:
    the first `limit` (the last `limit` in tail mode); cursors as the module docstring says."""
    merged = sorted((r for rs in result.matches.values() for r in rs),
                    key=lambda r: (r.timestamp, r.partition, r.offset))
    shown = merged[-query.limit:] if plan.tail else merged[: query.limit]
    taken = {(r.partition, r.offset) for r in shown}
    next_cursor: dict[int, int] = {}
    for p, rs in result.matches.items():
        left = [r.offset for r in rs if (p, r.offset) not in taken and not plan.tail]
        next_cursor[p] = min(left) if left else result.scan_end[p]
    notices = list(plan.notices)
    if result.budget_hit:
        where = ", ".join(f"partition {p} up to offset {o - 1}" for p, o in sorted(result.scan_end.items())
                          if o > plan.starts[p])
        notices.append(f"searched {result.scanned_records} records ({where or 'nothing'}) and stopped there "
                       "to keep the page fast; Next continues the search")
    elif plan.tail and not query.filter.empty and not shown:
        notices.append(f"no match among the last {TAIL_SCAN_RECORDS} records of each partition")
    more = any(next_cursor[p] < plan.stops[p] for p in next_cursor)
    at_start = all(plan.starts[p] <= plan.bounds[p][0] for p in plan.starts)
    prev_cursor = None
    if not at_start:
        first = {p: plan.starts[p] for p in plan.starts}
        for r in shown:
            first[r.partition] = min(first[r.partition], r.offset)
        prev_cursor = {p: max(plan.bounds[p][0], o - query.limit) for p, o in first.items()}
    return Page(shown, next_cursor if more else None, prev_cursor, tuple(notices))


# ---------------------------------------------------------------- showing bytes


@dataclass(frozen=True)
class Rendered:
    kind: str          # "null" | "text" | "json" | "hex"
    text: str
    size: int          # bytes in the original
    note: str | None = None
    truncated: bool = False


def _hexdump(data: bytes) -> str:
    lines = []
    for i in range(0, len(data), 16):
        chunk = data[i : i + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{i:08x}  {hexes:<47}  {text}")
    return "\n".join(lines)


def render_bytes(data: bytes | None, fmt: str) -> Rendered:
    """`data` shown as `fmt` (text, json, hex). Text that is not UTF-8 and JSON that does not
    parse fall back (to hex, to text) with a note saying so; never raises."""
    if data is None:
        return Rendered("null", "null", 0)
    size = len(data)
    if fmt == "hex":
        cut = data[:HEX_SHOW_MAX_BYTES]
        return Rendered("hex", _hexdump(cut), size, truncated=size > len(cut))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        cut = data[:HEX_SHOW_MAX_BYTES]
        return Rendered("hex", _hexdump(cut), size, note="not UTF-8: shown as hex", truncated=size > len(cut))
    if fmt == "json":
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except (ValueError, RecursionError):
            fmt, note = "text", "not JSON: shown as text"
        else:
            cut = pretty[:SHOW_MAX_BYTES]
            return Rendered("json", cut, size, truncated=len(pretty) > len(cut))
    else:
        note = None
    cut = text[:SHOW_MAX_BYTES]
    return Rendered("text", cut, size, note=note, truncated=len(text) > len(cut))


def b64(data: bytes | None) -> str:
    return "" if data is None else base64.b64encode(data).decode("ascii")
