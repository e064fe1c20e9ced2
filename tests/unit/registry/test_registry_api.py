"""The registry's REST API and state machine without a server: Confluent's routes, bodies and
error codes over an in-memory port whose writes are replayed as records, as `_schemas` is; and
a property: replaying the records of any sequence of writes gives the same state, one schema
has one id, ids come without gaps, versions only grow."""

from __future__ import annotations

import json

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.node.registry.api import Call, handle
from raftlog.node.registry.state import RegistryState

USER = json.dumps({"type": "record", "name": "User", "fields": [{"name": "a", "type": "int"}]})
USER_B = json.dumps({"type": "record", "name": "User",
                     "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": ""}]})


class MemoryPort:
    """The port with a log in memory: a write's records are applied as if read back."""

    def __init__(self) -> None:
        self.state = RegistryState()
        self.log: list[tuple[bytes, bytes | None]] = []

    def is_writer(self) -> bool:
        return True

    async def write(self, decide):
        records, answer = decide(self.state)
        for key, value in records:
            self.log.append((key, value))
            self.state.apply(len(self.log) - 1, key, value)
        return answer

    async def forward(self, call):  # pragma: no cover - never called: this port is the writer
        raise AssertionError("not forwarded")

    def replayed(self) -> RegistryState:
        state = RegistryState()
        for offset, (key, value) in enumerate(self.log):
            state.apply(offset, key, value)
        return state


async def call(port, method, path, body=None, **query):
    return await handle(port, Call(method, path, {k: str(v) for k, v in query.items()}, body))


async def test_register_read_back_and_dedup():
    port = MemoryPort()
    assert await call(port, "POST", "/subjects/s-value/versions", {"schema": USER}) == (200, {"id": 1})
    assert await call(port, "POST", "/subjects/s-value/versions", {"schema": USER}) == (200, {"id": 1})
    assert await call(port, "POST", "/subjects/t-value/versions", {"schema": USER}) == (200, {"id": 1})
    assert await call(port, "POST", "/subjects/s-value/versions", {"schema": USER_B}) == (200, {"id": 2})
    assert await call(port, "GET", "/subjects") == (200, ["s-value", "t-value"])
    assert await call(port, "GET", "/subjects/s-value/versions") == (200, [1, 2])
    for version in ("latest", "-1", "2"):
        status, body = await call(port, "GET", f"/subjects/s-value/versions/{version}")
        assert status == 200 and (body["version"], body["id"]) == (2, 2)
    assert (await call(port, "GET", "/schemas/ids/1"))[1] == {"schema": USER}
    assert await call(port, "GET", "/schemas/ids/1/subjects") == (200, ["s-value", "t-value"])
    assert await call(port, "GET", "/schemas/ids/1/versions") == (
        200, [{"subject": "s-value", "version": 1}, {"subject": "t-value", "version": 1}])
    status, found = await call(port, "POST", "/subjects/s-value", {"schema": USER})
    assert status == 200 and found["version"] == 1
    assert await call(port, "GET", "/schemas/types") == (200, ["AVRO", "JSON", "PROTOBUF"])
    # The log replayed from the start gives the same state (what another node builds).
    again = port.replayed()
    assert again.subjects == port.state.subjects and again.max_id == 2


