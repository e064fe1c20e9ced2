"""`raftlog schemas` against a real cluster's registry: register (Avro, Protobuf), list,
describe, test and set compatibility, delete; failures are one line and exit 1."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from raftlog.cli.main import main

pytestmark = pytest.mark.cluster

V1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
V2 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                    {"name": "note", "type": "string", "default": ""}]}
BAD = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}


def run(cluster, *args):
    urls = ",".join(cluster.schema_registry(n) for n in (2, 1, 3))
    return CliRunner().invoke(main, ["schemas", "--registry", urls, *args])


def test_the_schemas_commands(cluster, tmp_path):
    files = {}
    for name, doc in {"v1": V1, "v2": V2, "bad": BAD}.items():
        files[name] = tmp_path / f"{name}.avsc"
        files[name].write_text(json.dumps(doc))
    proto = tmp_path / "p.proto"
    proto.write_text('syntax = "proto3"; package shop; message Item { string sku = 1; int32 qty = 2; }')
    first = run(cluster, "register", "orders-value", "--file", str(files["v1"]))
    assert first.exit_code == 0, first.output
    assert "schema id" in first.output
    assert run(cluster, "register", "items-value", "--file", str(proto), "--type", "PROTOBUF").exit_code == 0
    ok = run(cluster, "compatibility", "orders-value", "--file", str(files["v2"]))
    assert ok.exit_code == 0 and "compatible" in ok.output
    bad = run(cluster, "compatibility", "orders-value", "--file", str(files["bad"]))
    assert bad.exit_code == 1 and "incompatible" in bad.output
    refused = run(cluster, "register", "orders-value", "--file", str(files["bad"]))
    assert refused.exit_code == 1 and "409" in refused.output
    assert run(cluster, "compatibility", "orders-value", "--set", "NONE").exit_code == 0
    assert run(cluster, "compatibility", "orders-value").output.strip() == "NONE"
    assert run(cluster, "register", "orders-value", "--file", str(files["bad"])).exit_code == 0
    listed = json.loads(run(cluster, "list", "--json").output)
    assert {r["subject"]: (r["version"], r["type"]) for r in listed} == {
        "orders-value": (2, "AVRO"), "items-value": (1, "PROTOBUF")}
    described = json.loads(run(cluster, "describe", "orders-value", "--version", "1").output)
    assert described["versions"] == [1, 2] and json.loads(described["schema"]) == V1
    assert described["compatibility"] == "NONE"
    assert run(cluster, "delete", "orders-value", "--version", "2").exit_code == 0
    assert run(cluster, "delete", "items-value").exit_code == 0
    gone = run(cluster, "delete", "items-value", "--permanent")
    assert gone.exit_code == 0 and "permanently" in gone.output
    missing = run(cluster, "describe", "items-value")
    assert missing.exit_code == 1 and "40401" in missing.output
    nowhere = CliRunner().invoke(main, ["schemas", "--registry", "http://127.0.0.1:1", "list"])
    assert nowhere.exit_code == 1 and "no schema registry" in nowhere.output
