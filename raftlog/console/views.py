"""The console's pages and actions (Starlette endpoints). Each page does its cluster work in
ONE blocking call on a worker thread (`run_blocking`: one leased ClientSet, under the
console's CapacityLimiter), then renders a server-side template.

Routes (app.py wires them):

    GET  /                                   overview: controller, voters, brokers, partition health, rates
    GET  /live/rates                         SSE: cluster rates every scrape interval
    GET  /topics            POST /topics     topics (sizes, retention, compaction); create
    GET  /topics/{t}                         partitions, offsets, replica lag; configs
    POST /topics/{t}/configs                 alter configs
    GET|POST /topics/{t}/delete              delete (typed confirmation)
    GET  /topics/{t}/messages                message browser; POST: produce a test message
    GET  /topics/{t}/records/{p}/{o}/{part}  a record's key or value, base64, as a download
    GET  /brokers/configs   POST             dynamic broker configs (cluster-wide, per broker); alter one
    GET  /groups            GET /groups/{g}  consumer groups; one group's members, offsets, lag
                                             (to the high watermark and to the last stable offset)
    GET  /live/groups/{g}                    SSE: the group's lag every scrape interval
    POST /groups/{g}/reset                   reset offsets (dry run, then apply)
    GET|POST /groups/{g}/delete              delete a group (typed confirmation)
    GET  /transactions                       open transactions, per id and per partition (txn_views.py)
    GET  /offsets                            __consumer_offsets decoded
    GET|POST /login         POST /logout     the secure cluster's login
    GET  /healthz                            the console's own liveness

Errors never leave as a traceback: app.py's handlers turn BadInputError into 400,
UnknownTopicOrPartitionError into 404, other cluster and client errors into 503, each as a page
with one clear line.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, Final, TypeVar

import trio
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse

from groupcoord.errors import InvalidGroupRecordError
from groupcoord.records import GroupKey, OffsetKey, decode_record
from raftlog.base.topics import OFFSETS_TOPIC
from raftlog.console import backend, browse, schema_views
from raftlog.console.auth import Credentials, check_csrf, client_config, config_key, login_required
from raftlog.console.backend import ClientSet, classify_partitions
from raftlog.console.errors import BadInputError, CsrfError, RaftlogError, UnknownGroupError, UnknownTopicOrPartitionError
from raftlog.console.state import ConsoleState
from raftlog.node.registry.errors import RegistryError

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_TOPICS_LISTED = 1000
MAX_HEADERS = 32
TOPIC_CONFIG_KEYS = ("cleanup_policy", "retention_ms", "retention_bytes", "max_message_bytes")


def _state(request: Request) -> ConsoleState:
    return request.app.state.console


async def run_blocking(request: Request, fn: Callable[..., T], *args: Any) -> T:
    """fn(client_set, *args) on a worker thread with this visitor's clients."""
    state = _state(request)
    session = request.state.session
    config = client_config(state.settings.security, session.credentials)

    def work() -> T:
        with state.pool.lease(config) as cs:
            return fn(cs, *args)

    return await trio.to_thread.run_sync(work, limiter=state.limiter)


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    state = _state(request)
    session = getattr(request.state, "session", None)
    context.setdefault("notices", [])
    return state.templates.TemplateResponse(request, template, {
        "csrf": session.csrf_token if session is not None else "",
        "user": session.credentials.username if session is not None and session.credentials else None,
        "secure": login_required(state.settings.security),
        "cluster_label": state.cluster_label,
        "schemas_on": state.settings.schema_registry is not None,
        "fmt_ts": browse.format_timestamp,
        **context,
    }, status_code=status_code)


async def form_of(request: Request) -> dict[str, str]:
    """The posted form (urlencoded) after the CSRF check; raises CsrfError without a valid token."""
    # One field may be as large as the whole body limit (a test value the cluster then judges).
    form = await request.form(max_files=0, max_fields=200, max_part_size=_state(request).settings.max_body_bytes)
    values = {k: v for k, v in form.items() if isinstance(v, str)}
    if not check_csrf(request.state.session.csrf_token, values.get("csrf")):
        raise CsrfError("the form's security token is missing or stale: reload the page and try again")
    return values


