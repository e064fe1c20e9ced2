"""Topic configs: DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44).

Names are Kafka's (`retention.ms`, `cleanup.policy`, `segment.bytes`, `max.message.bytes`,
...: metadata.topic_config.KAFKA_NAMES) in answers; requests may use Kafka's or ours.
DescribeConfigs returns every key with its value, whether it is the default, and its source
(DYNAMIC_TOPIC_CONFIG for a value set on the topic, DEFAULT_CONFIG otherwise, except
DYNAMIC_DEFAULT_BROKER_CONFIG for min.insync.replicas as in Kafka 4), type and
documentation; answered from the node's image by the metadata port (metadata/port.py,
behind the guard of raftlog/node/guarded_metadata.py: DESCRIBE_CONFIGS on the topic, or on
the cluster for broker resources). Broker
resources answer with the node's own settings under Kafka's names (broker_configs.py), and
the cluster default (`""`) with the cluster-wide dynamic ones.

Groups (resource type 32, Kafka 4's group configs: metadata/group_config.py) answer every
group config, set (GROUP_CONFIG) or the broker's default (group_configs.py), from the image;
alterations run the port's `alter_group_configs` (the controller validates: an unknown name
or a bad value is INVALID_CONFIG naming the key, nothing stored); DESCRIBE_CONFIGS /
ALTER_CONFIGS on the group (the guard). An empty group name is INVALID_REQUEST.

AlterConfigs replaces a resource's whole set (keys it does not list go back to their
defaults, as in Kafka); IncrementalAlterConfigs SETs and DELETEs keys, and APPENDs to /
SUBTRACTs from a list config (a topic's `cleanup.policy`; on another config INVALID_CONFIG).
Topics run the port's `alter_topic_configs`, brokers (an id or `""`) `alter_broker_configs`: both
forwarded to the controller, recorded in the metadata log and applied without a restart. A
read-only broker config is refused with INVALID_REQUEST naming it
(metadata/broker_config.py). `validate_only` checks the keys and values and changes nothing.
"""

from __future__ import annotations

from typing import Any, Final

from kafka.protocol.admin.configs import (
    AlterConfigsResponse,
    DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
)

from metadata import broker_config, group_config
from metadata.topic_config import KAFKA_NAMES, TOPIC_CONFIGS, canonical_key, normalize_configs
from raftlog.base.errors import ClusterAuthorizationFailedError, InvalidConfigError, InvalidRequestError
from raftlog.node.kafka import errors
from raftlog.node.kafka.broker_configs import broker_entries, default_entries
from raftlog.node.kafka.group_configs import group_entries
from raftlog.node.kafka.context import Call, KafkaContext, Later, Reply

__all__ = ["HANDLERS"]

DESCRIBE_CONFIGS_KEY: Final = 32
ALTER_CONFIGS_KEY: Final = 33
INCREMENTAL_ALTER_CONFIGS_KEY: Final = 44
TOPIC: Final = 2
BROKER: Final = 4
GROUP: Final = 32
ALTERABLE: Final = (TOPIC, BROKER, GROUP)
EMPTY_GROUP: Final = "Default group resources are not allowed."
SOURCE_DYNAMIC_TOPIC: Final = 1
SOURCE_DEFAULT: Final = 5
# Topic configs whose default Kafka 4 reports from the cluster-wide broker default: a new
# cluster bootstraps a cluster-level min.insync.replicas record (KIP-966's eligible leader
# replicas), so a topic without its own value answers DYNAMIC_DEFAULT_BROKER_CONFIG.
CLUSTER_DEFAULT_TOPIC_CONFIGS: Final = frozenset({"min_insync_replicas"})
TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = 2, 3, 5, 6, 7
_TYPES: Final = {"int": TYPE_INT, "long": TYPE_LONG, "double": TYPE_DOUBLE, "list": TYPE_LIST, "enum": TYPE_STRING}
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
NOT_ALTERABLE: Final = "only topic, broker and group configs can be altered"
# A topic config's broker synonym (Kafka's ServerTopicConfigSynonyms: the first broker name of
# each) among the broker configs raftlog lists (broker_configs.py). Kafka lists the broker
# synonyms from that first name on that have a value, so retention.ms (log.retention.ms, no
# default) has none; those raftlog does not list (log.segment.bytes ...) have none here.
TOPIC_BROKER_SYNONYMS: Final = {"compression.type": "compression.type", "max.message.bytes": "message.max.bytes"}


