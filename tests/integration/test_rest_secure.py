"""The REST proxy on a secure cluster (harness.secure_cluster): HTTPS with Basic auth by the cluster's SCRAM users, and the
cluster's ACLs on what a user produces and sees (the proxy runs the node's guarded client
handlers as that user, on whichever node leads the partition)."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from typing import Any, Iterator

import pytest
from confluent_kafka.admin import (
    AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, ResourceType,
    ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion,
)

from raftlog.base.client_properties import load_properties

import node_harness as harness

pytestmark = pytest.mark.cluster

ADMIN_PASSWORD = "rest-admin-Pw-" + "0b7c2e"
ERIN_PASSWORD = "erin-Pw-" + "a91f33"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with harness.secure_cluster(tmp_path_factory.mktemp("rest-secure"), ADMIN_PASSWORD) as cluster:
        yield cluster


def call(secure, method, path, body=None, user="admin", password=ADMIN_PASSWORD, node_id=1):
    context = ssl.create_default_context(cafile=str(secure.material.ca_file))
    headers = {"Content-Type": "application/json"}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    request = urllib.request.Request(secure.schema_registry(node_id) + path, method=method, headers=headers,
                                     data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, context=context, timeout=60) as response:
            data = response.read()
            return response.status, json.loads(data) if data else None
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read() or b"null")


def test_users_produce_and_see_what_their_acls_allow(secure):
    assert call(secure, "GET", "/v3/clusters", user=None)[0] == 401
    status, body = call(secure, "GET", "/v3/clusters")
    assert status == 200
    cid = body["data"][0]["cluster_id"]
    for name in ("erin-orders", "other-orders"):
        status, body = call(secure, "POST", f"/v3/clusters/{cid}/topics",
                            {"topic_name": name, "partitions_count": 3, "replication_factor": len(secure.live())})
        assert status == 200, body
    conf = load_properties(secure.material.client_properties)
    conf.update({"bootstrap.servers": secure.kafka(1), "sasl.username": "admin", "sasl.password": ADMIN_PASSWORD})
    admin = AdminClient(conf)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion("erin", info, ERIN_PASSWORD.encode())]).values():
        f.result(30)
    acls = [AclBinding(ResourceType.TOPIC, "erin-", ResourcePatternType.PREFIXED, "User:erin", "*", operation,
                       AclPermissionType.ALLOW) for operation in (AclOperation.WRITE, AclOperation.DESCRIBE)]
    for f in admin.create_acls(acls).values():
        f.result(30)

    record = {"value": {"type": "JSON", "data": {"n": 1}}}

    def produce_as_erin(node_id: int):
        status, body = call(secure, "POST", f"/v3/clusters/{cid}/topics/erin-orders/records", record,
                            user="erin", password=ERIN_PASSWORD, node_id=node_id)
        if status == 403:
            return None  # the user or the ACLs have not reached this node yet
        assert status == 200, body
        return body

    for node_id in secure.live():  # any node: the partition's leader runs the produce as erin
        assert secure.wait_for(lambda: produce_as_erin(node_id), 30, "erin's ACLs on the node")["offset"] >= 0
    status, body = call(secure, "POST", f"/v3/clusters/{cid}/topics/other-orders/records", record,
                        user="erin", password=ERIN_PASSWORD)
    assert (status, body["error_code"]) == (403, 40301) and "TOPIC_AUTHORIZATION_FAILED" in body["message"]
    status, body = call(secure, "GET", f"/v3/clusters/{cid}/topics", user="erin", password=ERIN_PASSWORD)
    assert [t["topic_name"] for t in body["data"]] == ["erin-orders"]
    assert call(secure, "GET", f"/v3/clusters/{cid}/topics", user="erin", password="wrong")[0] == 401
