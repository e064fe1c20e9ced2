"""Controller decisions for ACLs and SCRAM credentials follow Kafka's CreateAcls/DeleteAcls/AlterUserScramCredentials rules: per-item answers, idempotent creates, filters delete what they match once, duplicate users refused, only salted keys stored."""

import random

import pytest

from metadata.controller import MAX_ACL_ITEMS, Controller, ControllerResult
from metadata.delta import replay_envelope
from metadata.image import MetadataImage
from metadata.records import encode_envelope
from metadata.security_ops import decide, describe, read_bootstrap_credentials, write_bootstrap_credentials
from raftlog.base.acl import AclBinding
from raftlog.base.errors import InvalidRequestError
from raftlog.base.sasl import ScramClient, ScramServer, salted_password

PASSWORD = "controller-test-password"


class Cluster:
    def __init__(self):
        self.image = MetadataImage.empty()
        self.c = Controller(self.image, 1, 0, random.Random(1))
        self.commit(self.c.noop())

    def commit(self, result: ControllerResult):
        for env in result.envelopes:
            self.image = replay_envelope(self.image, encode_envelope(env))
            assert self.image.request_outcome(env.request_id).ok, self.image.request_outcome(env.request_id)
        self.c.update_image(self.image, 0)
        return result.response


def binding(name="orders", principal="User:alice", op="read", perm="allow", pt="literal"):
    return AclBinding("topic", name, pt, principal, "*", op, perm).to_obj()


def upsert(name, mechanism="SCRAM-SHA-512", password=PASSWORD, iterations=4096, salt=b"0123456789abcdef"):
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": salt,
            "salted_password": salted_password(mechanism, password, salt, iterations)}


def test_create_acls_answers_each_binding_and_is_idempotent():
    cl = Cluster()
    bad = {**binding(), "operation": "fly"}
    response = cl.commit(cl.c.create_acls([binding(), bad, binding("pay", op="write"), binding()], now_ms=0))
    assert response[0] == {} and response[2] == {} and response[3] == {}
    assert response[1]["error"]["code"] == "INVALID_REQUEST" and response[1]["error"]["field"] == "operation"
    assert len(cl.image.acls) == 2  # the duplicate in the request wrote once
    again = cl.c.create_acls([binding()], now_ms=0)
    assert again.envelopes == () and again.response == [{}]  # exists: created, nothing to write


def test_racing_creates_of_one_binding_write_it_once():
    cl = Cluster()
    first = cl.c.create_acls([binding()], now_ms=0)
    second = cl.c.create_acls([binding()], now_ms=0)  # before the first commits
    assert len(first.envelopes) == 1 and second.envelopes == ()
    cl.commit(first)
    assert len(cl.image.acls) == 1


def test_describe_and_delete_acls_by_filter():
    cl = Cluster()
    cl.commit(cl.c.create_acls([binding(), binding(principal="User:bob"), binding("ord", pt="prefixed"),
                                binding("pay", op="write", perm="deny")], now_ms=0))
    match = {"resource_type": "topic", "resource_name": "orders", "pattern_type": "match"}
    assert len(describe(cl.image, "describe_acls", {"filter": match})["acls"]) == 3
    assert describe(cl.image, "describe_acls", {"filter": {"principal": "User:bob"}})["acls"] == [binding(principal="User:bob")]
    result = cl.c.delete_acls([{"principal": "User:alice", "pattern_type": "literal"}, {"resource_name": "orders"},
                               {"operation": "bogus"}], now_ms=0)
    response = cl.commit(result)
    assert [len(r.get("acls", [])) for r in response] == [2, 1, 0]  # alice's two; bob's (alice's already taken)
    assert response[2]["error"]["code"] == "INVALID_REQUEST"
    assert [b.resource_name for _, b in cl.image.acl_bindings()] == ["ord"]


def test_racing_deletes_do_not_fail_each_other():
    cl = Cluster()
    cl.commit(cl.c.create_acls([binding()], now_ms=0))
    first = cl.c.delete_acls([{}], now_ms=0)
    second = cl.c.delete_acls([{}], now_ms=0)
    assert second.envelopes == () and second.response == [{"acls": []}]
    cl.commit(first)
    assert cl.image.acls == {}


def test_request_size_limits():
    cl = Cluster()
    with pytest.raises(InvalidRequestError):
        cl.c.create_acls([binding()] * (MAX_ACL_ITEMS + 1), now_ms=0)
    with pytest.raises(InvalidRequestError):
        cl.c.delete_acls("all", now_ms=0)


