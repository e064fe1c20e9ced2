"""The client's native SASL login (sans-I/O) against the node's real SCRAM and PLAIN servers, the `security` option's forms, and the core failing what waits on a broker whose login was refused (at once, not at the deadline)."""

from __future__ import annotations

import random

import pytest

from raftlog.base.client_properties import ClientSecurity
from raftlog.base.errors import (
    InvalidConfigError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from raftlog.base.sasl import PlainClient, PlainServer, ScramClient, ScramServer, scram_credential
from raftlog.client.admin import AdminCore
from raftlog.client.consumer import ConsumerCore
from raftlog.client.core import Send
from raftlog.client.producer import ProducerCore
from raftlog.client.security import NativeLogin, client_security

PASSWORD = "login-unit-password"
CRED = {("alice", m): scram_credential(m, PASSWORD, iterations=4096) for m in ("SCRAM-SHA-512", "SCRAM-SHA-256")}


def lookup(user: str, mechanism: str):
    return CRED.get((user, mechanism))


def serve(request: dict, server) -> dict:
    """What the node's SaslSession answers (raftlog/node/auth.py), reduced to the exchange."""
    if request["op"] == "sasl_handshake":
        return {"id": request["id"], "ok": True, "mechanisms": ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]}
    try:
        answer = server.step(request["auth_bytes"])
    except SaslAuthenticationFailedError as exc:
        return {"id": request["id"], "error": exc.to_wire()}
    out = {"id": request["id"], "ok": True, "auth_bytes": answer, "complete": server.done}
    if server.done:
        out["principal"] = server.principal
    return out


def run(login: NativeLogin, server) -> int:
    request = login.first_request()
    rounds = 0
    while request is not None:
        rounds += 1
        request = login.on_response(serve(request, server))
    return rounds


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256"])
def test_scram_login_takes_three_rounds_and_learns_the_principal(mechanism):
    login = NativeLogin(ScramClient(mechanism, "alice", PASSWORD))
    assert run(login, ScramServer(mechanism, lookup)) == 3
    assert login.done and login.principal == "User:alice"


def test_plain_login_takes_two_rounds():
    login = NativeLogin(PlainClient("alice", PASSWORD))
    assert run(login, PlainServer(lookup)) == 2
    assert login.done and login.principal == "User:alice"


def test_a_wrong_password_raises_the_nodes_refusal():
    login = NativeLogin(ScramClient("SCRAM-SHA-512", "alice", "wrong"))
    with pytest.raises(SaslAuthenticationFailedError):
        run(login, ScramServer("SCRAM-SHA-512", lookup))
    assert not login.done


def test_a_server_that_does_not_know_the_credential_is_caught():
    # An impostor node that accepts anything cannot produce the server signature.
    login = NativeLogin(ScramClient("SCRAM-SHA-512", "alice", PASSWORD))
    request = login.first_request()
    request = login.on_response({"id": request["id"], "ok": True, "mechanisms": ["SCRAM-SHA-512"]})
    nonce = request["auth_bytes"].decode().split("r=")[1]
    first = f"r={nonce}xyz,s=c2FsdHNhbHRzYWx0c2FsdA==,i=4096".encode()
    request = login.on_response({"id": request["id"], "ok": True, "auth_bytes": first, "complete": False})
    with pytest.raises(SaslAuthenticationFailedError, match="signature"):
        login.on_response({"id": request["id"], "ok": True, "auth_bytes": b"v=AAAA", "complete": True})


def test_the_nodes_error_comes_back_as_its_class():
    login = NativeLogin(ScramClient("SCRAM-SHA-512", "alice", PASSWORD))
    login.first_request()
    refusal = UnsupportedSaslMechanismError("not here", enabled=["PLAIN"]).to_wire()
    with pytest.raises(UnsupportedSaslMechanismError):
        login.on_response({"id": 1, "error": refusal})


def test_the_security_option_takes_a_dict_a_file_or_nothing(tmp_path):
    keys = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
            "sasl.password": PASSWORD}
    from_dict = client_security(keys)
    path = tmp_path / "client.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in keys.items()))
    assert client_security(str(path)) == from_dict == client_security(from_dict)
    assert client_security(None) is None and client_security({"security.protocol": "PLAINTEXT"}) is None
    with pytest.raises(InvalidConfigError) as info:
        client_security({**keys, "sasl.pasword": PASSWORD})  # a typo is an error, never ignored
    assert PASSWORD not in str(info.value)
    assert PASSWORD not in repr(from_dict)


REFUSED = SaslAuthenticationFailedError("authentication failed: invalid credentials")


def test_an_admin_call_fails_with_the_refusal_at_once():
    core = AdminCore("127.0.0.1:1", rng=random.Random(1), request_timeout_ms=30_000)
    call = core.submit({"op": "cluster_status"}, 0)
    sends = [a for a in core.poll(0) if isinstance(a, Send)]
    assert sends and sends[0].request["op"] == "cluster_status"
    core.on_input((), (), 5, refused=[(sends[0].broker_id, REFUSED)])
    assert call.done and call.error is REFUSED and core.auth_error is REFUSED


def test_a_producer_send_waiting_for_metadata_fails_with_the_refusal():
    core = ProducerCore("127.0.0.1:1", rng=random.Random(1), future_factory=lambda: None,
                        enable_idempotence=False)
    sends = [a for a in core.poll(0) if isinstance(a, Send)]
    core.on_input((), (), 5, refused=[(sends[0].broker_id, REFUSED)])
    with pytest.raises(SaslAuthenticationFailedError):
        core.append("t", b"v", None, None, None, 0, 6)


def test_a_consumer_poll_raises_the_refusal():
    core = ConsumerCore("127.0.0.1:1", rng=random.Random(1))
    core.assign([("t", 0)])
    sends = [a for a in core.poll(0) if isinstance(a, Send)]
    core.on_input((), (), 5, refused=[(sends[0].broker_id, REFUSED)])
    with pytest.raises(SaslAuthenticationFailedError):
        core.take_records()


def test_a_client_security_repr_and_properties_round_trip():
    security = ClientSecurity(protocol="SASL_SSL", mechanism="SCRAM-SHA-512", username="a", password=PASSWORD)
    assert client_security(security.to_properties()) == security
