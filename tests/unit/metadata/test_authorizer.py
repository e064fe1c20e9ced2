"""The authorizer follows Kafka's rules (super users, deny wins, implied DESCRIBE, literal/wildcard/prefixed patterns, host, no ACL means no) in a table of cases and against a dumb reference on random ACL sets."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata.authorizer import IMPLIED_BY, Authorizer
from raftlog.base.acl import (
    VALID_OPERATIONS,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
O = Operation


def acl(rt, name, pt, principal, op, perm=ALLOW, host="*"):
    return AclBinding(rt, name, pt, principal, host, op, perm)


ALICE, BOB = "User:alice", "User:bob"
HOST, OTHER_HOST = "10.0.0.5", "10.0.0.6"

# (name, acls, (principal, host, operation, resource_type, resource_name), expected)
CASES = [
    ("no acls: refused", [], (ALICE, HOST, O.READ, T, "orders"), False),
    ("literal allow", [acl(T, "orders", LIT, ALICE, O.READ)], (ALICE, HOST, O.READ, T, "orders"), True),
    ("literal allow, other topic", [acl(T, "orders", LIT, ALICE, O.READ)], (ALICE, HOST, O.READ, T, "payments"), False),
    ("literal allow, other user", [acl(T, "orders", LIT, ALICE, O.READ)], (BOB, HOST, O.READ, T, "orders"), False),
    ("literal allow, other op", [acl(T, "orders", LIT, ALICE, O.READ)], (ALICE, HOST, O.WRITE, T, "orders"), False),
    ("literal is not a prefix", [acl(T, "ord", LIT, ALICE, O.READ)], (ALICE, HOST, O.READ, T, "orders"), False),
    ("prefixed allow", [acl(T, "ord", PRE, ALICE, O.READ)], (ALICE, HOST, O.READ, T, "orders"), True),
    ("prefixed, whole name", [acl(T, "orders", PRE, ALICE, O.READ)], (ALICE, HOST, O.READ, T, "orders"), True),
    ("prefixed, longer than name", [acl(T, "orders-eu", PRE, ALICE, O.READ)], (ALICE, HOST, O.READ, T, "orders"), False),
    ("wildcard topic", [acl(T, "*", LIT, ALICE, O.READ)], (ALICE, HOST, O.READ, T, "anything"), True),
    ("wildcard principal", [acl(T, "orders", LIT, "User:*", O.READ)], (BOB, HOST, O.READ, T, "orders"), True),
    ("wildcard principal covers anonymous", [acl(T, "orders", LIT, "User:*", O.READ)], ("User:ANONYMOUS", HOST, O.READ, T, "orders"), True),
    ("ALL grants write", [acl(T, "orders", LIT, ALICE, O.ALL)], (ALICE, HOST, O.WRITE, T, "orders"), True),
    ("read implies describe", [acl(T, "orders", LIT, ALICE, O.READ)], (ALICE, HOST, O.DESCRIBE, T, "orders"), True),
    ("write implies describe", [acl(T, "orders", LIT, ALICE, O.WRITE)], (ALICE, HOST, O.DESCRIBE, T, "orders"), True),
    ("delete implies describe", [acl(T, "orders", LIT, ALICE, O.DELETE)], (ALICE, HOST, O.DESCRIBE, T, "orders"), True),
    ("alter implies describe", [acl(T, "orders", LIT, ALICE, O.ALTER)], (ALICE, HOST, O.DESCRIBE, T, "orders"), True),
    ("create does not imply describe", [acl(T, "orders", LIT, ALICE, O.CREATE)], (ALICE, HOST, O.DESCRIBE, T, "orders"), False),
    ("describe does not imply read", [acl(T, "orders", LIT, ALICE, O.DESCRIBE)], (ALICE, HOST, O.READ, T, "orders"), False),
    ("alter_configs implies describe_configs", [acl(T, "orders", LIT, ALICE, O.ALTER_CONFIGS)], (ALICE, HOST, O.DESCRIBE_CONFIGS, T, "orders"), True),
    ("describe_configs does not imply alter_configs", [acl(T, "orders", LIT, ALICE, O.DESCRIBE_CONFIGS)], (ALICE, HOST, O.ALTER_CONFIGS, T, "orders"), False),
    ("deny wins over literal allow", [acl(T, "orders", LIT, ALICE, O.WRITE), acl(T, "orders", LIT, ALICE, O.WRITE, DENY)], (ALICE, HOST, O.WRITE, T, "orders"), False),
    ("prefixed deny wins over literal allow", [acl(T, "orders", LIT, ALICE, O.ALL), acl(T, "ord", PRE, ALICE, O.WRITE, DENY)], (ALICE, HOST, O.WRITE, T, "orders"), False),
    ("wildcard deny wins", [acl(T, "orders", LIT, ALICE, O.READ), acl(T, "*", LIT, "User:*", O.ALL, DENY)], (ALICE, HOST, O.READ, T, "orders"), False),
    ("deny on other op leaves allow", [acl(T, "orders", LIT, ALICE, O.ALL), acl(T, "orders", LIT, ALICE, O.WRITE, DENY)], (ALICE, HOST, O.READ, T, "orders"), True),
    ("deny read does not deny describe", [acl(T, "orders", LIT, ALICE, O.DESCRIBE), acl(T, "orders", LIT, ALICE, O.READ, DENY)], (ALICE, HOST, O.DESCRIBE, T, "orders"), True),
    ("deny for other user irrelevant", [acl(T, "orders", LIT, ALICE, O.READ), acl(T, "orders", LIT, BOB, O.READ, DENY)], (ALICE, HOST, O.READ, T, "orders"), True),
    ("acls exist for others only: refused", [acl(T, "orders", LIT, BOB, O.READ)], (ALICE, HOST, O.READ, T, "orders"), False),
    ("host match", [acl(T, "orders", LIT, ALICE, O.READ, host=HOST)], (ALICE, HOST, O.READ, T, "orders"), True),
    ("host mismatch", [acl(T, "orders", LIT, ALICE, O.READ, host=HOST)], (ALICE, OTHER_HOST, O.READ, T, "orders"), False),
    ("deny from one host only", [acl(T, "orders", LIT, ALICE, O.READ), acl(T, "orders", LIT, ALICE, O.READ, DENY, host=OTHER_HOST)], (ALICE, HOST, O.READ, T, "orders"), True),
    ("deny from that host", [acl(T, "orders", LIT, ALICE, O.READ), acl(T, "orders", LIT, ALICE, O.READ, DENY, host=OTHER_HOST)], (ALICE, OTHER_HOST, O.READ, T, "orders"), False),
    ("types are separate", [acl(T, "orders", LIT, ALICE, O.READ)], (ALICE, HOST, O.READ, G, "orders"), False),
    ("group read", [acl(G, "billing", LIT, ALICE, O.READ)], (ALICE, HOST, O.READ, G, "billing"), True),
    ("cluster create", [acl(C, "kafka-cluster", LIT, ALICE, O.CREATE)], (ALICE, HOST, O.CREATE, C, "kafka-cluster"), True),
    ("cluster alter does not create", [acl(C, "kafka-cluster", LIT, ALICE, O.ALTER)], (ALICE, HOST, O.CREATE, C, "kafka-cluster"), False),
    ("produce denied on one topic, allowed on another (a)",
     [acl(T, "*", LIT, ALICE, O.WRITE), acl(T, "secret", LIT, ALICE, O.WRITE, DENY)], (ALICE, HOST, O.WRITE, T, "public"), True),
    ("produce denied on one topic, allowed on another (b)",
     [acl(T, "*", LIT, ALICE, O.WRITE), acl(T, "secret", LIT, ALICE, O.WRITE, DENY)], (ALICE, HOST, O.WRITE, T, "secret"), False),
]  # fmt: skip


@pytest.mark.parametrize("name, acls, request_, expected", CASES, ids=[c[0] for c in CASES])
def test_kafka_rules(name, acls, request_, expected):
    assert Authorizer(acls).authorize(*request_) is expected
    assert reference(acls, set(), False, *request_) is expected


def test_super_users_bypass_even_deny():
    acls = [acl(T, "*", LIT, "User:*", O.ALL, DENY)]
    authorizer = Authorizer(acls, super_users={"User:admin"})
    assert authorizer.authorize("User:admin", HOST, O.WRITE, T, "orders")
    assert not authorizer.authorize(ALICE, HOST, O.WRITE, T, "orders")


def test_allow_if_no_acls_only_when_none_apply():
    authorizer = Authorizer([acl(T, "orders", LIT, BOB, O.READ)], allow_if_no_acls=True)
    assert authorizer.authorize(ALICE, HOST, O.READ, T, "payments")  # no ACL on payments
    assert not authorizer.authorize(ALICE, HOST, O.READ, T, "orders")  # an ACL applies, not to alice


def test_applying_lists_literal_wildcard_and_prefixes():
    acls = [acl(T, "orders", LIT, ALICE, O.READ), acl(T, "*", LIT, BOB, O.READ), acl(T, "o", PRE, BOB, O.READ),
            acl(T, "ord", PRE, BOB, O.READ), acl(T, "orders-x", PRE, BOB, O.READ), acl(T, "p", PRE, BOB, O.READ)]
    names = sorted((b.pattern_type.value, b.resource_name) for b in Authorizer(acls).applying(T, "orders"))
    assert names == [("literal", "*"), ("literal", "orders"), ("prefixed", "o"), ("prefixed", "ord")]


# --- property: the indexed authorizer equals a linear reference -------------------------------


def reference(acls, super_users, allow_if_no_acls, principal, host, operation, rt, name):
    """Kafka's rules, written as plainly as possible."""
    if principal in super_users:
        return True

    def applies(b):
        if b.resource_type is not rt:
            return False
        if b.pattern_type is LIT:
            return b.resource_name == name or b.resource_name == "*"
        return name.startswith(b.resource_name)

    applying = [b for b in acls if applies(b)]
    if not applying:
        return allow_if_no_acls
    mine = [b for b in applying if b.principal in (principal, "User:*") and b.host in (host, "*")]
    if any(b.permission is DENY and b.operation in (operation, O.ALL) for b in mine):
        return False
    granting = IMPLIED_BY.get(operation, {operation})
    return any(b.permission is ALLOW and (b.operation is O.ALL or b.operation in granting) for b in mine)