def _broker_result(ctx: KafkaContext, res: Any) -> Any:
    R = DescribeConfigsResponse
    Entry = R.DescribeConfigsResult.DescribeConfigsResourceResult
    code, message, entries = errors.NONE, None, []
    try:
        dynamic = ctx.admin().broker_configs()  # DESCRIBE_CONFIGS on the cluster: Kafka's rule
    except ClusterAuthorizationFailedError:
        dynamic = None
        code, message = errors.CLUSTER_AUTHORIZATION_FAILED, "not authorized to describe broker configs"
    if dynamic is None:
        pass
    elif res.resource_name == broker_config.CLUSTER_DEFAULT:  # the cluster-wide dynamic defaults
        keys = None if res.configuration_keys is None else set(res.configuration_keys)
        entries = [Entry(**e, synonyms=[]) for e in default_entries(dynamic, keys)]
    elif ctx.node_config is None or res.resource_name != str(ctx.node_id):
        code = errors.INVALID_REQUEST
        message = f"Unexpected broker id, expected {ctx.node_id} or empty string, but received {res.resource_name}"
    else:
        keys = None if res.configuration_keys is None else set(res.configuration_keys)
        entries = [Entry(**e, synonyms=[]) for e in broker_entries(ctx.node_config, keys, dynamic)]
    if res.configuration_keys:
        # in the order asked: Kafka's answer to KafkaJS's ['default.replication.factor',
        # 'num.partitions'] comes in that order, and its createTopics test reads them by position
        asked = {name: i for i, name in enumerate(res.configuration_keys)}
        entries.sort(key=lambda e: asked.get(e.name, len(asked)))
    return R.DescribeConfigsResult(error_code=code, error_message=message, resource_type=res.resource_type,
                                   resource_name=res.resource_name, configs=entries)


def _group_result(ctx: KafkaContext, res: Any, include_synonyms: bool, include_documentation: bool) -> Any:
    R = DescribeConfigsResponse
    Entry = R.DescribeConfigsResult.DescribeConfigsResourceResult
    Synonym = Entry.DescribeConfigsSynonym
    code, message, entries = errors.NONE, None, []
    try:
        if not res.resource_name:
            raise InvalidRequestError(EMPTY_GROUP)
        configs = ctx.admin().group_configs(res.resource_name)  # DESCRIBE_CONFIGS on the group
        keys = None if res.configuration_keys is None else set(res.configuration_keys)
        for e in group_entries(ctx.node_config, configs, keys, include_synonyms=include_synonyms,
                               include_documentation=include_documentation):
            entries.append(Entry(**{**e, "synonyms": [Synonym(**s) for s in e["synonyms"]]}))
    except Exception as exc:  # noqa: BLE001 - this resource's answer
        code, message = errors.kafka_error(exc)
    return R.DescribeConfigsResult(error_code=code, error_message=message, resource_type=res.resource_type,
                                   resource_name=res.resource_name, configs=entries)


def _topic_synonyms(ctx: KafkaContext, name: str, value: str, is_default: bool) -> list[Any]:
    """Kafka's synonyms of a topic config (most specific first): the topic's own value, then
    its broker synonym (TOPIC_BROKER_SYNONYMS) with that config's value and source here."""
    Synonym = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult.DescribeConfigsSynonym
    out = [] if is_default else [Synonym(name=name, value=value, source=SOURCE_DYNAMIC_TOPIC)]
    if name in TOPIC_BROKER_SYNONYMS and ctx.node_config is not None:
        for e in broker_entries(ctx.node_config, {TOPIC_BROKER_SYNONYMS[name]}, ctx.metadata.image.broker_configs):
            out.append(Synonym(name=e["name"], value=e["value"], source=e["config_source"]))
    return out


