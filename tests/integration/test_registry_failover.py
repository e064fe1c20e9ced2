"""The registry survives the SIGKILL of the node leading `_schemas`: the others answer reads
meanwhile from their own state, a new leader takes the writes, ids stay unique and every
registered schema is still there (also on the killed node once restarted)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

pytestmark = pytest.mark.cluster


def schema(i: int) -> Schema:
    return Schema(json.dumps({"type": "record", "name": f"R{i}", "fields": [{"name": "f", "type": "int"}]}), "AVRO")


def writer(cluster, node_id: int) -> int | None:
    return cluster.health(node_id)[1]["registry"]["writer"]


def subjects_or_none(client: SchemaRegistryClient) -> list[str] | None:
    """The client's subjects, or None while its node is not listening yet (restarting)."""
    try:
        return client.get_subjects()
    except (SchemaRegistryError, OSError):
        return None
    except Exception as exc:  # httpx2's ConnectError is not an OSError
        if "ConnectError" in type(exc).__name__:
            return None
        raise


def test_sigkill_of_the_schemas_leader_loses_nothing(cluster):
    clients = {n: SchemaRegistryClient({"url": cluster.schema_registry(n)}) for n in (1, 2, 3)}
    try:
        # The first writes of a fresh cluster, through every node at once: one creates
        # `_schemas`, the others wait for its leader and forward to it.
        with ThreadPoolExecutor(max_workers=3) as pool:
            first = list(pool.map(lambda i: clients[1 + i].register_schema(f"s{i}-value", schema(i)), range(3)))
        ids = dict(enumerate(first))
        ids.update({i: clients[1 + i % 3].register_schema(f"s{i}-value", schema(i)) for i in range(3, 6)})
        assert len(set(ids.values())) == 6
        leader = cluster.wait_for(lambda: writer(cluster, 1), 30, "a _schemas leader")
        others = [n for n in (1, 2, 3) if n != leader]
        # Every node has applied everything before the kill (reads go to local state).
        for n in others:
            cluster.wait_for(lambda n=n: len(clients[n].get_subjects()) >= 6, 30, f"node {n} to have every subject")
        cluster.kill(leader)
        for n in others:  # answered at once, from the node's own state
            fresh = SchemaRegistryClient({"url": cluster.schema_registry(n)})
            try:
                assert set(fresh.get_subjects()) >= {f"s{i}-value" for i in range(6)}
                assert json.loads(fresh.get_schema(ids[0]).schema_str)["name"] == "R0"
            finally:
                fresh.close()

        def register_more():
            try:
                return clients[others[0]].register_schema("after-value", schema(100))
            except SchemaRegistryError as exc:
                assert exc.http_status_code in (500, 503, 504), exc  # 50003 / store errors: retry
                return None

        new_id = cluster.wait_for(register_more, 90, "a write through the new leader")
        assert new_id not in ids.values() and new_id == max(ids.values()) + 1  # unique and dense
        assert writer(cluster, others[0]) in others
        cluster.start(leader)
        revived = SchemaRegistryClient({"url": cluster.schema_registry(leader)})
        try:
            cluster.wait_for(lambda: "after-value" in (subjects_or_none(revived) or []), 90, "the restarted node to catch up")
            for i, schema_id in ids.items():
                assert json.loads(revived.get_schema(schema_id).schema_str)["name"] == f"R{i}"
                assert revived.get_latest_version(f"s{i}-value").schema_id == schema_id
        finally:
            revived.close()
    finally:
        for client in clients.values():
            client.close()