async def test_config_mode_and_compatibility_endpoints():
    port = MemoryPort()
    assert await call(port, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    assert (await call(port, "GET", "/config/x"))[1]["error_code"] == 40408
    assert await call(port, "PUT", "/config/x", {"compatibility": "full"}) == (200, {"compatibility": "FULL"})
    assert await call(port, "GET", "/config/x") == (200, {"compatibilityLevel": "FULL"})
    assert (await call(port, "PUT", "/config", {"compatibility": "SIDEWAYS"}))[1]["error_code"] == 42203
    await call(port, "POST", "/subjects/x/versions", {"schema": USER})
    no_default = json.dumps({"type": "record", "name": "User",
                             "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "string"}]})
    status, body = await call(port, "POST", "/compatibility/subjects/x/versions/latest", {"schema": no_default},
                              verbose="true")
    assert status == 200 and body["is_compatible"] is False and body["messages"]
    status, body = await call(port, "POST", "/subjects/x/versions", {"schema": no_default})
    assert (status, body["error_code"]) == (409, 409)
    assert await call(port, "PUT", "/mode/x", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    status, body = await call(port, "POST", "/subjects/x/versions", {"schema": USER_B})
    assert (status, body["error_code"]) == (422, 42205)
    assert await call(port, "DELETE", "/mode/x") == (200, {"mode": "READONLY"})
    assert await call(port, "GET", "/mode") == (200, {"mode": "READWRITE"})


async def test_soft_then_hard_delete_and_references():
    port = MemoryPort()
    await call(port, "POST", "/subjects/base/versions", {"schema": USER})
    wrapper = json.dumps({"type": "record", "name": "Wrap", "fields": [{"name": "u", "type": "User"}]})
    ref = {"name": "User", "subject": "base", "version": 1}
    assert await call(port, "POST", "/subjects/wrap/versions", {"schema": wrapper, "references": [ref]}) == (200, {"id": 2})
    assert await call(port, "GET", "/subjects/base/versions/1/referencedby") == (200, [2])
    status, body = await call(port, "DELETE", "/subjects/base")
    assert (status, body["error_code"]) == (422, 42206)  # still referenced
    status, body = await call(port, "DELETE", "/subjects/wrap", permanent="true")
    assert (status, body["error_code"]) == (404, 40405)  # hard delete needs a soft one first
    assert await call(port, "DELETE", "/subjects/wrap") == (200, [1])
    assert await call(port, "GET", "/subjects") == (200, ["base"])
    assert await call(port, "GET", "/subjects", deleted="true") == (200, ["base", "wrap"])
    assert await call(port, "DELETE", "/subjects/wrap", permanent="true") == (200, [1])
    assert await call(port, "GET", "/subjects", deleted="true") == (200, ["base"])
    assert await call(port, "DELETE", "/subjects/base/versions/1") == (200, 1)


@pytest.mark.parametrize("method, path, body, status, code", [
    ("POST", "/subjects/s/versions", {"schema": "{nope"}, 422, 42201),
    ("POST", "/subjects/s/versions", {"schema": USER, "references": [{"name": "x", "subject": "missing", "version": 1}]}, 422, 42201),
    ("POST", "/subjects/s/versions", [1, 2], 400, 400),
    ("POST", "/subjects/s/versions", {"schema": USER, "schemaType": "XML"}, 400, 400),
    ("POST", "/subjects/a%2Fb/versions", {"schema": USER}, 422, 42208),
    ("POST", "/subjects/" + "x" * 10_000 + "/versions", {"schema": USER}, 422, 42208),
    ("GET", "/subjects/nope/versions", None, 404, 40401),
    ("GET", "/subjects/nope/versions/0", None, 422, 42202),
    ("GET", "/subjects/nope/versions/abc", None, 422, 42202),
    ("GET", "/schemas/ids/999", None, 404, 40403),
    ("GET", "/schemas/ids/-1", None, 404, 40403),
    ("GET", "/no/such/path", None, 404, 404),
    ("PATCH", "/subjects", None, 405, 405),
])
async def test_bad_input_gets_confluent_errors(method, path, body, status, code):
    port = MemoryPort()
    got_status, got = await call(port, method, path, body)
    assert (got_status, got["error_code"]) == (status, code) and got["message"]
    assert await call(port, "GET", "/subjects") == (200, [])  # nothing was written


async def test_acls_guard_subjects_by_their_topic():
    from raftlog.base.acl import Operation, ResourceType

    port = MemoryPort()
    await call(port, "POST", "/subjects/mine-value/versions", {"schema": USER})
    await call(port, "POST", "/subjects/theirs-value/versions", {"schema": USER})
    grants = {(Operation.DESCRIBE, ResourceType.TOPIC, "mine"), (Operation.WRITE, ResourceType.TOPIC, "mine")}

    def allowed(operation, rt, name):
        return (operation, rt, name) in grants

    async def as_user(method, path, body=None):
        return await handle(port, Call(method, path, {}, body, "User:carol"), allowed)

    assert await as_user("GET", "/subjects") == (200, ["mine-value"])
    assert (await as_user("GET", "/subjects/mine-value/versions"))[0] == 200
    assert (await as_user("POST", "/subjects/mine-value/versions", {"schema": USER_B}))[0] == 200
    for method, path, body in [("GET", "/subjects/theirs-value/versions", None),
                               ("POST", "/subjects/theirs-value/versions", {"schema": USER_B}),
                               ("DELETE", "/subjects/mine-value", None),  # ALTER, not granted
                               ("PUT", "/config", {"compatibility": "NONE"})]:
        status, body = await as_user(method, path, body)
        assert (status, body["error_code"]) == (403, 40301)
    assert (await as_user("GET", "/schemas/ids/1"))[0] == 200
    assert await call(port, "GET", "/subjects/theirs-value/versions") == (200, [1])  # untouched


async def test_import_mode_keeps_the_callers_ids_but_one_id_is_one_schema():
    port = MemoryPort()
    status, body = await call(port, "POST", "/subjects/a/versions", {"schema": USER, "id": 40})
    assert (status, body["error_code"]) == (400, 400)  # ids only in IMPORT mode
    assert await call(port, "PUT", "/mode", {"mode": "IMPORT"}) == (200, {"mode": "IMPORT"})
    assert await call(port, "POST", "/subjects/a/versions", {"schema": USER, "id": 40, "version": 3}) == (200, {"id": 40})
    assert (await call(port, "GET", "/subjects/a/versions/3"))[1]["id"] == 40
    status, body = await call(port, "POST", "/subjects/b/versions", {"schema": USER_B, "id": 40})
    assert (status, body["error_code"]) == (422, 42205)
    await call(port, "PUT", "/mode", {"mode": "READWRITE"})
    assert await call(port, "POST", "/subjects/b/versions", {"schema": USER_B}) == (200, {"id": 41})  # dense after imports


SUBJECTS = ["a", "b", "c"]


def schema(n: int) -> str:
    # Field f{n} with a default: every schema is compatible with every other (BACKWARD and FORWARD).
    return json.dumps({"type": "record", "name": "R", "fields": [{"name": f"f{n}", "type": "int", "default": 0}]})


op = st.one_of(
    st.tuples(st.just("register"), st.sampled_from(SUBJECTS), st.integers(0, 4)),
    st.tuples(st.just("delete"), st.sampled_from(SUBJECTS), st.booleans()),
    st.tuples(st.just("level"), st.sampled_from(SUBJECTS), st.sampled_from(["NONE", "FULL", "BACKWARD_TRANSITIVE"])),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(op, max_size=30))
def test_replay_gives_the_same_state_and_ids_are_unique_and_dense(ops):
    port = MemoryPort()
    handed_out: set[int] = set()
    versions_seen: dict[str, int] = {}

    async def run() -> None:
        for kind, subject, arg in ops:
            if kind == "register":
                status, body = await handle(port, Call("POST", f"/subjects/{subject}/versions", {}, {"schema": schema(arg)}))
                assert status == 200, body
                handed_out.add(body["id"])
                latest = port.state.version(subject, "latest")
                assert latest.version >= versions_seen.get(subject, 0)  # versions only grow
                versions_seen[subject] = latest.version
            elif kind == "delete":
                status, _ = await handle(port, Call("DELETE", f"/subjects/{subject}", {"permanent": str(arg).lower()}))
                if arg and status == 200:  # hard-deleted: its versions start at 1 again, as in Confluent's
                    versions_seen.pop(subject, None)
            else:
                await handle(port, Call("PUT", f"/config/{subject}", {}, {"compatibility": arg}))
            ids_by_text: dict[str, set[int]] = {}
            for versions in port.state.subjects.values():
                for v in versions.values():
                    ids_by_text.setdefault(v.schema, set()).add(v.id)
            assert all(len(ids) == 1 for ids in ids_by_text.values())  # one schema, one id
            assert len({next(iter(ids)) for ids in ids_by_text.values()}) == len(ids_by_text)  # one id, one schema

    trio.run(run)
    assert sorted(handed_out) == list(range(1, len(handed_out) + 1))  # no gaps
    replayed = port.replayed()
    assert replayed.subjects == port.state.subjects
    assert replayed.config == port.state.config and replayed.max_id == port.state.max_id


def test_a_schema_hard_deleted_everywhere_gets_a_new_id_never_an_old_one():
    port = MemoryPort()

    async def run() -> list[int]:
        got = []
        for method, path, body in [("POST", "/subjects/a/versions", {"schema": schema(0)}),
                                   ("DELETE", "/subjects/a", None), ("DELETE", "/subjects/a?permanent=true", None),
                                   ("POST", "/subjects/b/versions", {"schema": schema(1)}),
                                   ("POST", "/subjects/a/versions", {"schema": schema(0)})]:
            path, _, query = path.partition("?")
            status, answer = await handle(port, Call(method, path, dict([query.split("=")]) if query else {}, body))
            assert status == 200, answer
            if method == "POST":
                got.append(answer["id"])
        return got

    assert trio.run(run) == [1, 2, 3]
