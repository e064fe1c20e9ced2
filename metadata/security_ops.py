"""The metadata service's ACL and SCRAM-credential ops (PROTOCOL.md "Authorization"), kept out of
service.py: request fields in, a controller decision or an answer from the image out (pure).

    ADMIN_SECURITY_OPS   create_acls, delete_acls, alter_user_scram_credentials: decided by the
                         active controller (forwarded there like the other admin ops)
    DESCRIBE_SECURITY_OPS describe_acls, describe_user_scram_credentials: answered by any node
                         from its own image

    result = decide(ctl, op, fields, now_ms=...)   # ControllerResult; its response is the answer
    answer = describe(image, op, fields)

Bootstrap credentials (`raftlog cluster up --secure`): a JSON-lines file of salted keys
(`write_bootstrap_credentials` / `read_bootstrap_credentials`), seeded into an empty credential
store by the controller (Controller.ensure_bootstrap_credentials). Never a password.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping
from typing import Any, Final

from metadata.controller import Controller, ControllerResult
from metadata.image import MetadataImage
from metadata.records import UserScramCredential
from raftlog.base.acl import AclFilter
from raftlog.base.errors import ConfigError, InvalidRequestError, RaftlogError, ResourceNotFoundError

__all__ = [
    "ADMIN_SECURITY_OPS",
    "DESCRIBE_SECURITY_OPS",
    "decide",
    "describe",
    "read_bootstrap_credentials",
    "write_bootstrap_credentials",
]

ADMIN_SECURITY_OPS: Final = frozenset({"create_acls", "delete_acls", "alter_user_scram_credentials"})
DESCRIBE_SECURITY_OPS: Final = frozenset({"describe_acls", "describe_user_scram_credentials"})
MAX_BOOTSTRAP_BYTES: Final = 1 << 20


def _list(fields: Mapping[str, Any], name: str, *, default: Any = None) -> Any:
    value = fields.get(name, default)
    if not isinstance(value, list):
        raise InvalidRequestError(f"field {name!r} must be a list", field=name)
    return value


def decide(ctl: Controller, op: str, fields: Mapping[str, Any], *, now_ms: int) -> ControllerResult[Any]:
    """The controller's decision for an admin security op; `response` is the ok answer."""
    if op == "create_acls":
        result = ctl.create_acls(_list(fields, "acls"), now_ms=now_ms)
        return ControllerResult(result.envelopes, {"results": result.response})
    if op == "delete_acls":
        result = ctl.delete_acls(_list(fields, "filters"), now_ms=now_ms)
        return ControllerResult(result.envelopes, {"results": result.response})
    if op == "alter_user_scram_credentials":
        result = ctl.alter_scram_credentials(
            _list(fields, "upsertions", default=[]), _list(fields, "deletions", default=[]), now_ms=now_ms
        )
        return ControllerResult(result.envelopes, {"results": result.response})
    raise InvalidRequestError(f"unknown security op {op!r:.40}", field="op")


def describe(image: MetadataImage, op: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    if op == "describe_acls":
        f = AclFilter.from_obj(fields.get("filter") or {})
        return {"acls": [b.to_obj() for _, b in image.acl_bindings() if f.matches(b)]}
    if op == "describe_user_scram_credentials":
        users = fields.get("users")
        if users is not None and (not isinstance(users, list) or not all(type(u) is str for u in users)):
            raise InvalidRequestError("users must be a list of names or null", field="users")
        return {"users": describe_scram_credentials(image, users)}
    raise InvalidRequestError(f"unknown security op {op!r:.40}", field="op")


def describe_scram_credentials(image: MetadataImage, users: list[str] | None) -> list[dict[str, Any]]:
    """Per user {"user", "credentials": [{"mechanism", "iterations"}]} or {"user", "error"}
    (RESOURCE_NOT_FOUND); every user with a credential when `users` is None."""
    out: list[dict[str, Any]] = []
    for name in image.scram_users() if users is None else users:
        creds = image.scram_credentials.get(name)
        if not creds:
            out.append({"user": name, "error": ResourceNotFoundError(f"user {name!r:.60} has no SCRAM credentials").to_wire()})
        else:
            out.append({"user": name, "credentials": [{"mechanism": m, "iterations": c.iterations}
                                                      for m, c in sorted(creds.items())]})
    return out


# --- bootstrap credentials file -----------------------------------------------------------------


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def write_bootstrap_credentials(path: str | os.PathLike[str], credentials: list[UserScramCredential]) -> None:
    """Write the file (0600: salted keys are not passwords, but they are not for everyone)."""
    lines = [
        json.dumps({"name": c.name, "mechanism": c.mechanism, "iterations": c.iterations, "salt": _b64(c.salt),
                    "stored_key": _b64(c.stored_key), "server_key": _b64(c.server_key)}, sort_keys=True)
        for c in credentials
    ]
    data = ("\n".join(lines) + "\n").encode()
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_bootstrap_credentials(path: str | os.PathLike[str]) -> tuple[UserScramCredential, ...]:
    """Raises ConfigError (unreadable, malformed line, invalid credential)."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = f.read(MAX_BOOTSTRAP_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{name}: cannot read bootstrap credentials: {exc.strerror}") from None
    if len(data) > MAX_BOOTSTRAP_BYTES:
        raise ConfigError(f"{name}: over {MAX_BOOTSTRAP_BYTES} bytes")
    out = []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            out.append(UserScramCredential(
                obj["name"], obj["mechanism"], base64.b64decode(obj["salt"], validate=True),
                base64.b64decode(obj["stored_key"], validate=True), base64.b64decode(obj["server_key"], validate=True),
                obj["iterations"],
            ))  # fmt: skip
        except (ValueError, KeyError, TypeError, binascii.Error, RaftlogError) as exc:
            raise ConfigError(f"{name}: line {number}: not a bootstrap credential ({type(exc).__name__})") from None
    return tuple(out)
