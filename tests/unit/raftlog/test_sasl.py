"""SCRAM-SHA-256/512 and PLAIN exchanges: RFC 7677's vector, kafka-python's SCRAM client against our server, every wrong or replayed message refused without naming a secret."""

import base64

import pytest

from raftlog.base.errors import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from raftlog.base.sasl import (
    MIN_ITERATIONS,
    credential_from_salted_password,
    salted_password,
    NonceCache,
    PlainClient,
    PlainServer,
    ScramClient,
    ScramCredential,
    ScramServer,
    new_server,
    plain_message,
    scram_credential,
)

PASSWORD = "pencil-Sekr3t-xyzzy"
MECHS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


def store(*creds_by_user):
    table = {}
    for user, cred in creds_by_user:
        table[(user, cred.mechanism)] = cred
    return lambda user, mechanism: table.get((user, mechanism))


def exchange(client, server):
    server_first = server.step(client.first_message())
    server_final = server.step(client.final_message(server_first))
    client.verify_server_final(server_final)
    return server_first, server_final


def test_rfc7677_sha256_vector():
    # RFC 7677 section 3: user "user", password "pencil".
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = scram_credential("SCRAM-SHA-256", "pencil", salt=salt, iterations=4096)
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    server = ScramServer("SCRAM-SHA-256", store(("user", cred)), server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert client.first_message() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server_first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = client.final_message(server_first)
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    server_final = server.step(final)
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    client.verify_server_final(server_final)
    assert client.done and server.done and server.principal == "User:user"


@pytest.mark.parametrize("mechanism", MECHS)
def test_our_client_and_server_agree(mechanism):
    cred = scram_credential(mechanism, PASSWORD, iterations=MIN_ITERATIONS)
    server = ScramServer(mechanism, store(("alice", cred)), nonces=NonceCache())
    exchange(ScramClient(mechanism, "alice", PASSWORD), server)
    assert server.principal == "User:alice"


@pytest.mark.parametrize("mechanism", MECHS)
def test_kafka_python_scram_client_against_our_server(mechanism):
    from kafka.net.sasl.scram import ScramClient as KafkaScramClient

    cred = scram_credential(mechanism, PASSWORD)
    server = ScramServer(mechanism, store(("bob", cred)))
    theirs = KafkaScramClient("bob", PASSWORD, mechanism)
    theirs.process_server_first_message(server.step(theirs.first_message()))
    theirs.process_server_final_message(server.step(theirs.final_message()))  # raises if our signature is wrong
    assert server.principal == "User:bob"


def test_usernames_with_comma_and_equals_are_escaped():
    cred = scram_credential("SCRAM-SHA-256", PASSWORD)
    server = ScramServer("SCRAM-SHA-256", store(("a,b=c", cred)))
    client = ScramClient("SCRAM-SHA-256", "a,b=c", PASSWORD)
    first = client.first_message()
    assert b"n=a=2Cb=3Dc," in first
    client.verify_server_final(server.step(client.final_message(server.step(first))))
    assert server.principal == "User:a,b=c"


@pytest.mark.parametrize("mechanism", MECHS)
def test_wrong_password_fails_without_naming_it(mechanism):
    cred = scram_credential(mechanism, PASSWORD)
    server = ScramServer(mechanism, store(("alice", cred)))
    client = ScramClient(mechanism, "alice", "not-the-password")
    first = server.step(client.first_message())
    with pytest.raises(SaslAuthenticationFailedError) as info:
        server.step(client.final_message(first))
    assert "not-the-password" not in str(info.value) and PASSWORD not in str(info.value)
    assert server.principal is None and not server.done
    with pytest.raises(IllegalSaslStateError):  # a failed exchange is over
        server.step(b"c=biws,r=x,p=AAAA")


def test_unknown_user_gets_a_decoy_salt_and_fails_at_the_proof():
    server1 = ScramServer("SCRAM-SHA-512", store())
    server2 = ScramServer("SCRAM-SHA-512", store())
    client = ScramClient("SCRAM-SHA-512", "mallory", PASSWORD)
    first = server1.step(client.first_message())
    again = server2.step(ScramClient("SCRAM-SHA-512", "mallory", PASSWORD).first_message())
    # Same salt and iterations each time: probing cannot tell a decoy from a real user.
    assert first.split(b",")[1:] == again.split(b",")[1:]
    with pytest.raises(SaslAuthenticationFailedError, match="invalid credentials"):
        server1.step(client.final_message(first))


def test_replayed_final_message_fails_in_a_new_exchange():
    cred = scram_credential("SCRAM-SHA-256", PASSWORD)
    lookup = store(("alice", cred))
    nonces = NonceCache()
    client = ScramClient("SCRAM-SHA-256", "alice", PASSWORD)
    client_first = client.first_message()
    server = ScramServer("SCRAM-SHA-256", lookup, nonces=nonces, now_ms=1)
    client_final = client.final_message(server.step(client_first))
    server.step(client_final)
    # An eavesdropper replays the recorded messages: the first is refused (nonce seen) ...
    with pytest.raises(SaslAuthenticationFailedError, match="replayed"):
        ScramServer("SCRAM-SHA-256", lookup, nonces=nonces, now_ms=2).step(client_first)
    # ... and even with a cache that forgot it, the final carries the old server nonce.
    fresh = ScramServer("SCRAM-SHA-256", lookup, nonces=NonceCache(), now_ms=3)
    fresh.step(client_first)
    with pytest.raises(SaslAuthenticationFailedError, match="nonce"):
        fresh.step(client_final)


def test_nonce_cache_forgets_after_its_window_and_is_bounded():
    cache = NonceCache(max_entries=3, window_ms=100)
    assert cache.add("a", 0) and not cache.add("a", 50)
    assert cache.add("a", 150)  # the window passed
    for i, n in enumerate("bcdef"):
        assert cache.add(n, 160 + i)
    assert len(cache) <= 3


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"p=tls-unique,,n=alice,r=abc",  # channel binding asked for
        b"n,,r=abc,n=alice",  # attributes out of order
        b"n,,n=alice",  # no nonce
        b"n,,n=al=ZZice,r=abc",  # bad escape
        b"n,,n=alice,r=abc,m=must",  # mandatory extension
        b"n,,n=alice,r=abc,tokenauth=true",  # Kafka delegation token
        b"n,a=bob,n=alice,r=abc",  # authzid for someone else
        b"\xff\xfe",
        b"n,,n=alice,r=" + b"x" * 5000,
    ],
)
def test_malformed_client_first_is_refused(message):
    server = ScramServer("SCRAM-SHA-256", store(("alice", scram_credential("SCRAM-SHA-256", PASSWORD))))
    with pytest.raises(SaslAuthenticationFailedError):
        server.step(message)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda f: f.replace(b"c=biws", b"c=eSws"),  # channel binding flag changed
        lambda f: f[:-4] + b"AAA=",  # proof changed
        lambda f: b"c=biws,p=" + f.split(b",p=")[1],  # no nonce
        lambda f: f + b"==",  # not base64
    ],
)
def test_tampered_client_final_is_refused(tamper):
    cred = scram_credential("SCRAM-SHA-256", PASSWORD)
    server = ScramServer("SCRAM-SHA-256", store(("alice", cred)))
    client = ScramClient("SCRAM-SHA-256", "alice", PASSWORD)
    final = client.final_message(server.step(client.first_message()))
    with pytest.raises(SaslAuthenticationFailedError):
        server.step(tamper(final))


