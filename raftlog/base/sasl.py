"""SASL mechanisms as sans-I/O state machines, for both sides: SCRAM-SHA-256 and SCRAM-SHA-512
(RFC 5802, RFC 7677) and PLAIN (RFC 4616). The Kafka listener's SaslAuthenticate and the native
protocol's `sasl_authenticate` carry these messages as bytes; nothing here does I/O.

    cred = scram_credential("SCRAM-SHA-512", password)          # what the metadata log stores
    client = ScramClient("SCRAM-SHA-512", "alice", password)
    server = ScramServer("SCRAM-SHA-512", lookup, nonces=NonceCache())
    server_first = server.step(client.first_message())
    server_final = server.step(client.final_message(server_first))
    client.verify_server_final(server_final)                    # the server knew the password too
    server.principal                                            # "User:alice"

Credentials: the cluster stores `ScramCredential(mechanism, salt, stored_key, server_key,
iterations)` per user and mechanism, never the password; PLAIN is verified against the same
stored credential (one PBKDF2 of the offered password), so there is no second password store.

Invariants and rules:
* Hashing is the standard library's (`hashlib.pbkdf2_hmac`, `hmac`), proofs are compared with
  `hmac.compare_digest`; no primitive is written here.
* A server exchange is one-shot: first message, final message, done. Any message out of
  order, malformed, over MAX_MESSAGE_BYTES, or with a wrong proof raises
  SaslAuthenticationFailedError and the exchange is dead (the listener closes the connection).
* Replay: the final message must carry exactly this exchange's nonce (client nonce + a fresh
  server nonce; librdkafka's form, the client nonce once more in front, is accepted too, as
  Kafka does), so a recorded final message fails in any other exchange; and a client nonce
  seen in the last `NonceCache` window is refused at the first message.
* An unknown user gets a server-first message like a known one (salt and iteration count
  derived from a per-process secret), and fails at the proof: the answer does not tell
  whether the user exists.
* Secrets never leave in text: error messages say "invalid credentials" and nothing else;
  reprs of credentials, clients and servers hide passwords and keys.
* Normalisation: the password is taken as its UTF-8 bytes without SASLprep, as Kafka's
  ScramFormatter and librdkafka do (so the same bytes authenticate with every client).

Public API:
    SCRAM_MECHANISMS, MECHANISMS, MIN_ITERATIONS, MAX_ITERATIONS, DEFAULT_ITERATIONS
    ScramCredential, scram_credential(mechanism, password, *, salt=None, iterations=...)
    salted_password(mechanism, password, salt, iterations) -> bytes   (client side of an upsert)
    credential_from_salted_password(mechanism, salt, salted_password, iterations)   (node side)
    ScramClient, ScramServer, NonceCache
    PlainClient, PlainServer, plain_message(username, password)
    new_server(mechanism, lookup, *, nonces) -> ScramServer | PlainServer
    PRINCIPAL_PREFIX, principal_of(username)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from raftlog.base.errors import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)

__all__ = [
    "DEFAULT_ITERATIONS",
    "MAX_ITERATIONS",
    "MAX_MESSAGE_BYTES",
    "MAX_USERNAME_CHARS",
    "MECHANISMS",
    "MIN_ITERATIONS",
    "NonceCache",
    "PRINCIPAL_PREFIX",
    "PlainClient",
    "PlainServer",
    "SCRAM_MECHANISMS",
    "ScramClient",
    "ScramCredential",
    "ScramServer",
    "new_server",
    "plain_message",
    "principal_of",
    "scram_credential",
    "credential_from_salted_password",
    "salted_password",
]

# mechanism -> hashlib name
SCRAM_MECHANISMS: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS: Final = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
MIN_ITERATIONS: Final = 4096  # RFC 7677's minimum and Kafka's
MAX_ITERATIONS: Final = 16384  # Kafka's maximum: bounds the work one stored credential costs
DEFAULT_ITERATIONS: Final = 8192
# A salt the client chose (AlterUserScramCredentials) is stored as given, as Kafka's
# ScramControlManager stores it (librdkafka's 0081_admin upserts a 4-byte one); the bound only
# keeps the record small. raftlog's own credentials get SALT_BYTES random bytes.
MIN_SALT_BYTES: Final = 0
MAX_SALT_BYTES: Final = 1024
SALT_BYTES: Final = 32
NONCE_BYTES: Final = 24
MAX_MESSAGE_BYTES: Final = 4096  # any SCRAM or PLAIN message we accept is far smaller
MAX_USERNAME_CHARS: Final = 255
MAX_PASSWORD_BYTES: Final = 1024
PRINCIPAL_PREFIX: Final = "User:"

_INVALID: Final = "authentication failed: invalid credentials"


def principal_of(username: str) -> str:
    """The principal ACLs name for an authenticated user: "User:<name>" (Kafka's form)."""
    return PRINCIPAL_PREFIX + username


def _fail(why: str = _INVALID) -> SaslAuthenticationFailedError:
    return SaslAuthenticationFailedError(why)


def _hash_name(mechanism: str) -> str:
    try:
        return SCRAM_MECHANISMS[mechanism]
    except KeyError:
        raise UnsupportedSaslMechanismError(
            f"mechanism {mechanism!r:.40} is not a SCRAM mechanism", enabled=sorted(SCRAM_MECHANISMS)
        ) from None


def _hmac(key: bytes, msg: bytes, hash_name: str) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def _h(data: bytes, hash_name: str) -> bytes:
    return hashlib.new(hash_name, data).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def _salted_password(password: bytes, salt: bytes, iterations: int, hash_name: str) -> bytes:
    return hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)