def test_scram_upsert_stores_keys_that_authenticate():
    cl = Cluster()
    response = cl.commit(cl.c.alter_scram_credentials([upsert("alice"), upsert("alice", "SCRAM-SHA-256")], [], now_ms=0))
    assert response == [{"user": "alice"}]
    server = ScramServer("SCRAM-SHA-512", cl.image.scram_credential)
    client = ScramClient("SCRAM-SHA-512", "alice", PASSWORD)
    client.verify_server_final(server.step(client.final_message(server.step(client.first_message()))))
    assert describe(cl.image, "describe_user_scram_credentials", {})["users"] == [{"user": "alice", "credentials": [
        {"mechanism": "SCRAM-SHA-256", "iterations": 4096}, {"mechanism": "SCRAM-SHA-512", "iterations": 4096}]}]


def test_scram_alteration_errors_are_per_user():
    cl = Cluster()
    cl.commit(cl.c.alter_scram_credentials([upsert("bob")], [], now_ms=0))
    result = cl.c.alter_scram_credentials(
        [upsert("alice"), upsert("carol", iterations=10), {**upsert("dave"), "mechanism": "SCRAM-SHA-1"}, upsert("erin")],
        [{"name": "erin", "mechanism": "SCRAM-SHA-512"}, {"name": "frank", "mechanism": "SCRAM-SHA-256"},
         {"name": "bob", "mechanism": "SCRAM-SHA-512"}],
        now_ms=0,
    )
    codes = {r["user"]: r.get("error", {}).get("code") for r in cl.commit(result)}
    assert codes == {"alice": None, "carol": "UNACCEPTABLE_CREDENTIAL", "dave": "UNSUPPORTED_SASL_MECHANISM",
                     "erin": "DUPLICATE_RESOURCE", "frank": "RESOURCE_NOT_FOUND", "bob": None}
    assert cl.image.scram_users() == ("alice",)  # bob removed, only alice added
    described = {d["user"]: d for d in describe(cl.image, "describe_user_scram_credentials", {"users": ["alice", "zed"]})["users"]}
    assert described["zed"]["error"]["code"] == "RESOURCE_NOT_FOUND"


def test_the_password_never_reaches_the_log():
    cl = Cluster()
    result = cl.c.alter_scram_credentials([upsert("alice")], [], now_ms=0)
    data = b"".join(encode_envelope(e) for e in result.envelopes)
    assert PASSWORD.encode() not in data
    assert upsert("alice")["salted_password"] not in data  # only keys derived from it


def test_bootstrap_credentials_seed_an_empty_store_only():
    from metadata.records import UserScramCredential
    from raftlog.base.sasl import scram_credential

    admin = UserScramCredential.of("admin", scram_credential("SCRAM-SHA-512", PASSWORD, iterations=4096))
    cl = Cluster()
    result = cl.c.ensure_bootstrap_credentials([admin], now_ms=0)
    assert cl.c.ensure_bootstrap_credentials([admin], now_ms=0).envelopes == ()  # in flight already
    cl.commit(result)
    assert cl.image.scram_users() == ("admin",)
    cl.commit(cl.c.alter_scram_credentials([upsert("alice")], [{"name": "admin", "mechanism": "SCRAM-SHA-512"}], now_ms=0))
    assert cl.c.ensure_bootstrap_credentials([admin], now_ms=0).envelopes == ()  # alice exists: operators' turn
    cl.commit(cl.c.alter_scram_credentials([], [{"name": "alice", "mechanism": "SCRAM-SHA-512"}], now_ms=0))
    cl.commit(cl.c.ensure_bootstrap_credentials([admin], now_ms=0))  # nobody left: the admin comes back
    assert cl.image.scram_users() == ("admin",)


def test_decide_wraps_answers_and_checks_fields():
    cl = Cluster()
    answer = cl.commit(decide(cl.c, "create_acls", {"acls": [binding()]}, now_ms=0))
    assert answer == {"results": [{}]}
    with pytest.raises(InvalidRequestError, match="filters"):
        decide(cl.c, "delete_acls", {}, now_ms=0)
    assert cl.commit(decide(cl.c, "alter_user_scram_credentials", {"upsertions": [upsert("a")]}, now_ms=0)) == \
        {"results": [{"user": "a"}]}
    with pytest.raises(InvalidRequestError):
        describe(cl.image, "describe_user_scram_credentials", {"users": "a"})


def test_bootstrap_file_round_trip_and_errors(tmp_path):
    import os
    import stat

    from metadata.records import UserScramCredential
    from raftlog.base.errors import InvalidConfigError
    from raftlog.base.sasl import scram_credential

    creds = [UserScramCredential.of("admin", scram_credential(m, PASSWORD, iterations=4096))
             for m in ("SCRAM-SHA-512", "SCRAM-SHA-256")]
    path = tmp_path / "bootstrap_credentials"
    write_bootstrap_credentials(path, creds)
    assert read_bootstrap_credentials(path) == tuple(creds)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and PASSWORD not in path.read_text()
    path.write_text('{"name": "x"}\n')
    with pytest.raises(InvalidConfigError, match="line 1"):
        read_bootstrap_credentials(path)
    with pytest.raises(InvalidConfigError, match="cannot read"):
        read_bootstrap_credentials(tmp_path / "missing")