async def handle_describe_configs(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = DescribeConfigsResponse
    Entry = R.DescribeConfigsResult.DescribeConfigsResourceResult
    results = []
    for res in request.resources:
        if res.resource_type == BROKER:
            results.append(_broker_result(ctx, res))
            continue
        if res.resource_type == GROUP:
            results.append(_group_result(ctx, res, bool(getattr(request, "include_synonyms", False)),
                                         bool(getattr(request, "include_documentation", False))))
            continue
        if res.resource_type != TOPIC:
            results.append(R.DescribeConfigsResult(
                error_code=errors.INVALID_REQUEST, error_message="only topic and broker resources",
                resource_type=res.resource_type, resource_name=res.resource_name, configs=[]))
            continue
        try:
            described = await ctx.admin().describe_topic_configs(res.resource_name)
        except Exception as exc:  # noqa: BLE001 - this resource's answer
            code, message = errors.kafka_error(exc)
            results.append(R.DescribeConfigsResult(
                error_code=code, error_message=message, resource_type=res.resource_type,
                resource_name=res.resource_name, configs=[]))
            continue
        wanted = None if res.configuration_keys is None else {canonical_key(k) for k in res.configuration_keys}
        entries = []
        for e in described:
            if wanted is not None and e.name not in wanted:
                continue
            name = KAFKA_NAMES.get(e.name, e.name)
            source = SOURCE_DYNAMIC_TOPIC
            if e.is_default:
                source = (broker_config.SOURCE_DYNAMIC_DEFAULT_BROKER if e.name in CLUSTER_DEFAULT_TOPIC_CONFIGS
                          else SOURCE_DEFAULT)
            synonyms = _topic_synonyms(ctx, name, e.value, e.is_default)
            if e.is_default and synonyms:
                source = synonyms[0].source  # Kafka: the first synonym's
            entries.append(Entry(
                name=name, value=e.value, read_only=False,
                is_default=source == SOURCE_DEFAULT,
                config_source=source,
                is_sensitive=False, synonyms=synonyms if getattr(request, "include_synonyms", False) else [],
                config_type=_TYPES.get(e.type, TYPE_STRING), documentation=e.doc,
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
            new = {c.name: c.value for c in res.configs if c.value is not None}
            if res.resource_type in (BROKER, GROUP):
                code, message = await _replace_dynamic(ctx, res.resource_type, res.resource_name, new,
                                                       request.validate_only)
            elif res.resource_type != TOPIC:
                code, message = errors.INVALID_REQUEST, NOT_ALTERABLE
            else:
                code, message = await _replace(ctx, res.resource_name, new, request.validate_only)
            out.append(R.AlterConfigsResourceResponse(
                error_code=code, error_message=message, resource_type=res.resource_type,
                resource_name=res.resource_name))
        return R(throttle_time_ms=0, responses=out)

    return Later(answer)


async def _replace(ctx: KafkaContext, name: str, new: dict[str, str], validate_only: bool) -> tuple[int, str | None]:
    try:
        admin = ctx.admin()
        described = await admin.describe_topic_configs(name)
        normalized = normalize_configs(new)
        current = {e.name for e in described if not e.is_default}
        delete = sorted(current - set(normalized))
        if not validate_only:
            await admin.alter_topic_configs(name, normalized, delete)
        return errors.NONE, None
    except Exception as exc:  # noqa: BLE001 - this resource's answer
        return errors.kafka_error(exc)


async def _alter_broker(ctx: KafkaContext, resource: str, set_: dict[str, str], delete: list[str],
                        validate_only: bool) -> None:
    """Set and delete dynamic configs of a broker or of the cluster default (`""`)."""
    broker_config.check_resource(resource)
    current = ctx.metadata.image.broker_configs.get(resource, {})
    broker_config.alter(current, set_, delete)  # raises for a read-only key or a bad value
    if not validate_only:
        await ctx.admin().alter_broker_configs(resource, set_, delete)


async def _alter_group(ctx: KafkaContext, group_id: str, set_: dict[str, str], delete: list[str],
                       validate_only: bool) -> None:
    """Set and delete a group's configs: the controller checks them (ALTER_CONFIGS on the group
    first: the guard); validate_only checks them here as the controller would."""
    if not group_id:
        raise InvalidRequestError(EMPTY_GROUP)
    if validate_only:
        group_config.alter(ctx.metadata.image.group_configs.get(group_id, {}), set_, delete)
    else:
        await ctx.admin().alter_group_configs(group_id, set_, delete)


async def _replace_dynamic(ctx: KafkaContext, resource_type: int, name: str, new: dict[str, str],
                           validate_only: bool) -> tuple[int, str | None]:
    """AlterConfigs of a broker or a group: set `new`, delete the keys set now and not in it."""
    try:
        image = ctx.metadata.image
        if resource_type == BROKER:
            current, alter = image.broker_configs.get(name, {}), _alter_broker
        else:
            current, alter = image.group_configs.get(name, {}), _alter_group
        await alter(ctx, name, new, sorted(set(current) - set(new)), validate_only)
        return errors.NONE, None
    except Exception as exc:  # noqa: BLE001 - this resource's answer
        return errors.kafka_error(exc)


async def _list_value(ctx: KafkaContext, res: Any, key: str) -> list[str]:
    """The current items of a list config of a topic (APPEND / SUBTRACT start from them)."""
    if res.resource_type != TOPIC or TOPIC_CONFIGS.get(key) is None or TOPIC_CONFIGS[key].type != "list":
        raise InvalidConfigError(f"APPEND and SUBTRACT apply to list configs only, not {key}", key=key)
    described = await ctx.admin().describe_topic_configs(res.resource_name)
    value = next(e.value for e in described if e.name == key)
    return [v for v in (value or "").split(",") if v]


async def handle_incremental_alter_configs(ctx: KafkaContext, call: Call) -> Reply:
    request = call.request
    R = IncrementalAlterConfigsResponse

    async def one(res: Any) -> tuple[int, str | None]:
        if res.resource_type not in ALTERABLE:
            return errors.INVALID_REQUEST, NOT_ALTERABLE
        key_of = canonical_key if res.resource_type == TOPIC else str  # brokers and groups: Kafka's names
        set_: dict[str, str] = {}
        delete: list[str] = []
        try:
            for c in res.configs:
                if c.config_operation in (OP_SET, OP_APPEND, OP_SUBTRACT) and c.value is None:
                    raise InvalidConfigError(f"{c.name}: operation {c.config_operation} needs a value", key=c.name)
                if c.config_operation == OP_SET:
                    set_[c.name] = c.value
                elif c.config_operation == OP_DELETE:
                    delete.append(key_of(c.name))
                elif c.config_operation in (OP_APPEND, OP_SUBTRACT):
                    items = await _list_value(ctx, res, key_of(c.name))
                    given = [v.strip() for v in c.value.split(",") if v.strip()]
                    if c.config_operation == OP_APPEND:
                        items += [v for v in given if v not in items]
                    else:
                        items = [v for v in items if v not in given]
                    if not items:
                        raise InvalidConfigError(f"{c.name}: SUBTRACT would leave the list empty", key=c.name)
                    set_[c.name] = ",".join(items)
                else:
                    raise InvalidConfigError(f"operation {c.config_operation} on {c.name} is not one of "
                                             "SET, DELETE, APPEND, SUBTRACT", key=c.name)
            if res.resource_type == BROKER:
                await _alter_broker(ctx, res.resource_name, set_, delete, request.validate_only)
                return errors.NONE, None
            if res.resource_type == GROUP:
                await _alter_group(ctx, res.resource_name, set_, delete, request.validate_only)
                return errors.NONE, None
            normalized = normalize_configs(set_)
            if set(normalized) & set(delete):
                raise InvalidRequestError("a key is both set and deleted")
            if not request.validate_only:
                await ctx.admin().alter_topic_configs(res.resource_name, normalized, delete)
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