def test_client_refuses_a_lying_server():
    client = ScramClient("SCRAM-SHA-256", "alice", PASSWORD, nonce="abc")
    client.first_message()
    with pytest.raises(SaslAuthenticationFailedError, match="nonce"):
        client.final_message(b"r=xyz123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    client = ScramClient("SCRAM-SHA-256", "alice", PASSWORD, nonce="abc")
    client.first_message()
    with pytest.raises(SaslAuthenticationFailedError, match="iterations"):
        client.final_message(b"r=abc123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1")
    # A server that does not hold our credential cannot produce the signature.
    impostor = ScramServer("SCRAM-SHA-256", store(("alice", scram_credential("SCRAM-SHA-256", "other"))))
    client = ScramClient("SCRAM-SHA-256", "alice", PASSWORD)
    final = client.final_message(impostor.step(client.first_message()))
    with pytest.raises(SaslAuthenticationFailedError):
        impostor.step(final)
    with pytest.raises(SaslAuthenticationFailedError, match="signature"):
        client.verify_server_final(b"v=" + base64.b64encode(b"\0" * 32))


def test_client_state_machine_refuses_out_of_order_calls():
    client = ScramClient("SCRAM-SHA-512", "alice", PASSWORD)
    with pytest.raises(IllegalSaslStateError):
        client.final_message(b"r=x,s=y,i=4096")
    client.first_message()
    with pytest.raises(IllegalSaslStateError):
        client.first_message()


def test_credentials_hold_no_password_and_hide_keys():
    cred = scram_credential("SCRAM-SHA-512", PASSWORD)
    assert PASSWORD.encode() not in cred.salt + cred.stored_key + cred.server_key
    assert "hidden" in repr(cred) and cred.stored_key.hex() not in repr(cred)
    assert PASSWORD not in repr(ScramClient("SCRAM-SHA-512", "alice", PASSWORD))
    assert PASSWORD not in repr(PlainClient("alice", PASSWORD))
    assert cred.check_password(PASSWORD.encode()) and not cred.check_password(b"nope")


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(iterations=100),
        dict(iterations=10**6),
        dict(salt=b"x" * 1025),
    ],
)
def test_unacceptable_credentials(kwargs):
    with pytest.raises(UnacceptableCredentialError):
        scram_credential("SCRAM-SHA-256", PASSWORD, **kwargs)


