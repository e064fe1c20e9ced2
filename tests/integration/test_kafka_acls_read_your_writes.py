"""An ACL change is visible to the node that answered it: CreateAcls and DeleteAcls answer once
the answering node's metadata image holds the change (bounded), so DescribeAcls sent to the
same node right after sees it, as kafka-python's test_create_describe_delete_acls expects (it
saw no ACL right after creating one, through a node that follows the metadata quorum)."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from kafka.protocol.admin.acl import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)

import node_harness as harness
from test_kafka_wire_versions import Conn

TOPIC_TYPE, LITERAL, READ, ALLOW, ANY = 2, 3, 3, 3, 1
SETTINGS = {**harness.TEST_SETTINGS, "acls_enabled": True, "allow_everyone_if_no_acl_found": True}


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.NodeCluster]:
    with harness.NodeCluster(tmp_path_factory.mktemp("acls-ryw"), size=3, settings=SETTINGS) as c:
        c.start_all()
        c.wait_ready(timeout_s=90)
        yield c


def described(conn: Conn, name: str) -> list[Any]:
    r = conn.call(DescribeAclsRequest[3](resource_type_filter=TOPIC_TYPE, resource_name_filter=name,
                                         pattern_type_filter=LITERAL, principal_filter=None, host_filter=None,
                                         operation=ANY, permission_type=ANY), DescribeAclsResponse, 3)
    assert r.error_code == 0, r
    return [a for res in r.resources for a in res.acls]


def test_each_node_describes_the_acl_it_just_created_and_not_the_one_it_just_deleted(acl_cluster):
    for node_id in acl_cluster.voters:
        conn = Conn(acl_cluster, node_id)
        try:
            for i in range(3):
                name = f"ryw-{node_id}-{i}"
                C = CreateAclsRequest.AclCreation
                made = conn.call(CreateAclsRequest[3](creations=[C(
                    resource_type=TOPIC_TYPE, resource_name=name, resource_pattern_type=LITERAL,
                    principal="User:test", host="*", operation=READ, permission_type=ALLOW)]), CreateAclsResponse, 3)
                assert [r.error_code for r in made.results] == [0]
                assert len(described(conn, name)) == 1, f"node {node_id} does not show the ACL it created"
                F = DeleteAclsRequest.DeleteAclsFilter
                gone = conn.call(DeleteAclsRequest[3](filters=[F(
                    resource_type_filter=TOPIC_TYPE, resource_name_filter=name, pattern_type_filter=LITERAL,
                    principal_filter=None, host_filter=None, operation=ANY, permission_type=ANY)]),
                    DeleteAclsResponse, 3)
                assert [len(r.matching_acls) for r in gone.filter_results] == [1]
                assert described(conn, name) == [], f"node {node_id} still shows the ACL it deleted"
        finally:
            conn.sock.close()
