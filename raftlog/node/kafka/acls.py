"""ACLs and SCRAM users over Kafka's admin APIs: DescribeAcls (29), CreateAcls (30),
DeleteAcls (31), DescribeUserScramCredentials (50), AlterUserScramCredentials (51).

Each calls the metadata port (metadata/port.py) behind the one ACL guard (`ctx.admin()`,
raftlog/node/guarded_metadata.py), whose rule for each is the native op's of the same meaning
(PROTOCOL.md "Authorization": `describe_acls`, `create_acls`, `delete_acls`,
`describe_user_scram_credentials`, `alter_user_scram_credentials`: DESCRIBE or ALTER on the
cluster); the changes are decided by the active controller. Wire decode here: an ACL or
filter that is not one (an unknown code) is answered INVALID_REQUEST in its place. Kafka's wire numbers for resource types, pattern types, operations and
permissions are raftlog/base/acl.py's KAFKA_CODES (the ACL model reads them as they are);
SCRAM mechanisms are 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512 (Kafka's ScramMechanism).

As Kafka: a refused or malformed request answers every entry with the error (the request-
level error field where the response has one); CreateAcls answers per ACL; DeleteAcls per
filter with the ACLs it removed; an upsertion carries the salted password (never the
password) and only keys derived from it reach the log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from kafka.protocol.admin.acl import (
    CreateAclsResponse,
    DeleteAclsResponse,
    DescribeAclsResponse,
)
from kafka.protocol.admin.users import (
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsResponse,
)

from metadata.port import DeletedAcls, ScramDeletion, ScramUpsertion
from raftlog.base.acl import KAFKA_CODES, AclBinding, AclFilter, PatternType
from raftlog.base.errors import RaftlogError
from raftlog.node.kafka import errors
from raftlog.node.kafka.context import Call, KafkaContext, Later, Reply

__all__ = ["HANDLERS", "SCRAM_MECHANISM_CODES"]

DESCRIBE_ACLS_KEY: Final = 29
CREATE_ACLS_KEY: Final = 30
DELETE_ACLS_KEY: Final = 31
DESCRIBE_USER_SCRAM_CREDENTIALS_KEY: Final = 50
ALTER_USER_SCRAM_CREDENTIALS_KEY: Final = 51

SCRAM_MECHANISM_CODES: Final[Mapping[str, int]] = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_MECHANISM_OF_CODE: Final = {code: name for name, code in SCRAM_MECHANISM_CODES.items()}
_T = TypeVar("_T")


def _code(member: Any) -> int:
    return KAFKA_CODES[type(member)][member]


def _binding_codes(b: AclBinding) -> dict[str, Any]:
    return {"resource_type": _code(b.resource_type), "resource_name": b.resource_name,
            "pattern_type": _code(b.pattern_type), "principal": b.principal, "host": b.host,
            "operation": _code(b.operation), "permission_type": _code(b.permission)}


def _filter(entry: Any, version: int) -> dict[str, Any]:
    """A Kafka ACL filter as a plain filter map (absent: any; AclFilter.from_obj reads it)."""
    pattern = entry.pattern_type_filter if version >= 1 else _code(PatternType.LITERAL)
    out: dict[str, Any] = {"resource_type": entry.resource_type_filter, "pattern_type": pattern,
                           "operation": entry.operation, "permission": entry.permission_type}
    for key, value in (("resource_name", entry.resource_name_filter), ("principal", entry.principal_filter),
                       ("host", entry.host_filter)):
        if value is not None:
            out[key] = value
    return out


def _error(exc: BaseException) -> tuple[int, str]:
    return errors.kafka_error(exc)


def _item_code(error: RaftlogError | None) -> int:
    return errors.NONE if error is None else errors.kafka_error_code(error.code)


def _parse(parse: Callable[[Any], _T], entries: list[dict[str, Any]]) -> list[_T | RaftlogError]:
    """Each entry parsed, or the error that says why it is not one (answered in its place)."""
    out: list[_T | RaftlogError] = []
    for entry in entries:
        try:
            out.append(parse(entry))
        except RaftlogError as exc:
            out.append(exc)
    return out


# --- ACLs ---------------------------------------------------------------------------------------


async def handle_describe_acls(ctx: KafkaContext, call: Call) -> Reply:
    R = DescribeAclsResponse
    acl_filter = _filter(call.request, call.version)

    async def answer() -> Reply:
        try:
            bindings = await ctx.admin().describe_acls(AclFilter.from_obj(acl_filter))
        except Exception as exc:  # noqa: BLE001 - the request's answer
            code, message = _error(exc)
            return R(throttle_time_ms=0, error_code=code, error_message=message, resources=[])
        grouped: dict[tuple[int, str, int], list[Any]] = {}
        for b in bindings:
            c = _binding_codes(b)
            grouped.setdefault((c["resource_type"], c["resource_name"], c["pattern_type"]), []).append(
                R.DescribeAclsResource.AclDescription(principal=c["principal"], host=c["host"],
                                                      operation=c["operation"],
                                                      permission_type=c["permission_type"]))
        resources = [
            R.DescribeAclsResource(resource_type=rt, resource_name=name, pattern_type=pt, acls=acls)
            for (rt, name, pt), acls in sorted(grouped.items())
        ]  # fmt: skip
        return R(throttle_time_ms=0, error_code=errors.NONE, error_message=None, resources=resources)

    return Later(answer)


async def handle_create_acls(ctx: KafkaContext, call: Call) -> Reply:
    R = CreateAclsResponse
    creations = list(call.request.creations or [])
    acls = [
        {"resource_type": c.resource_type, "resource_name": c.resource_name,
         "pattern_type": c.resource_pattern_type if call.version >= 1 else _code(PatternType.LITERAL),
         "principal": c.principal, "host": c.host, "operation": c.operation, "permission": c.permission_type}
        for c in creations
    ]  # fmt: skip

    parsed = _parse(AclBinding.from_obj, acls)

    async def answer() -> Reply:
        try:
            answered = iter(await ctx.admin().create_acls([b for b in parsed if isinstance(b, AclBinding)]))
        except Exception as exc:  # noqa: BLE001 - every creation's answer
            code, message = _error(exc)
            return R(throttle_time_ms=0, results=[R.AclCreationResult(error_code=code, error_message=message)
                                                  for _ in creations])
        out = []
        for b in parsed:
            error = next(answered) if isinstance(b, AclBinding) else b
            out.append(R.AclCreationResult(error_code=_item_code(error),
                                           error_message=None if error is None else error.message))
        return R(throttle_time_ms=0, results=out)

    return Later(answer)


async def handle_delete_acls(ctx: KafkaContext, call: Call) -> Reply:
    R = DeleteAclsResponse
    M = R.DeleteAclsFilterResult.DeleteAclsMatchingAcl
    filters = [_filter(f, call.version) for f in call.request.filters or []]
    parsed = _parse(AclFilter.from_obj, filters)

    async def answer() -> Reply:
        try:
            answered = iter(await ctx.admin().delete_acls([f for f in parsed if isinstance(f, AclFilter)]))
        except Exception as exc:  # noqa: BLE001 - every filter's answer
            code, message = _error(exc)
            return R(throttle_time_ms=0, filter_results=[
                R.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=[]) for _ in filters])
        out = []
        for f in parsed:
            deleted = next(answered) if isinstance(f, AclFilter) else DeletedAcls(error=f)
            if deleted.error is not None:
                out.append(R.DeleteAclsFilterResult(error_code=_item_code(deleted.error),
                                                    error_message=deleted.error.message, matching_acls=[]))
                continue
            matching = [M(error_code=errors.NONE, error_message=None, **_binding_codes(b)) for b in deleted.acls]
            out.append(R.DeleteAclsFilterResult(error_code=errors.NONE, error_message=None, matching_acls=matching))
        return R(throttle_time_ms=0, filter_results=out)

    return Later(answer)


# --- SCRAM users --------------------------------------------------------------------------------


async def handle_describe_user_scram_credentials(ctx: KafkaContext, call: Call) -> Reply:
    R = DescribeUserScramCredentialsResponse
    users = call.request.users
    names = None if not users else [u.name for u in users]  # null or empty: every user

    async def answer() -> Reply:
        try:
            found = await ctx.admin().describe_scram_users(names)
        except Exception as exc:  # noqa: BLE001 - the request's answer
            code, message = _error(exc)
            return R(throttle_time_ms=0, error_code=code, error_message=message, results=[])
        out = []
        for u in found:
            if u.error is not None:
                out.append(R.DescribeUserScramCredentialsResult(
                    user=u.user, error_code=_item_code(u.error), error_message=u.error.message, credential_infos=[]))
                continue
            infos = [R.DescribeUserScramCredentialsResult.CredentialInfo(
                         mechanism=SCRAM_MECHANISM_CODES.get(c.mechanism, 0), iterations=c.iterations)
                     for c in u.credentials]  # fmt: skip
            out.append(R.DescribeUserScramCredentialsResult(user=u.user, error_code=errors.NONE,
                                                            error_message=None, credential_infos=infos))
        return R(throttle_time_ms=0, error_code=errors.NONE, error_message=None, results=out)

    return Later(answer)


async def handle_alter_user_scram_credentials(ctx: KafkaContext, call: Call) -> Reply:
    R = AlterUserScramCredentialsResponse
    request = call.request
    deletions = [ScramDeletion(d.name, _MECHANISM_OF_CODE.get(d.mechanism, f"UNKNOWN-{d.mechanism}"))
                 for d in request.deletions or []]
    upsertions = [
        ScramUpsertion(u.name, _MECHANISM_OF_CODE.get(u.mechanism, f"UNKNOWN-{u.mechanism}"), u.iterations,
                       bytes(u.salt or b""), bytes(u.salted_password or b""))
        for u in request.upsertions or []
    ]  # fmt: skip
    users = list(dict.fromkeys([d.name for d in deletions] + [u.name for u in upsertions]))

    async def answer() -> Reply:
        try:
            altered = await ctx.admin().alter_scram_users(upsertions, deletions)
        except Exception as exc:  # noqa: BLE001 - every user's answer
            code, message = _error(exc)
            return R(throttle_time_ms=0, results=[R.AlterUserScramCredentialsResult(
                user=u, error_code=code, error_message=message) for u in users])
        return R(throttle_time_ms=0, results=[R.AlterUserScramCredentialsResult(
            user=r.user, error_code=_item_code(r.error), error_message=None if r.error is None else r.error.message)
            for r in altered])  # fmt: skip

    return Later(answer)


HANDLERS: Final = {
    DESCRIBE_ACLS_KEY: handle_describe_acls,
    CREATE_ACLS_KEY: handle_create_acls,
    DELETE_ACLS_KEY: handle_delete_acls,
    DESCRIBE_USER_SCRAM_CREDENTIALS_KEY: handle_describe_user_scram_credentials,
    ALTER_USER_SCRAM_CREDENTIALS_KEY: handle_alter_user_scram_credentials,
}