def _q(**params: Any) -> str:
    return urllib.parse.urlencode({k: v for k, v in params.items() if v not in (None, "")})


# ---------------------------------------------------------------- overview


async def probe(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """True when host:port accepts a TCP connection within timeout_s."""
    with trio.move_on_after(timeout_s):
        try:
            stream = await trio.open_tcp_stream(host, port)
        except OSError:
            return False
        await stream.aclose()
        return True
    return False


async def broker_liveness(brokers: list[dict]) -> dict[int, bool]:
    """{broker id: reachable}: every broker's client port probed at once."""
    out: dict[int, bool] = {}

    async def one(b: dict) -> None:
        out[b["id"]] = await probe(str(b.get("host")), int(b.get("port") or 0))

    async with trio.open_nursery() as nursery:
        for b in brokers:
            nursery.start_soon(one, b)
    return out


async def overview(request: Request) -> Response:
    ov = await run_blocking(request, backend.read_overview)
    brokers = [dict(b) for b in ov.status.brokers]
    reachable = await broker_liveness(brokers)
    live = {}
    for b in brokers:
        b["reachable"] = reachable.get(b["id"], False)
        b["live"] = b["reachable"] and not b.get("fenced", True)
        live[b["id"]] = b["live"]
    rows = classify_partitions(ov.topics.values(), live)
    state = _state(request)
    return render(
        request, "overview.html", status=ov.status, brokers=brokers,
        partitions_total=len(rows), topics_total=sum(1 for t in ov.topics.values() if not t.internal),
        offline=[r for r in rows if r.state == "offline"],
        under_replicated=[r for r in rows if r.state == "under-replicated"],
        rates=state.rates_payload(), node_http=state.settings.node_http,
        nodes_scraped=state.nodes_scraped,
    )  # fmt: skip


async def live_rates(request: Request) -> Response:
    state = _state(request)

    async def events():
        seen = None
        async for _ in state.stream_ticks():
            payload = state.rates_payload()
            last = payload["t"][-1] if payload["t"] else None
            if last != seen:
                seen = last
                yield f"data: {json.dumps(payload)}\n\n"

    return state.event_stream(events())


# ---------------------------------------------------------------- topics


def _topics_page(cs: ClientSet) -> dict[str, Any]:
    names = cs.admin.list_topics(internal=True)[:MAX_TOPICS_LISTED]
    infos = cs.admin.describe_topics(names) if names else {}
    configs = {}
    if names:
        answers = cs.admin.request_many([({"op": "describe_configs", "name": n}, None) for n in names])
        for n, a in zip(names, answers):
            configs[n] = {c["name"]: c for c in a.get("configs") or ()}
    tps = [(n, p.partition) for n, t in infos.items() for p in t.partitions]
    bounds, errors = backend.partition_bounds(cs, infos, tps)
    return {"names": names, "infos": infos, "configs": configs, "bounds": bounds, "errors": errors}


async def topics(request: Request) -> Response:
    data = await run_blocking(request, _topics_page)
    sizes = _state(request).partition_sizes()
    rows = []
    for name in data["names"]:
        t = data["infos"].get(name)
        if t is None:
            continue
        records = 0
        unknown = 0
        for p in t.partitions:
            b = data["bounds"].get((name, p.partition))
            if b is None:
                unknown += 1
            else:
                records += max(0, b[1] - b[0])
        cfg = data["configs"].get(name, {})
        size = sum(sizes.get((name, p.partition), 0) for p in t.partitions) if sizes else None
        rows.append({
            "name": name, "internal": t.internal, "partitions": len(t.partitions),
            "rf": len(t.partitions[0].replicas) if t.partitions else 0, "records": records,
            "unknown": unknown, "bytes": size,
            "cleanup_policy": (cfg.get("cleanup_policy") or {}).get("value", "delete"),
            "retention_ms": (cfg.get("retention_ms") or {}).get("value"),
            "retention_bytes": (cfg.get("retention_bytes") or {}).get("value"),
        })  # fmt: skip
    return render(request, "topics.html", rows=rows, form={}, error=None)


def _int_field(values: dict[str, str], name: str, lo: int, hi: int) -> int:
    raw = (values.get(name) or "").strip()
    if not raw.isdigit() or not lo <= int(raw) <= hi:
        raise BadInputError(name.replace("_", " "), f"expected a whole number {lo}..{hi}, got {raw[:20]!r}")
    return int(raw)


def _config_pairs(text: str) -> dict[str, str]:
    pairs = {}
    for line in text.replace(",", "\n").splitlines():
        if not line.strip():
            continue
        k, eq, v = line.partition("=")
        if not eq or not k.strip():
            raise BadInputError("configs", f"expected key=value, got {line.strip()[:60]!r}")
        pairs[k.strip()] = v.strip()
    return pairs


async def topic_create(request: Request) -> Response:
    values = await form_of(request)
    name = (values.get("name") or "").strip()
    try:
        if not name:
            raise BadInputError("name", "give the new topic's name")
        partitions = _int_field(values, "partitions", 1, 10_000)
        rf = _int_field(values, "replication_factor", 1, 16)
        configs = _config_pairs(values.get("configs") or "")
        await run_blocking(request, lambda cs: cs.admin.create_topic(name, partitions, rf, configs or None))
    except RaftlogError as exc:
        return render(request, "topics.html", status_code=400, rows=None, form=values, error=str(exc))
    return RedirectResponse(f"/topics/{urllib.parse.quote(name, safe='')}?{_q(created=1)}", status_code=303)


def _topic_page(cs: ClientSet, name: str, node_http: tuple[str, ...], token: str | None) -> dict[str, Any]:
    info = backend.describe_topic(cs, name)
    status = cs.admin.cluster_status()
    configs = backend.describe_configs(cs, name)
    health = [h for h in backend.nodes_health(node_http, token) if h is not None]
    return {"info": info, "status": status, "configs": configs, "health": health}


async def topic(request: Request) -> Response:
    name = request.path_params["topic"]
    state = _state(request)
    data = await run_blocking(request, _topic_page, name, state.settings.node_http,
                              state.settings.node_http_token)
    info = data["info"]
    brokers = [dict(b) for b in data["status"].brokers]
    reachable = await broker_liveness(brokers)
    live = {b["id"]: reachable.get(b["id"], False) and not b.get("fenced", True) for b in brokers}
    rows = classify_partitions([info], live)
    tps = [(name, r.partition) for r in rows if r.state != "offline"]
    bounds, errors = await run_blocking(request, backend.partition_bounds, {name: info}, tps, live)
    # Each node's own view of its replicas (its /health), for per-replica lag.
    replica_end: dict[tuple[int, int], int] = {}
    for h in data["health"]:
        node = h.get("node_id")
        for pname, st in ((h.get("replicas") or {}).get("partitions") or {}).items():
            topic_name, _, p = pname.rpartition("-")
            if topic_name == name and p.isdigit() and isinstance(st.get("log_end_offset"), int):
                replica_end[(int(p), node)] = st["log_end_offset"]
    out = []
    for r in rows:
        b = bounds.get((name, r.partition))
        leader_end = replica_end.get((r.partition, r.leader)) if r.leader is not None else None
        lag = {}
        for rep in r.replicas:
            end = replica_end.get((r.partition, rep))
            lag[rep] = None if end is None or leader_end is None else max(0, leader_end - end)
        out.append({"row": r, "log_start": b[0] if b else None, "hw": b[1] if b else None,
                    "error": errors.get((name, r.partition)), "lag": lag,
                    "ends": {rep: replica_end.get((r.partition, rep)) for rep in r.replicas}})
    explicit = {c["name"] for c in data["configs"] if not c.get("is_default")}
    return render(request, "topic.html", info=info, rows=out, configs=data["configs"], explicit=explicit,
                  have_health=bool(data["health"]), created=bool(request.query_params.get("created")),
                  altered=bool(request.query_params.get("altered")), error=None)


async def topic_configs(request: Request) -> Response:
    name = request.path_params["topic"]
    values = await form_of(request)
    key = (values.get("key") or "").strip()
    if not key:
        raise BadInputError("key", "pick the config to change")
    if values.get("action") == "reset":
        await run_blocking(request, lambda cs: cs.admin.alter_configs(name, {}, [key]))
    else:
        await run_blocking(request, lambda cs: cs.admin.alter_configs(name, {key: (values.get("value") or "").strip()}))
    return RedirectResponse(f"/topics/{urllib.parse.quote(name, safe='')}?{_q(altered=1)}", status_code=303)


async def broker_configs(request: Request) -> Response:
    """The dynamic broker configs (metadata/broker_config.py) with the cluster-wide value and each
    broker's own; POST sets or deletes one for the cluster default or one broker."""
    if request.method == "POST":
        values = await form_of(request)
        key = (values.get("key") or "").strip()
        broker = (values.get("broker") or "").strip()
        if not key:
            raise BadInputError("key", "pick the config to change")
        if broker and not broker.isdigit():
            raise BadInputError("broker", f"a broker id or empty for the cluster default, got {broker[:20]!r}")
        if values.get("action") == "reset":
            change: tuple[dict[str, str], list[str]] = ({}, [key])
        else:
            change = ({key: (values.get("value") or "").strip()}, [])
        await run_blocking(request, lambda cs: cs.admin.alter_broker_configs(broker, *change))
        return RedirectResponse(f"/brokers/configs?{_q(altered=1)}", status_code=303)
    configs = await run_blocking(request, lambda cs: cs.admin.describe_broker_configs())
    return render(request, "broker_configs.html", configs=configs,
                  altered=bool(request.query_params.get("altered")))


async def topic_delete(request: Request) -> Response:
    name = request.path_params["topic"]
    if request.method == "GET":
        await run_blocking(request, backend.describe_topic, name)  # 404 for an unknown topic
        return render(request, "confirm.html", what="topic", name=name, action=request.url.path, error=None)
    values = await form_of(request)
    if values.get("confirm") != name:
        return render(request, "confirm.html", status_code=400, what="topic", name=name, action=request.url.path,
                      error=f"type the topic's name ({name}) to delete it")
    await run_blocking(request, lambda cs: cs.admin.delete_topic(name))
    return RedirectResponse(f"/topics?{_q(deleted=name)}", status_code=303)


# ---------------------------------------------------------------- messages


def _browse(cs: ClientSet, name: str, params: dict[str, str]) -> dict[str, Any]:
    info = backend.describe_topic(cs, name)
    query = browse.BrowseQuery.parse(params, len(info.partitions))
    tps = [(name, p) for p in query.partitions]
    bounds, errors = backend.partition_bounds(cs, {name: info}, tps)
    if errors:
        first = sorted(errors.items())[0]
        raise UnknownTopicOrPartitionError(f"{name}-{first[0][1]}: {first[1]}") if len(errors) == len(tps) else \
            _partial(errors)
    b = {p: bounds[(name, p)] for p in query.partitions}
    ts = None
    if query.seek == "timestamp" and query.cursor is None:
        assert query.timestamp_ms is not None
        ts = backend.offsets_for_timestamp(cs, name, query.partitions, query.timestamp_ms)
    plan = browse.plan_page(query, b, ts)
    fetch_bytes = browse.UNFILTERED_FETCH_BYTES if query.filter.empty else browse.FILTERED_FETCH_BYTES
    result = browse.scan(lambda pos: backend.fetch_positions(cs, info, pos, partition_bytes=fetch_bytes), plan, query,
                         clock=time.monotonic)
    page = browse.select_page(result, plan, query)
    return {"info": info, "query": query, "plan": plan, "page": page}


def _partial(errors: dict) -> RaftlogError:
    where = "; ".join(f"partition {tp[1]}: {why}" for tp, why in sorted(errors.items()))
    return RaftlogError(f"some partitions cannot be read now ({where}); pick one partition to browse the others")


def _decode_offsets_record(r: Any) -> dict[str, Any]:
    """A __consumer_offsets record as table cells (never raises: bad bytes say so)."""
    try:
        key, value = decode_record(r.key or b"", r.value)
    except InvalidGroupRecordError as exc:  # bytes that are no group record
        return {"kind": "undecodable", "error": str(exc)}
    if isinstance(key, OffsetKey):
        return {"kind": "offset", "group": key.group, "topic": key.topic, "partition": key.partition,
                "offset": None if value is None else value.offset,
                "metadata": None if value is None else value.metadata,
                "commit_ms": None if value is None else value.commit_timestamp}
    if isinstance(key, GroupKey):
        return {"kind": "group", "group": key.group,
                "generation": None if value is None else value.generation,
                "protocol": None if value is None else value.protocol,
                "members": None if value is None else len(value.members),
                "state": None if value is None else value.state}
    return {"kind": "undecodable", "error": "unknown key"}


async def messages(request: Request) -> Response:
    name = request.path_params["topic"]
    params = dict(request.query_params)
    data = await run_blocking(request, _browse, name, params)
    query: browse.BrowseQuery = data["query"]
    page: browse.Page = data["page"]
    decoded = name == OFFSETS_TOPIC and params.get("format", "decoded") == "decoded"
    records = []
    schema_parts: dict[int, tuple[browse.Rendered, browse.Rendered]] = {}
    if query.fmt == "schema":  # keys and values decoded through the registry, in a worker thread
        registry = schema_views.registry_of(request)
        schema_parts = await schema_views.blocking(request, lambda: {
            i: (schema_views.render_schema(registry, r.key), schema_views.render_schema(registry, r.value))
            for i, r in enumerate(page.records)})
    for i, r in enumerate(page.records):
        key, value = schema_parts.get(i) or (browse.render_bytes(r.key, query.fmt), browse.render_bytes(r.value, query.fmt))
        item = {"r": r, "key": key, "value": value,
                "headers": [(h, browse.render_bytes(v, "text" if query.fmt in ("json", "schema") else query.fmt))
                            for h, v in r.headers or ()]}
        if decoded:
            item["decoded"] = _decode_offsets_record(r)
        records.append(item)
    base = {k: v for k, v in params.items() if k not in ("from", "seek", "offset", "timestamp", "produced")}
    links = {
        "next": None if page.next_cursor is None else f"?{_q(**base, **{'from': browse.format_cursor(page.next_cursor)})}",
        "prev": None if page.prev_cursor is None else f"?{_q(**base, **{'from': browse.format_cursor(page.prev_cursor)})}",
        "formats": {f: f"?{_q(**{**params, 'format': f})}" for f in (*browse.FORMATS, *(('decoded',) if name == OFFSETS_TOPIC else ()))
                    if f != "schema" or _state(request).settings.schema_registry is not None},
    }
    produced = params.get("produced")
    return render(request, "messages.html", info=data["info"], query=query, params=params, records=records,
                  page=page, plan=data["plan"], links=links, decoded=decoded, produced=produced,
                  fmt=("decoded" if decoded else query.fmt), produce_error=None, produce_form={})


def _headers_field(text: str) -> list[tuple[str, bytes | None]]:
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise BadInputError("headers", f"one header per line as name: value, got {line.strip()[:60]!r}")
        out.append((name.strip(), value.strip().encode()))
        if len(out) > MAX_HEADERS:
            raise BadInputError("headers", f"at most {MAX_HEADERS} headers")
    return out


async def produce(request: Request) -> Response:
    name = request.path_params["topic"]
    values = await form_of(request)
    registry = schema_views.registry_of(request) if (values.get("subject") or "").strip() else None

    def work(cs: ClientSet) -> tuple[int, int]:
        info = backend.describe_topic(cs, name)
        raw_p = (values.get("partition") or "").strip()
        partition = None
        if raw_p:
            if not raw_p.isdigit() or int(raw_p) >= len(info.partitions):
                raise BadInputError("partition", f"0..{len(info.partitions) - 1}, or empty for the key's partition")
            partition = int(raw_p)
        key = values.get("key") or None
        value = values.get("value")
        encoded = None if value is None else value.encode()
        subject = (values.get("subject") or "").strip()
        if subject and value is not None:  # the value is JSON, encoded with the subject's latest schema
            encoded = schema_views.encode_value(registry, subject, value)
        return backend.produce_one(cs, info, partition, None if key is None else key.encode(),
                                   encoded, _headers_field(values.get("headers") or ""))

    try:
        partition, offset = await run_blocking(request, work)
    except RaftlogError as exc:
        if isinstance(exc, UnknownTopicOrPartitionError):
            raise
        params = {"partition": "all"}
        data = await run_blocking(request, _browse, name, params)
        shown = {k: v for k, v in values.items() if k != "csrf"}
        if len(shown.get("value") or "") > 64 << 10:
            shown["value"] = ""  # do not echo megabytes back into the form
        return render(request, "messages.html", status_code=400, info=data["info"], query=data["query"], params=params,
                      records=[], page=data["page"], plan=data["plan"], decoded=False, produced=None,
                      fmt="text", links={"next": None, "prev": None, "formats": {}},
                      produce_error=str(exc), produce_form=shown)
    q = _q(partition=partition, seek="offset", offset=offset, produced=f"{partition}:{offset}")
    return RedirectResponse(f"/topics/{urllib.parse.quote(name, safe='')}/messages?{q}", status_code=303)


async def record_part(request: Request) -> Response:
    name = request.path_params["topic"]
    partition = request.path_params["partition"]
    offset = request.path_params["offset"]
    part = request.path_params["part"]
    if part not in ("key", "value"):
        raise BadInputError("part", "key or value")

    def work(cs: ClientSet) -> Any:
        info = backend.describe_topic(cs, name)
        if partition >= len(info.partitions):
            raise UnknownTopicOrPartitionError(f"{name} has no partition {partition}")
        return backend.read_record(cs, info, partition, offset)

    r = await run_blocking(request, work)
    if r is None:
        raise BadInputError("offset", f"no record at offset {offset} of {name}-{partition}")
    data = r.key if part == "key" else r.value
    filename = f"{name}-{partition}-{offset}.{part}.b64"
    return Response(browse.b64(data), media_type="text/plain; charset=ascii",
                    headers={"Content-Disposition": f'attachment; filename="{urllib.parse.quote(filename)}"'})


async def offsets(request: Request) -> Response:
    return RedirectResponse(f"/topics/{OFFSETS_TOPIC}/messages?{_q(format='decoded', **dict(request.query_params))}",
                            status_code=303)


# ---------------------------------------------------------------- groups


LISTED_LAG_GROUPS: Final = 100   # groups list: lag and members for at most this many groups


def _list_with_lag(cs: Any) -> tuple[list[dict], int]:
    """The groups, each with `members` and `lag` (total) for the first LISTED_LAG_GROUPS by
    id; a group this user may not describe (or that vanished meanwhile) shows "-"."""
    rows = sorted(cs.groups.list_groups(), key=lambda g: g["group_id"])
    for g in rows[:LISTED_LAG_GROUPS]:
        try:
            sample = _group_sample(cs.groups.describe_group(g["group_id"]))
        except RaftlogError as e:
            log.info("groups list: cannot describe %s: %s", g["group_id"], e)
            continue
        g["members"], g["lag"] = sample["members"], sample["total_lag"]
    return rows, max(0, len(rows) - LISTED_LAG_GROUPS)


async def groups(request: Request) -> Response:
    rows, unmeasured = await run_blocking(request, _list_with_lag)
    return render(request, "groups.html", rows=rows, unmeasured=unmeasured, measured=LISTED_LAG_GROUPS,
                  deleted=request.query_params.get("deleted"))


def _group_sample(desc: dict) -> dict[str, Any]:
    lags = [r["lag"] for r in desc["partitions"] if r["lag"] is not None]
    return {"state": desc.get("state"), "members": len(desc.get("members") or ()),
            "total_lag": sum(lags) if lags else None, "max_lag": max(lags) if lags else None,
            "partitions": [{"topic": r["topic"], "partition": r["partition"], "committed": r["committed_offset"],
                            "end": r["log_end_offset"], "lag": r["lag"]} for r in desc["partitions"]]}


async def group(request: Request, *, reset: dict | None = None, reset_form: dict | None = None,
                error: str | None = None, status_code: int = 200) -> Response:
    group_id = request.path_params["group"]
    desc = await run_blocking(request, lambda cs: cs.groups.describe_group(group_id))
    if desc.get("state") == "Dead" and not desc["members"] and not desc["partitions"]:
        raise UnknownGroupError(f"unknown group: {group_id} (no members and no committed offsets)")
    state = _state(request)
    sample = _group_sample(desc)
    series = state.record_lag(request, group_id, sample)
    topics_in_group = sorted({r["topic"] for r in desc["partitions"]} |
                             {tp[0] for m in desc["members"] for tp in m["partitions"]})
    return render(request, "group.html", status_code=status_code, group=desc, sample=sample,
                  chart=series.columns(["total_lag"]), topics=topics_in_group, reset=reset,
                  reset_form=reset_form or {}, error=error)


async def live_group(request: Request) -> Response:
    group_id = request.path_params["group"]
    state = _state(request)

    async def events():
        async for _ in state.stream_ticks():
            try:
                desc = await run_blocking(request, lambda cs: cs.groups.describe_group(group_id))
            except RaftlogError as exc:
                yield f"event: problem\ndata: {json.dumps(str(exc))}\n\n"
                continue
            sample = _group_sample(desc)
            state.record_lag(request, group_id, sample)
            yield f"data: {json.dumps({**sample, 't': time.time()})}\n\n"

    return state.event_stream(events())


def _reset_spec(values: dict[str, str], topics: list[str]) -> tuple[str, int | None, list[str]]:
    strategy = values.get("strategy") or ""
    if strategy not in ("earliest", "latest", "offset", "timestamp"):
        raise BadInputError("strategy", "earliest, latest, offset or timestamp")
    value = None
    if strategy == "offset":
        raw = (values.get("value") or "").strip()
        if not raw.isdigit():
            raise BadInputError("value", f"reset to an offset needs a whole number >= 0, got {raw[:30]!r}")
        value = int(raw)
    elif strategy == "timestamp":
        value = browse.parse_timestamp(values.get("value") or "", "value")
    chosen = [t for t in topics if values.get(f"topic:{t}")]
    extra = (values.get("topic") or "").strip()
    if extra:
        chosen.append(extra)
    if not chosen:
        raise BadInputError("topics", "pick at least one topic to reset")
    return strategy, value, sorted(set(chosen))


async def group_reset(request: Request) -> Response:
    group_id = request.path_params["group"]
    values = await form_of(request)
    desc = await run_blocking(request, lambda cs: cs.groups.describe_group(group_id))
    topics_in_group = sorted({r["topic"] for r in desc["partitions"]} |
                             {tp[0] for m in desc["members"] for tp in m["partitions"]})
    execute = values.get("execute") == "1"
    form = {k: v for k, v in values.items() if k != "csrf"}
    try:
        strategy, value, chosen = _reset_spec(values, topics_in_group)
        plan = await run_blocking(
            request, lambda cs: cs.groups.reset_offsets(group_id, chosen, strategy, value, dry_run=not execute))
    except RaftlogError as exc:
        return await group(request, reset_form=form, error=str(exc), status_code=400)
    return await group(request, reset={"plan": plan, "executed": execute, "topics": chosen}, reset_form=form)


async def group_delete(request: Request) -> Response:
    group_id = request.path_params["group"]
    if request.method == "GET":
        return render(request, "confirm.html", what="group", name=group_id, action=request.url.path, error=None)
    values = await form_of(request)
    if values.get("confirm") != group_id:
        return render(request, "confirm.html", status_code=400, what="group", name=group_id,
                      action=request.url.path, error=f"type the group's id ({group_id}) to delete it")
    try:
        await run_blocking(request, lambda cs: cs.groups.delete_group(group_id))
    except RaftlogError as exc:
        return render(request, "confirm.html", status_code=400, what="group", name=group_id,
                      action=request.url.path, error=str(exc))
    return RedirectResponse(f"/groups?{_q(deleted=group_id)}", status_code=303)


# ---------------------------------------------------------------- login


async def login(request: Request) -> Response:
    state = _state(request)
    nxt = request.query_params.get("next") or "/"
    if not nxt.startswith("/") or nxt.startswith("//"):
        nxt = "/"
    if request.method == "GET":
        return render(request, "login.html", next=nxt, error=None, username="")
    values = await form_of(request)
    try:
        creds = Credentials.from_form(values.get("username") or "", values.get("password") or "")
    except BadInputError as exc:
        return render(request, "login.html", status_code=400, next=nxt, error=str(exc), username=values.get("username", ""))
    config = client_config(state.settings.security, creds)

    def check() -> None:
        with state.pool.lease(config) as cs:
            cs.admin.list_topics()

    try:
        await trio.to_thread.run_sync(check, limiter=state.limiter)
    except RaftlogError as exc:
        state.pool.drop_user(config)
        return render(request, "login.html", status_code=401, next=nxt, username=creds.username,
                      error=f"login failed: {exc}")
    state.login(request, creds)
    return RedirectResponse(nxt, status_code=303)


async def logout(request: Request) -> Response:
    await form_of(request)
    _state(request).logout(request)
    return RedirectResponse("/login" if login_required(_state(request).settings.security) else "/", status_code=303)


async def healthz(request: Request) -> Response:
    return JSONResponse({"ok": True})


# ---- schemas (the registry given with --schema-registry; raftlog/console/schema_views.py)


async def schemas_page(request: Request) -> Response:
    registry = schema_views.registry_of(request)
    rows = await schema_views.blocking(request, schema_views.subjects, registry)
    return render(request, "schemas.html", rows=rows, registry=registry.url)


async def subject_page(request: Request) -> Response:
    registry = schema_views.registry_of(request)
    subject = request.path_params["subject"]
    version = schema_views.version_param(request.query_params.get("v"), "latest")
    other = request.query_params.get("diff")
    other = schema_views.version_param(other, "latest") if other else None
    try:
        data = await schema_views.blocking(request, schema_views.subject, registry, subject, version, other)
    except RegistryError as exc:
        raise BadInputError("subject", exc.message) from None
    return render(request, "subject.html", levels=schema_views.LEVELS, changed=request.query_params.get("changed"), **data)


async def subject_config(request: Request) -> Response:
    registry = schema_views.registry_of(request)
    subject = request.path_params["subject"]
    values = await form_of(request)
    level = (values.get("level") or "").strip().upper()
    if level not in schema_views.LEVELS:
        raise BadInputError("compatibility", f"one of {', '.join(schema_views.LEVELS)}")
    quoted = urllib.parse.quote(subject, safe="")
    try:
        await schema_views.blocking(request, registry.get, f"/config/{quoted}", "PUT", {"compatibility": level})
    except RegistryError as exc:
        raise BadInputError("compatibility", exc.message) from None
    return RedirectResponse(f"/schemas/{quoted}?changed={level}", status_code=303)


__all__ = ["run_blocking", "render", "config_key"]