def test_a_salt_the_client_chose_is_kept_as_kafka_keeps_it():
    """librdkafka's 0081_admin upserts SCRAM credentials with a 4-byte salt; Kafka stores it."""
    cred = scram_credential("SCRAM-SHA-256", PASSWORD, salt=b"salt")
    assert cred.salt == b"salt" and cred.check_password(PASSWORD.encode())
    assert len(scram_credential("SCRAM-SHA-256", PASSWORD).salt) == 32


def test_credential_checks_key_sizes_and_mechanism():
    good = scram_credential("SCRAM-SHA-256", PASSWORD)
    with pytest.raises(UnacceptableCredentialError):
        ScramCredential("SCRAM-SHA-512", good.salt, good.stored_key, good.server_key, good.iterations)
    with pytest.raises(UnsupportedSaslMechanismError):
        scram_credential("SCRAM-MD5", PASSWORD)
    with pytest.raises(UnacceptableCredentialError):
        scram_credential("SCRAM-SHA-256", "")


def test_plain_checks_against_the_stored_scram_credential():
    lookup = store(("alice", scram_credential("SCRAM-SHA-256", PASSWORD)))
    server = PlainServer(lookup)
    assert server.step(plain_message("alice", PASSWORD)) == b""
    assert server.principal == "User:alice"
    for message in (
        plain_message("alice", "wrong"),
        plain_message("nobody", PASSWORD),
        b"alice\0" + PASSWORD.encode(),  # two fields only
        b"bob\0alice\0" + PASSWORD.encode(),  # authzid for someone else
        b"\0alice\0",
    ):
        with pytest.raises(SaslAuthenticationFailedError) as info:
            PlainServer(lookup).step(message)
        assert PASSWORD not in str(info.value)
    with pytest.raises(IllegalSaslStateError):
        server.step(plain_message("alice", PASSWORD))


def test_new_server_refuses_mechanisms_not_enabled():
    with pytest.raises(UnsupportedSaslMechanismError) as info:
        new_server("PLAIN", store(), enabled=("SCRAM-SHA-512",))
    assert info.value.details["enabled"] == ["SCRAM-SHA-512"]
    assert isinstance(new_server("SCRAM-SHA-256", store()), ScramServer)
    assert isinstance(new_server("PLAIN", store()), PlainServer)


@pytest.mark.parametrize("mechanism", MECHS)
def test_credential_from_a_salted_password_equals_the_direct_one(mechanism):
    salt = b"s" * 16
    direct = scram_credential(mechanism, PASSWORD, salt=salt, iterations=4096)
    salted = salted_password(mechanism, PASSWORD, salt, 4096)
    assert credential_from_salted_password(mechanism, salt, salted, 4096) == direct
    with pytest.raises(UnacceptableCredentialError):
        credential_from_salted_password(mechanism, salt, b"short", 4096)


def test_librdkafkas_final_nonce_form_is_accepted_and_still_bound_to_the_exchange():
    # librdkafka (kcat, confluent-kafka) sends r=<client nonce><server's whole nonce>; Kafka
    # accepts it. The proof is over the message as sent, so it still has to be right.
    import hashlib
    import hmac

    cred = scram_credential("SCRAM-SHA-512", PASSWORD)
    lookup = store(("alice", cred))

    def librdkafka_final(server_first: bytes, client_first_bare: str, cnonce: str, password: str) -> bytes:
        attrs = dict(part.split("=", 1) for part in server_first.decode().split(","))
        salted = hashlib.pbkdf2_hmac("sha512", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = hmac.new(salted, b"Client Key", "sha512").digest()
        stored = hashlib.sha512(client_key).digest()
        without_proof = f"c=biws,r={cnonce}{attrs['r']}"
        auth = f"{client_first_bare},{server_first.decode()},{without_proof}".encode()
        proof = bytes(a ^ b for a, b in zip(client_key, hmac.new(stored, auth, "sha512").digest()))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    cnonce = "rdkafkaNonce0123456789"
    server = ScramServer("SCRAM-SHA-512", lookup, nonces=NonceCache())
    first = server.step(f"n,,n=alice,r={cnonce}".encode())
    assert server.step(librdkafka_final(first, f"n=alice,r={cnonce}", cnonce, PASSWORD)).startswith(b"v=")
    assert server.principal == "User:alice"
    # The same form with a wrong password, or with another exchange's server nonce, fails.
    server = ScramServer("SCRAM-SHA-512", lookup, nonces=NonceCache())
    first = server.step(f"n,,n=alice,r={cnonce}x".encode())
    with pytest.raises(SaslAuthenticationFailedError):
        server.step(librdkafka_final(first, f"n=alice,r={cnonce}x", cnonce + "x", "wrong"))
    server = ScramServer("SCRAM-SHA-512", lookup, nonces=NonceCache())
    server.step(f"n,,n=alice,r={cnonce}y".encode())
    other = ScramServer("SCRAM-SHA-512", lookup, nonces=NonceCache()).step(f"n,,n=alice,r={cnonce}y".encode())
    with pytest.raises(SaslAuthenticationFailedError, match="nonce"):
        server.step(librdkafka_final(other, f"n=alice,r={cnonce}y", cnonce + "y", PASSWORD))
