"""DescribeClientQuotas (key 48) and AlterClientQuotas (key 49), versions 0-1 (issue 41): thin
adapters onto the metadata port's `describe_client_quotas` (answered from the node's metadata
image) and `alter_client_quotas` (ClientQuota records written by the active controller;
metadata/quota_ops.py has the rules). ACLs: Kafka's, DESCRIBE_CONFIGS / ALTER_CONFIGS on the
cluster, at the port's guard (raftlog/node/guarded_metadata.py). Entity types "user" and "client-id"; a null name is the
default entity (`kafka-configs --entity-default`). Enforcement: listener.py (producer_byte_rate,
request_percentage) and fetch.py (consumer_byte_rate); docs/quotas-and-fetch-sessions.md."""

from __future__ import annotations

from typing import Any, Final

from kafka.protocol.admin.client_quotas import AlterClientQuotasResponse, DescribeClientQuotasResponse

from metadata.port import QuotaAlteration, QuotaFilter, QuotaOp
from raftlog.node.kafka import errors
from raftlog.node.kafka.context import Call, KafkaContext, Later, Reply

__all__ = ["HANDLERS"]

DESCRIBE_CLIENT_QUOTAS_KEY: Final = 48
ALTER_CLIENT_QUOTAS_KEY: Final = 49


def _entity_obj(entity: Any) -> dict[str, str | None]:
    return {e.entity_type: e.entity_name for e in entity or ()}


async def handle_describe_client_quotas(ctx: KafkaContext, call: Call) -> Reply:
    R = DescribeClientQuotasResponse
    request = call.request
    filters = [QuotaFilter(c.entity_type, c.match_type, c.match) for c in request.components or ()]

    async def answer() -> Reply:
        try:
            found = await ctx.admin().describe_client_quotas(filters, strict=bool(request.strict))
        except Exception as exc:  # noqa: BLE001 - the whole request's answer
            code, message = errors.kafka_error(exc)
            return R(throttle_time_ms=0, error_code=code, error_message=message, entries=None)
        entries = [R.EntryData(
            entity=[R.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in e.entity.items()],
            values=[R.EntryData.ValueData(key=k, value=float(v)) for k, v in e.values.items()],
        ) for e in found]  # fmt: skip
        return R(throttle_time_ms=0, error_code=errors.NONE, error_message=None, entries=entries)

    return Later(answer)


async def handle_alter_client_quotas(ctx: KafkaContext, call: Call) -> Reply:
    R = AlterClientQuotasResponse
    request = call.request
    entries = [QuotaAlteration(_entity_obj(e.entity), [QuotaOp(o.key, o.value, bool(o.remove)) for o in e.ops or ()])
               for e in request.entries or ()]

    def entity(obj: Any) -> list[Any]:
        return [R.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in (obj or {}).items()]

    async def answer() -> Reply:
        try:
            altered = await ctx.admin().alter_client_quotas(entries, validate_only=bool(request.validate_only))
        except Exception as exc:  # noqa: BLE001 - every entry's answer
            code, message = errors.kafka_error(exc)
            return R(throttle_time_ms=0, entries=[R.EntryData(error_code=code, error_message=message,
                                                              entity=entity(e.entity)) for e in entries])
        out = []
        for r in altered:
            code, message = (errors.NONE, None) if r.error is None else errors.kafka_error(r.error)
            out.append(R.EntryData(error_code=code, error_message=message, entity=entity(r.entity)))
        return R(throttle_time_ms=0, entries=out)

    return Later(answer)


HANDLERS: Final = {
    DESCRIBE_CLIENT_QUOTAS_KEY: handle_describe_client_quotas,
    ALTER_CLIENT_QUOTAS_KEY: handle_alter_client_quotas,
}
