"""Topic configs: DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44).

Names are Kafka's (`retention.ms`, `cleanup.policy`, `segment.bytes`, `max.message.bytes`,
...: metadata.topic_config.KAFKA_NAMES) in answers; requests may use Kafka's or ours.
DescribeConfigs returns every key with its value, whether it is the default, and its source
(DYNAMIC_TOPIC_CONFIG for a value set on the topic, DEFAULT_CONFIG otherwise), type and
documentation; answered from the node's image by the native `describe_configs` code. Broker
resources answer with the node's own settings under Kafka's names, read-only
(broker_configs.py); AlterConfigs and IncrementalAlterConfigs of a broker are refused with
INVALID_REQUEST (`BROKER_READ_ONLY`).

AlterConfigs replaces a topic's whole set (keys it does not list go back to their defaults,
as in Kafka); IncrementalAlterConfigs SETs and DELETEs keys, and APPENDs to or SUBTRACTs from
a list-type key (`cleanup.policy`) the comma-separated values given, starting from the key's
current value (its default when the topic has none), as Kafka does; APPEND / SUBTRACT of a
key that is not a list is INVALID_CONFIG, as in Kafka. Both run the native `alter_configs` (forwarded to the controller).
`validate_only` checks the keys and values and changes nothing.
"""

from __future__ import annotations

from typing import Any, Final

from kafka.protocol.admin.configs import (
    AlterConfigsResponse,
    DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
)

from metadata.topic_config import KAFKA_NAMES, TOPIC_CONFIGS, canonical_key, normalize_configs
from raftlog.base.acl import CLUSTER_NAME, Operation, ResourceType
from raftlog.base.errors import InvalidConfigError, InvalidRequestError
from raftlog.node.kafka import errors
from raftlog.node.kafka.broker_configs import broker_entries
from raftlog.node.kafka.context import Call, KafkaContext, Later, Reply

__all__ = ["HANDLERS"]

DESCRIBE_CONFIGS_KEY: Final = 32
ALTER_CONFIGS_KEY: Final = 33
INCREMENTAL_ALTER_CONFIGS_KEY: Final = 44
TOPIC: Final = 2
BROKER: Final = 4
SOURCE_DYNAMIC_TOPIC: Final = 1
SOURCE_DEFAULT: Final = 5
TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_LIST = 2, 3, 5, 7
_TYPES: Final = {"int": TYPE_INT, "long": TYPE_LONG, "list": TYPE_LIST, "enum": TYPE_STRING}
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
BROKER_READ_ONLY: Final = ("broker configs are read-only in raftlog for now: set them in the node's "
                           "config file or RAFTLOG_* environment and restart the node")


def _not_alterable(resource_type: int) -> str:
    return BROKER_READ_ONLY if resource_type == BROKER else "only topic configs can be altered"


def _broker_result(ctx: KafkaContext, res: Any) -> Any:
    R = DescribeConfigsResponse
    Entry = R.DescribeConfigsResult.DescribeConfigsResourceResult
    code, message, entries = errors.NONE, None, []
    if not ctx.access().allowed(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):  # Kafka's rule
        code, message = errors.CLUSTER_AUTHORIZATION_FAILED, "not authorized to describe broker configs"
    elif res.resource_name == "":
        pass  # the cluster-wide dynamic defaults, as Kafka answers "": raftlog has none yet
    elif ctx.node_config is None or res.resource_name != str(ctx.node_id):
        code = errors.INVALID_REQUEST
        message = f"Unexpected broker id, expected {ctx.node_id} or empty string, but received {res.resource_name}"
    else:
        keys = None if res.configuration_keys is None else set(res.configuration_keys)
        entries = [Entry(**e, synonyms=[]) for e in broker_entries(ctx.node_config, keys)]
    return R.DescribeConfigsResult(error_code=code, error_message=message, resource_type=res.resource_type,
                                   resource_name=res.resource_name, configs=entries)


