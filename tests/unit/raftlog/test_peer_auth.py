"""The HMAC peer handshake admits only holders of the cluster secret: a wrong key, a replayed or reflected proof, another node id or an out-of-order message fails."""

import pytest

from raftlog.base.errors import IllegalSaslStateError, SaslAuthenticationFailedError
from raftlog.base.peer_auth import PeerAuthAcceptor, PeerAuthDialer, peer_key

KEY = peer_key("cluster-secret-0123456789abcdef")


def test_both_sides_with_the_key_agree():
    dialer, acceptor = PeerAuthDialer(KEY, 7), PeerAuthAcceptor(KEY)
    assert acceptor.verify(dialer.finish(acceptor.challenge(dialer.hello()))) == 7
    assert acceptor.done and acceptor.node_id == 7


def test_the_key_is_derived_not_the_secret_itself():
    assert KEY != b"cluster-secret-0123456789abcdef" and len(KEY) == 32
    assert peer_key("a-different-secret-here") != KEY
    with pytest.raises(ValueError):
        peer_key("")


def test_a_dialer_without_the_secret_is_refused():
    stranger = PeerAuthDialer(peer_key("guessed-secret"), 99)
    acceptor = PeerAuthAcceptor(KEY)
    challenge = acceptor.challenge(stranger.hello())
    # The stranger cannot check the listener's proof, and forging its own fails.
    with pytest.raises(SaslAuthenticationFailedError):
        stranger.finish(challenge)
    with pytest.raises(SaslAuthenticationFailedError, match="does not hold"):
        acceptor.verify({"proof": b"\0" * 32})
    assert acceptor.node_id is None


def test_a_listener_without_the_secret_is_refused_by_the_dialer():
    dialer = PeerAuthDialer(KEY, 1)
    impostor = PeerAuthAcceptor(peer_key("impostor"))
    with pytest.raises(SaslAuthenticationFailedError, match="listener"):
        dialer.finish(impostor.challenge(dialer.hello()))


def test_a_recorded_handshake_does_not_replay():
    dialer, acceptor = PeerAuthDialer(KEY, 3), PeerAuthAcceptor(KEY)
    hello = dialer.hello()
    finish = dialer.finish(acceptor.challenge(hello))
    acceptor.verify(finish)
    replay = PeerAuthAcceptor(KEY)  # a new connection has a new listener nonce
    replay.challenge(hello)
    with pytest.raises(SaslAuthenticationFailedError):
        replay.verify(finish)


def test_the_listener_proof_cannot_be_reflected_as_the_dialer_proof():
    acceptor = PeerAuthAcceptor(KEY)
    attacker_nonce = b"\1" * 32
    challenge = acceptor.challenge({"node_id": 4, "nonce": attacker_nonce})
    with pytest.raises(SaslAuthenticationFailedError):
        acceptor.verify({"proof": challenge["proof"]})
    mirror = PeerAuthAcceptor(KEY, nonce=b"\2" * 32)
    with pytest.raises(SaslAuthenticationFailedError, match="reflected"):
        mirror.challenge({"node_id": 4, "nonce": b"\2" * 32})


def test_a_proof_is_bound_to_the_claimed_node_id():
    dialer = PeerAuthDialer(KEY, 1, nonce=b"\3" * 32)
    acceptor = PeerAuthAcceptor(KEY, nonce=b"\4" * 32)
    hello = dialer.hello()
    finish = dialer.finish(acceptor.challenge(hello))
    other = PeerAuthAcceptor(KEY, nonce=b"\4" * 32)
    other.challenge({**hello, "node_id": 2})
    with pytest.raises(SaslAuthenticationFailedError):
        other.verify(finish)


@pytest.mark.parametrize(
    "hello",
    [None, {}, {"node_id": "1", "nonce": b"\0" * 32}, {"node_id": 1, "nonce": b"short"},
     {"node_id": -1, "nonce": b"\5" * 32}, {"node_id": True, "nonce": b"\5" * 32}],
)
def test_malformed_hello_is_refused(hello):
    with pytest.raises(SaslAuthenticationFailedError):
        PeerAuthAcceptor(KEY).challenge(hello)


def test_out_of_order_messages():
    acceptor = PeerAuthAcceptor(KEY)
    with pytest.raises(IllegalSaslStateError):
        acceptor.verify({"proof": b"x"})
    dialer = PeerAuthDialer(KEY, 1)
    with pytest.raises(IllegalSaslStateError):
        dialer.finish({})
    dialer.hello()
    with pytest.raises(IllegalSaslStateError):
        dialer.hello()