def _check_username(username: str) -> str:
    if type(username) is not str or not 1 <= len(username) <= MAX_USERNAME_CHARS:
        raise UnacceptableCredentialError(f"a username is 1..{MAX_USERNAME_CHARS} characters")
    if any(ord(c) < 0x20 or c == "\x7f" for c in username):
        raise UnacceptableCredentialError("a username has no control characters")
    return username


def _password_bytes(password: str | bytes) -> bytes:
    raw = password.encode() if isinstance(password, str) else bytes(password)
    if not 1 <= len(raw) <= MAX_PASSWORD_BYTES:
        raise UnacceptableCredentialError(f"a password is 1..{MAX_PASSWORD_BYTES} bytes")
    return raw


# --- stored credentials ---------------------------------------------------------------------


@dataclass(frozen=True)
class ScramCredential:
    """What the cluster keeps for one user and mechanism (RFC 5802's StoredKey and ServerKey):
    enough to check a proof, not enough to produce one. repr() hides the keys."""

    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __post_init__(self) -> None:
        hash_name = _hash_name(self.mechanism)
        size = hashlib.new(hash_name).digest_size
        if type(self.iterations) is not int or not MIN_ITERATIONS <= self.iterations <= MAX_ITERATIONS:
            raise UnacceptableCredentialError(
                f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, got {self.iterations!r:.20}"
            )
        if not isinstance(self.salt, bytes) or not MIN_SALT_BYTES <= len(self.salt) <= MAX_SALT_BYTES:
            raise UnacceptableCredentialError(f"a salt is {MIN_SALT_BYTES}..{MAX_SALT_BYTES} bytes")
        for name in ("stored_key", "server_key"):
            value = getattr(self, name)
            if not isinstance(value, bytes) or len(value) != size:
                raise UnacceptableCredentialError(f"{name} must be {size} bytes for {self.mechanism}")

    def __repr__(self) -> str:
        return f"ScramCredential({self.mechanism!r}, iterations={self.iterations}, keys=<hidden>)"

    def check_password(self, password: bytes) -> bool:
        """True iff `password` is the one this credential was made from (one PBKDF2)."""
        hash_name = SCRAM_MECHANISMS[self.mechanism]
        salted = _salted_password(password, self.salt, self.iterations, hash_name)
        client_key = _hmac(salted, b"Client Key", hash_name)
        return hmac.compare_digest(_h(client_key, hash_name), self.stored_key)