async def handle_describe_configs(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = DescribeConfigsResponse
    Entry = R.DescribeConfigsResult.DescribeConfigsResourceResult
    results = []
    for res in request.resources:
        if res.resource_type == BROKER:
            results.append(_broker_result(ctx, res))
            continue
        if res.resource_type != TOPIC:
            results.append(R.DescribeConfigsResult(
                error_code=errors.INVALID_REQUEST, error_message="only topic and broker resources",
                resource_type=res.resource_type, resource_name=res.resource_name, configs=[]))
            continue
        try:
            described = await ctx.call("describe_configs", {"name": res.resource_name})
        except Exception as exc:  # noqa: BLE001 - this resource's answer
            code, message = errors.kafka_error(exc)
            results.append(R.DescribeConfigsResult(
                error_code=code, error_message=message, resource_type=res.resource_type,
                resource_name=res.resource_name, configs=[]))
            continue
        assert described is not None
        wanted = None if res.configuration_keys is None else {canonical_key(k) for k in res.configuration_keys}
        entries = []
        for e in described["configs"]:
            if wanted is not None and e["name"] not in wanted:
                continue
            entries.append(Entry(
                name=KAFKA_NAMES.get(e["name"], e["name"]), value=e["value"], read_only=False,
                is_default=e["is_default"],
                config_source=SOURCE_DEFAULT if e["is_default"] else SOURCE_DYNAMIC_TOPIC,
                is_sensitive=False, synonyms=[], config_type=_TYPES.get(e["type"], TYPE_STRING),
                documentation=e["doc"],
            ))  # fmt: skip
        results.append(R.DescribeConfigsResult(
            error_code=errors.NONE, error_message=None, resource_type=res.resource_type,
            resource_name=res.resource_name, configs=entries))
    return R(throttle_time_ms=0, results=results)


async def handle_alter_configs(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = AlterConfigsResponse

    async def answer() -> Reply:
        out = []
        for res in request.resources:
            if res.resource_type != TOPIC:
                code, message = errors.INVALID_REQUEST, _not_alterable(res.resource_type)
            else:
                new = {c.name: c.value for c in res.configs if c.value is not None}
                code, message = await _replace(ctx, res.resource_name, new, request.validate_only)
            out.append(R.AlterConfigsResourceResponse(
                error_code=code, error_message=message, resource_type=res.resource_type,
                resource_name=res.resource_name))
        return R(throttle_time_ms=0, responses=out)

    return Later(answer)


async def _replace(ctx: KafkaContext, name: str, new: dict[str, str], validate_only: bool) -> tuple[int, str | None]:
    try:
        described = await ctx.call("describe_configs", {"name": name})
        assert described is not None
        normalized = normalize_configs(new)
        current = {e["name"] for e in described["configs"] if not e["is_default"]}
        delete = sorted(current - set(normalized))
        if not validate_only:
            await ctx.call("alter_configs", {"name": name, "set": normalized, "delete": delete})
        return errors.NONE, None
    except Exception as exc:  # noqa: BLE001 - this resource's answer
        return errors.kafka_error(exc)


def _list_change(operation: int, name: str, current: str, values: str | None) -> str:
    """The new value of list-type key `name` after APPEND / SUBTRACT of `values` (Kafka's rule:
    APPEND adds the values not yet listed, in order; SUBTRACT removes the listed ones)."""
    spec = TOPIC_CONFIGS.get(canonical_key(name))
    if spec is None or spec.type != "list":
        verb = "append" if operation == OP_APPEND else "subtract"
        raise InvalidConfigError(f"Config value {verb} is not allowed for config key: {name}")
    old = [v.strip() for v in current.split(",") if v.strip()]
    given = [v.strip() for v in (values or "").split(",") if v.strip()]
    if operation == OP_APPEND:
        return ",".join(old + [v for i, v in enumerate(given) if v not in old and v not in given[:i]])
    return ",".join(v for v in old if v not in given)


async def handle_incremental_alter_configs(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = IncrementalAlterConfigsResponse

    async def one(res: Any) -> tuple[int, str | None]:
        if res.resource_type != TOPIC:
            return errors.INVALID_REQUEST, _not_alterable(res.resource_type)
        set_: dict[str, str] = {}
        delete: list[str] = []
        try:
            current: dict[str, str] | None = None
            for c in res.configs:
                if c.config_operation == OP_SET:
                    if c.value is None:
                        raise InvalidConfigError(f"SET {c.name} needs a value")
                    set_[c.name] = c.value
                elif c.config_operation == OP_DELETE:
                    delete.append(canonical_key(c.name))
                elif c.config_operation in (OP_APPEND, OP_SUBTRACT):
                    if current is None:
                        described = await ctx.call("describe_configs", {"name": res.resource_name})
                        assert described is not None
                        current = {e["name"]: str(e["value"]) for e in described["configs"]}
                    key = canonical_key(c.name)
                    set_[c.name] = _list_change(c.config_operation, c.name, current.get(key, ""), c.value)
                else:
                    raise InvalidConfigError(f"operation {c.config_operation} on {c.name} is not supported "
                                             "(SET, DELETE, APPEND and SUBTRACT are)")
            normalized = normalize_configs(set_)
            if set(normalized) & set(delete):
                raise InvalidRequestError("a key is both set and deleted")
            if not request.validate_only:
                await ctx.call("alter_configs", {"name": res.resource_name, "set": normalized,
                                                 "delete": delete})
            return errors.NONE, None
        except Exception as exc:  # noqa: BLE001 - this resource's answer
            return errors.kafka_error(exc)

    async def answer() -> Reply:
        out = []
        for res in request.resources:
            code, message = await one(res)
            out.append(R.AlterConfigsResourceResponse(
                error_code=code, error_message=message, resource_type=res.resource_type,
                resource_name=res.resource_name))
        return R(throttle_time_ms=0, responses=out)

    return Later(answer)


HANDLERS: Final = {
    DESCRIBE_CONFIGS_KEY: handle_describe_configs,
    ALTER_CONFIGS_KEY: handle_alter_configs,
    INCREMENTAL_ALTER_CONFIGS_KEY: handle_incremental_alter_configs,
}
