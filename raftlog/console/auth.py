"""Who the console talks to the cluster as: the login step, sessions, CSRF tokens.

The console holds no rights of its own. On a secure cluster every visitor logs in with their
own SCRAM username and password; the console hands those to the client it opens for that
session, so the cluster checks that user's ACLs on every request. On a plaintext cluster
(`security.protocol` PLAINTEXT, the default) there is nothing to log in with: the login step
is a no-op and every visitor shares one anonymous client.

The interface with the client (issue 16 makes the client speak TLS and SASL):

    security = cluster_security(read_properties(path))   # --command-config, Kafka keys
    config = client_config(security, Credentials(user, password))
        # {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        #  "sasl.username": user, "sasl.password": password, "ssl.ca.location": "/..ca.pem"}
    client_options(config) -> keyword arguments for raftlog.client's Admin/GroupAdmin/Producer:
        {} on plaintext; {"security": config} otherwise (THE one place to change when the
        client's option lands under another name)

Sessions: the browser holds a signed cookie (Starlette's SessionMiddleware) with only a random
session id; the credentials stay in this process's memory (`SessionStore`, bounded: oldest
sessions go first; idle and absolute expiry), never in the cookie, a log line or a page.
Every form that changes state carries the session's CSRF token, checked with
`hmac.compare_digest` (`check_csrf`); the cookie is SameSite=Strict and HttpOnly as well.
"""

from __future__ import annotations

import hmac
import secrets
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from raftlog.console.errors import BadInputError

__all__ = [
    "Credentials",
    "Session",
    "SessionStore",
    "read_properties",
    "cluster_security",
    "login_required",
    "client_config",
    "client_options",
    "check_csrf",
    "SECURITY_KEYS",
]

SECURITY_KEYS: Final = ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
                        "ssl.ca.location")
PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS: Final = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
MAX_PROPERTIES_BYTES: Final = 64 << 10
MAX_USERNAME_CHARS: Final = 256
MAX_PASSWORD_CHARS: Final = 1024
DEFAULT_MAX_SESSIONS: Final = 1000
DEFAULT_IDLE_MS: Final = 30 * 60 * 1000
DEFAULT_MAX_AGE_MS: Final = 12 * 3600 * 1000


@dataclass(frozen=True)
class Credentials:
    """One user's SCRAM (or PLAIN) credentials. The password never shows in a repr."""

    username: str
    password: str = field(repr=False)

    @classmethod
    def from_form(cls, username: str, password: str) -> "Credentials":
        username = username.strip()
        if not username or len(username) > MAX_USERNAME_CHARS:
            raise BadInputError("username", f"give 1..{MAX_USERNAME_CHARS} characters")
        if not password or len(password) > MAX_PASSWORD_CHARS:
            raise BadInputError("password", f"give 1..{MAX_PASSWORD_CHARS} characters")
        return cls(username, password)


def read_properties(path: str | Path) -> dict[str, str]:
    """A Kafka/librdkafka properties file: `key=value` (or `key: value`) lines, `#`/`!`
    comments. Raises BadInputError (field "command-config") when unreadable or malformed."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise BadInputError("command-config", f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_PROPERTIES_BYTES:
        raise BadInputError("command-config", f"{path} is larger than {MAX_PROPERTIES_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInputError("command-config", f"{path} is not UTF-8 text") from None
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        eq = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if eq < 0:
            raise BadInputError("command-config", f"{path} line {number}: expected key=value")
        out[line[:eq].strip()] = line[eq + 1 :].strip()
    return out


def cluster_security(properties: Mapping[str, str]) -> dict[str, str]:
    """The cluster-wide part of a command config: protocol, mechanism, CA. A username or
    password in the file is dropped (the console logs in as its visitors, never as the
    file's user). Raises BadInputError on an unknown protocol or mechanism."""
    protocol = properties.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise BadInputError("command-config", f"security.protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    out = {"security.protocol": protocol}
    if protocol.startswith("SASL_"):
        mechanism = properties.get("sasl.mechanism", "SCRAM-SHA-512").upper()
        if mechanism not in MECHANISMS:
            raise BadInputError("command-config", f"sasl.mechanism {mechanism!r} is not one of {', '.join(MECHANISMS)}")
        out["sasl.mechanism"] = mechanism
    if properties.get("ssl.ca.location"):
        out["ssl.ca.location"] = properties["ssl.ca.location"]
    return out


def login_required(security: Mapping[str, str]) -> bool:
    """True when the cluster wants SASL credentials (the console then shows a login form)."""
    return security.get("security.protocol", "PLAINTEXT").startswith("SASL_")


def client_config(security: Mapping[str, str], credentials: Credentials | None) -> dict[str, str]:
    """The Kafka-keyed settings for one user's client: the cluster's protocol, mechanism and
    CA, plus the user's name and password when the cluster wants SASL."""
    config = dict(security)
    if login_required(security):
        if credentials is None:
            raise BadInputError("username", "this cluster needs a login")
        config["sasl.username"] = credentials.username
        config["sasl.password"] = credentials.password
    return config


def client_options(config: Mapping[str, str]) -> dict[str, Any]:
    """Keyword arguments that make a raftlog client use `config` (see the module docstring):
    nothing on plaintext, so today's client works unchanged."""
    if config.get("security.protocol", "PLAINTEXT") == "PLAINTEXT":
        return {}
    return {"security": dict(config)}


def config_key(config: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """A hashable identity of a client config (one client pool per distinct user)."""
    return tuple(sorted(config.items()))


def check_csrf(expected: str, given: str | None) -> bool:
    return bool(given) and hmac.compare_digest(expected.encode(), str(given).encode())


@dataclass
class Session:
    sid: str
    credentials: Credentials | None
    csrf_token: str
    created_ms: int
    seen_ms: int


class SessionStore:
    """Sessions by id, in memory, bounded (the least recently seen go first); a session
    expires after `idle_ms` without a request or `max_age_ms` after login. Pure: `now_ms`
    is passed in. Not thread-safe (the console's trio thread owns it)."""

    def __init__(self, *, max_sessions: int = DEFAULT_MAX_SESSIONS, idle_ms: int = DEFAULT_IDLE_MS,
                 max_age_ms: int = DEFAULT_MAX_AGE_MS) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be >= 1")
        self.max_sessions = max_sessions
        self.idle_ms = idle_ms
        self.max_age_ms = max_age_ms
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, credentials: Credentials | None, now_ms: int) -> Session:
        while len(self._sessions) >= self.max_sessions:
            self._sessions.popitem(last=False)
        s = Session(secrets.token_urlsafe(32), credentials, secrets.token_urlsafe(32), now_ms, now_ms)
        self._sessions[s.sid] = s
        return s

    def get(self, sid: Any, now_ms: int) -> Session | None:
        """The live session `sid` (and marks it seen), or None (unknown or expired)."""
        if not isinstance(sid, str):
            return None
        s = self._sessions.get(sid)
        if s is None:
            return None
        if now_ms - s.seen_ms > self.idle_ms or now_ms - s.created_ms > self.max_age_ms:
            del self._sessions[sid]
            return None
        s.seen_ms = now_ms
        self._sessions.move_to_end(sid)
        return s

    def drop(self, sid: Any) -> None:
        if isinstance(sid, str):
            self._sessions.pop(sid, None)