def scram_credential(
    mechanism: str, password: str | bytes, *, salt: bytes | None = None, iterations: int = DEFAULT_ITERATIONS
) -> ScramCredential:
    """The stored form of `password` for `mechanism` (a fresh random salt unless given).
    Raises UnsupportedSaslMechanismError, UnacceptableCredentialError."""
    hash_name = _hash_name(mechanism)
    raw = _password_bytes(password)
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    if not isinstance(iterations, int) or not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise UnacceptableCredentialError(f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    if not isinstance(salt, bytes) or not MIN_SALT_BYTES <= len(salt) <= MAX_SALT_BYTES:
        raise UnacceptableCredentialError(f"a salt is {MIN_SALT_BYTES}..{MAX_SALT_BYTES} bytes")
    salted = _salted_password(raw, salt, iterations, hash_name)
    client_key = _hmac(salted, b"Client Key", hash_name)
    return ScramCredential(
        mechanism, salt, _h(client_key, hash_name), _hmac(salted, b"Server Key", hash_name), iterations
    )


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """The stored credential from what Kafka's AlterUserScramCredentials carries (the client
    ran PBKDF2; the salted password never reaches the log, only the keys derived from it).
    Raises UnsupportedSaslMechanismError, UnacceptableCredentialError."""
    hash_name = _hash_name(mechanism)
    if not isinstance(salted_password, bytes) or len(salted_password) != hashlib.new(hash_name).digest_size:
        raise UnacceptableCredentialError(f"a {mechanism} salted password is {hashlib.new(hash_name).digest_size} bytes")
    client_key = _hmac(salted_password, b"Client Key", hash_name)
    return ScramCredential(
        mechanism, salt, _h(client_key, hash_name), _hmac(salted_password, b"Server Key", hash_name), iterations
    )


def salted_password(mechanism: str, password: str | bytes, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: what a client sends to set a credential."""
    return _salted_password(_password_bytes(password), salt, iterations, _hash_name(mechanism))


# --- message syntax (RFC 5802 section 7) ----------------------------------------------------


def _saslname_encode(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _saslname_decode(value: str) -> str:
    out = []
    i = 0
    while i < len(value):
        c = value[i]
        if c == "=":
            code = value[i : i + 3]
            if code == "=3D":
                out.append("=")
            elif code == "=2C":
                out.append(",")
            else:
                raise _fail("authentication failed: malformed SCRAM username")
            i += 3
        elif c == ",":
            raise _fail("authentication failed: malformed SCRAM username")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _text(message: bytes, what: str) -> str:
    if not isinstance(message, (bytes, bytearray, memoryview)):
        raise _fail(f"authentication failed: {what} must be bytes")
    if len(message) > MAX_MESSAGE_BYTES:
        raise _fail(f"authentication failed: {what} over {MAX_MESSAGE_BYTES} bytes")
    try:
        return bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise _fail(f"authentication failed: {what} is not UTF-8") from None


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    """`a=value` pairs in order. Raises SaslAuthenticationFailedError."""
    out = []
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise _fail(f"authentication failed: malformed SCRAM {what}")
        out.append((part[0], part[2:]))
    return out


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise _fail(f"authentication failed: {what} is not base64") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _printable_nonce(value: str) -> bool:
    # RFC 5802: printable ASCII except ","
    return bool(value) and all(0x21 <= ord(c) <= 0x7E and c != "," for c in value)


def _new_nonce() -> str:
    return secrets.token_urlsafe(NONCE_BYTES)


# --- replay window --------------------------------------------------------------------------


class NonceCache:
    """The client nonces of the last `max_entries` first messages (or `window_ms`, whichever is
    shorter): a first message reusing one is a replay and is refused. One per listener.

    Pure: the caller passes `now_ms`. Concurrency: trio-thread only (not thread-safe)."""

    def __init__(self, *, max_entries: int = 100_000, window_ms: int = 15 * 60 * 1000) -> None:
        if max_entries < 1 or window_ms < 1:
            raise ValueError("max_entries and window_ms must be positive")
        self.max_entries = max_entries
        self.window_ms = window_ms
        self._seen: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def add(self, nonce: str, now_ms: int) -> bool:
        """Remember `nonce`; False if it was seen within the window (a replay)."""
        while self._seen:
            oldest, at = next(iter(self._seen.items()))
            if now_ms - at < self.window_ms and len(self._seen) < self.max_entries:
                break
            del self._seen[oldest]
        if nonce in self._seen:
            return False
        self._seen[nonce] = now_ms
        return True


# --- SCRAM client ---------------------------------------------------------------------------


class ScramClient:
    """The client side of one SCRAM exchange: `first_message()`, then
    `final_message(server_first)`, then `verify_server_final(server_final)`.

    Raises SaslAuthenticationFailedError for a malformed or lying server (a server-first whose
    nonce does not extend ours, too few iterations, a wrong server signature, an `e=` error)."""

    def __init__(self, mechanism: str, username: str, password: str | bytes, *, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._hash = _hash_name(mechanism)
        self.username = _check_username(username)
        self._password = _password_bytes(password)
        self._nonce = nonce if nonce is not None else _new_nonce()
        if not _printable_nonce(self._nonce):
            raise ValueError("a SCRAM nonce is printable ASCII without ','")
        self._gs2_header = "n,,"
        self._first_bare = f"n={_saslname_encode(username)},r={self._nonce}"
        self._state = "start"
        self._server_signature = b""

    def __repr__(self) -> str:
        return f"ScramClient({self.mechanism!r}, {self.username!r}, password=<hidden>, state={self._state!r})"

    @property
    def done(self) -> bool:
        return self._state == "done"

    def first_message(self) -> bytes:
        if self._state != "start":
            raise IllegalSaslStateError("the SCRAM client-first message was already sent")
        self._state = "first_sent"
        return (self._gs2_header + self._first_bare).encode()

    def final_message(self, server_first: bytes) -> bytes:
        if self._state != "first_sent":
            raise IllegalSaslStateError("a SCRAM server-first message was not expected now")
        self._state = "failed"
        text = _text(server_first, "server-first message")
        attrs = dict(_attributes(text, "server-first message")[:3])
        if "e" in attrs:
            raise _fail()
        nonce, salt_b64, iterations_text = attrs.get("r"), attrs.get("s"), attrs.get("i")
        if nonce is None or salt_b64 is None or iterations_text is None:
            raise _fail("authentication failed: malformed SCRAM server-first message")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce) or not _printable_nonce(nonce):
            raise _fail("authentication failed: the server's nonce does not extend ours")
        if not iterations_text.isdigit() or not MIN_ITERATIONS <= int(iterations_text) <= MAX_ITERATIONS:
            raise _fail(f"authentication failed: the server asks for {iterations_text[:12]!r} iterations")
        salt = _b64decode(salt_b64, "salt")
        salted = _salted_password(self._password, salt, int(iterations_text), self._hash)
        client_key = _hmac(salted, b"Client Key", self._hash)
        stored_key = _h(client_key, self._hash)
        without_proof = f"c={_b64(self._gs2_header.encode())},r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        proof = _xor(client_key, _hmac(stored_key, auth_message, self._hash))
        self._server_signature = _hmac(_hmac(salted, b"Server Key", self._hash), auth_message, self._hash)
        self._state = "final_sent"
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        """Check the server's signature (it proves the server holds our credential)."""
        if self._state != "final_sent":
            raise IllegalSaslStateError("a SCRAM server-final message was not expected now")
        self._state = "failed"
        text = _text(server_final, "server-final message")
        attrs = dict(_attributes(text, "server-final message")[:1])
        if "v" not in attrs:
            raise _fail()
        if not hmac.compare_digest(_b64decode(attrs["v"], "server signature"), self._server_signature):
            raise _fail("authentication failed: the server's signature is wrong (not our cluster?)")
        self._state = "done"


# --- SCRAM server ---------------------------------------------------------------------------

CredentialLookup = Callable[[str, str], "ScramCredential | None"]  # (username, mechanism)

_DECOY_KEY: Final = secrets.token_bytes(32)  # per process: decoy salts for unknown users


class ScramServer:
    """The server side of one SCRAM exchange. `step(client_first)` returns the server-first
    message; `step(client_final)` returns the server-final message and sets `principal`.

    `lookup(username, mechanism)` returns the stored credential or None; it is called once, at
    the first message (a user removed later is the listener's business: it re-checks). `now_ms`
    feeds the nonce cache. Raises SaslAuthenticationFailedError (then the exchange is over)."""

    def __init__(
        self,
        mechanism: str,
        lookup: CredentialLookup,
        *,
        nonces: NonceCache | None = None,
        now_ms: int = 0,
        server_nonce: str | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._hash = _hash_name(mechanism)
        self._lookup = lookup
        self._nonces = nonces
        self._now_ms = now_ms
        self._server_nonce = server_nonce if server_nonce is not None else _new_nonce()
        self._state = "start"
        self.username: str | None = None
        self.principal: str | None = None
        self._credential: ScramCredential | None = None
        self._first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2_header = ""

    def __repr__(self) -> str:
        return f"ScramServer({self.mechanism!r}, user={self.username!r}, state={self._state!r})"

    @property
    def done(self) -> bool:
        return self._state == "done"

    def step(self, message: bytes) -> bytes:
        if self._state == "start":
            return self._first(message)
        if self._state == "first_answered":
            return self._final(message)
        raise IllegalSaslStateError(f"the SCRAM exchange is {self._state}: no more messages")

    def _first(self, message: bytes) -> bytes:
        self._state = "failed"
        text = _text(message, "client-first message")
        # gs2-header: "n,," or "y,," (no channel binding), optionally with "a=authzid"
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise _fail("authentication failed: SCRAM channel binding is not supported")
        authzid = parts[1]
        if authzid and not authzid.startswith("a="):
            raise _fail("authentication failed: malformed SCRAM gs2 header")
        self._gs2_header = f"{parts[0]},{authzid},"
        self._first_bare = parts[2]
        attrs = _attributes(self._first_bare, "client-first message")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise _fail("authentication failed: malformed SCRAM client-first message")
        username = _saslname_decode(attrs[0][1])
        if not 1 <= len(username) <= MAX_USERNAME_CHARS:
            raise _fail()
        if authzid and _saslname_decode(authzid[2:]) != username:
            raise _fail("authentication failed: SCRAM authorization id differs from the user")
        client_nonce = attrs[1][1]
        if not _printable_nonce(client_nonce) or len(client_nonce) > 256:
            raise _fail("authentication failed: malformed SCRAM nonce")
        if self._nonces is not None and not self._nonces.add(client_nonce, self._now_ms):
            raise _fail("authentication failed: SCRAM nonce replayed")
        # RFC 5802: "m" is a mandatory extension we do not know, so the exchange fails; other
        # one-letter extensions are ignored. (Kafka's `tokenauth=true` is not `a=value` syntax
        # and fails above: delegation tokens are not supported.)
        if any(key == "m" for key, _ in attrs[2:]):
            raise _fail("authentication failed: unsupported mandatory SCRAM extension")
        self.username = username
        credential = self._lookup(username, self.mechanism)
        if credential is not None and credential.mechanism != self.mechanism:
            credential = None
        self._credential = credential
        if credential is not None:
            salt, iterations = credential.salt, credential.iterations
        else:  # a decoy: stable per user, so probing does not reveal who exists
            salt = _hmac(_DECOY_KEY, f"{self.mechanism}\0{username}".encode(), "sha256")[:SALT_BYTES]
            iterations = DEFAULT_ITERATIONS
        self._nonce = client_nonce + self._server_nonce
        self._server_first = f"r={self._nonce},s={_b64(salt)},i={iterations}"
        self._state = "first_answered"
        return self._server_first.encode()

    def _final(self, message: bytes) -> bytes:
        self._state = "failed"
        text = _text(message, "client-final message")
        attrs = _attributes(text, "client-final message")
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            raise _fail("authentication failed: malformed SCRAM client-final message")
        if _b64decode(attrs[0][1], "channel binding") != self._gs2_header.encode():
            raise _fail("authentication failed: SCRAM channel binding differs from the first message")
        # The nonce is this exchange's; librdkafka sends its client nonce again in front of it
        # (client nonce + the server's whole nonce), which Kafka accepts (its ScramSaslServer
        # checks `endsWith`): so do we. Either way it ends with this exchange's fresh server
        # nonce, and the proof covers the message exactly as sent.
        final_nonce = attrs[1][1]
        client_nonce = self._nonce[: len(self._nonce) - len(self._server_nonce)]
        if final_nonce.startswith(client_nonce + client_nonce):
            final_nonce = final_nonce[len(client_nonce):]
        if not hmac.compare_digest(final_nonce.encode(), self._nonce.encode()):
            raise _fail("authentication failed: SCRAM nonce does not match this exchange")
        proof = _b64decode(attrs[-1][1], "proof")
        credential = self._credential
        if credential is None or len(proof) != len(credential.stored_key):
            raise _fail()
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        client_signature = _hmac(credential.stored_key, auth_message, self._hash)
        client_key = _xor(proof, client_signature)
        if not hmac.compare_digest(_h(client_key, self._hash), credential.stored_key):
            raise _fail()
        server_signature = _hmac(credential.server_key, auth_message, self._hash)
        self._state = "done"
        assert self.username is not None
        self.principal = principal_of(self.username)
        return f"v={_b64(server_signature)}".encode()


# --- PLAIN ----------------------------------------------------------------------------------


def plain_message(username: str, password: str | bytes) -> bytes:
    """RFC 4616's one message: NUL username NUL password (no authorization id)."""
    _check_username(username)
    return b"\0" + username.encode() + b"\0" + _password_bytes(password)


class PlainClient:
    """PLAIN's client side: one message, nothing to verify (only ever over TLS)."""

    mechanism = "PLAIN"

    def __init__(self, username: str, password: str | bytes) -> None:
        self.username = _check_username(username)
        self._password = _password_bytes(password)
        self._sent = False

    def __repr__(self) -> str:
        return f"PlainClient({self.username!r}, password=<hidden>)"

    @property
    def done(self) -> bool:
        return self._sent

    def first_message(self) -> bytes:
        if self._sent:
            raise IllegalSaslStateError("the PLAIN message was already sent")
        self._sent = True
        return plain_message(self.username, self._password)


class PlainServer:
    """PLAIN's server side, checked against the user's stored SCRAM credential (SHA-512 if it
    has one, else SHA-256). `step(message)` returns b"" and sets `principal`. The listener
    offers PLAIN only on TLS connections."""

    mechanism = "PLAIN"

    def __init__(self, lookup: CredentialLookup) -> None:
        self._lookup = lookup
        self._state = "start"
        self.username: str | None = None
        self.principal: str | None = None

    def __repr__(self) -> str:
        return f"PlainServer(user={self.username!r}, state={self._state!r})"

    @property
    def done(self) -> bool:
        return self._state == "done"

    def step(self, message: bytes) -> bytes:
        if self._state != "start":
            raise IllegalSaslStateError(f"the PLAIN exchange is {self._state}: no more messages")
        self._state = "failed"
        if not isinstance(message, (bytes, bytearray, memoryview)) or len(message) > MAX_MESSAGE_BYTES:
            raise _fail("authentication failed: malformed PLAIN message")
        parts = bytes(message).split(b"\0")
        if len(parts) != 3 or not parts[1] or not parts[2]:
            raise _fail("authentication failed: malformed PLAIN message")
        try:
            authzid, username = parts[0].decode(), parts[1].decode()
        except UnicodeDecodeError:
            raise _fail("authentication failed: malformed PLAIN message") from None
        if authzid and authzid != username:
            raise _fail("authentication failed: PLAIN authorization id differs from the user")
        if not 1 <= len(username) <= MAX_USERNAME_CHARS or len(parts[2]) > MAX_PASSWORD_BYTES:
            raise _fail()
        self.username = username
        credential = None
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            credential = self._lookup(username, mechanism)
            if credential is not None:
                break
        if credential is None:
            # Same work as a known user, so timing does not tell who exists.
            scram_credential("SCRAM-SHA-512", parts[2], salt=b"\0" * SALT_BYTES)
            raise _fail()
        if not credential.check_password(parts[2]):
            raise _fail()
        self._state = "done"
        self.principal = principal_of(username)
        return b""


def new_server(
    mechanism: str,
    lookup: CredentialLookup,
    *,
    nonces: NonceCache | None = None,
    now_ms: int = 0,
    enabled: tuple[str, ...] = MECHANISMS,
) -> ScramServer | PlainServer:
    """The server exchange for `mechanism`, if it is in `enabled`.
    Raises UnsupportedSaslMechanismError (with `enabled`)."""
    if mechanism not in enabled:
        raise UnsupportedSaslMechanismError(
            f"mechanism {mechanism!r:.40} is not enabled here", enabled=list(enabled)
        )
    if mechanism == "PLAIN":
        return PlainServer(lookup)
    return ScramServer(mechanism, lookup, nonces=nonces, now_ms=now_ms)