names = st.sampled_from(["a", "ab", "abc", "abd", "b", "*", "kafka-cluster"])
principals = st.sampled_from(["User:alice", "User:bob", "User:*"])
hosts = st.sampled_from(["*", "10.0.0.1", "10.0.0.2"])


@st.composite
def bindings(draw):
    rt = draw(st.sampled_from([T, G, C]))
    if rt is C:
        name, pt = "kafka-cluster", LIT
    else:
        name, pt = draw(names.filter(lambda n: n != "kafka-cluster")), draw(st.sampled_from([LIT, PRE]))
    op = draw(st.sampled_from(sorted(VALID_OPERATIONS[rt], key=lambda o: o.value)))
    return AclBinding(rt, name, pt, draw(principals), draw(hosts), op, draw(st.sampled_from([ALLOW, DENY])))


REQUESTS = [
    (principal, host, operation, rt, name)
    for principal in ("User:alice", "User:bob", "User:carol")
    for host in ("10.0.0.1", "10.0.0.2")
    for rt in (T, G, C)
    for name in ("a", "ab", "abc", "abd", "b", "kafka-cluster")
    for operation in Operation
    if operation not in (O.ANY, O.ALL)
]


@settings(max_examples=60, deadline=None)
@given(
    acls=st.lists(bindings(), max_size=12),
    super_users=st.sets(st.sampled_from(["User:alice", "User:carol"]), max_size=1),
    allow_if_no_acls=st.booleans(),
)
def test_authorizer_equals_reference(acls, super_users, allow_if_no_acls):
    # Every request in the space, against each random ACL set.
    authorizer = Authorizer(acls, super_users=super_users, allow_if_no_acls=allow_if_no_acls)
    for request in REQUESTS:
        assert authorizer.authorize(*request) is reference(acls, super_users, allow_if_no_acls, *request), request
