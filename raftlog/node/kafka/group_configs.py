"""Group configs for DescribeConfigs (32) of a GROUP resource (type 32; configs.py).

Kafka 4 answers every group config (metadata/group_config.py `DEFS`) of the group named, set
or not, whether or not the group exists: a value set on the group has source GROUP_CONFIG
(8), with the group value as its first synonym; an unset one is the broker's value of its
synonym (`group.share.record.lock.duration.ms` for `share.record.lock.duration.ms`: the node's
setting of that name when raftlog has one, else Kafka's default), source STATIC_BROKER_CONFIG
when the node's config sets that setting, DEFAULT_CONFIG when not. None is read-only or
sensitive; Kafka's internal group configs (`*.assignor.offload.enable`, ...) are not listed.
Synonyms (the group's value, then the broker's or the config's own default) and
documentation only when the request asks for them, as Kafka.
An empty group name is INVALID_REQUEST (configs.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from metadata.group_config import DEFS

__all__ = ["group_entries", "broker_default", "SOURCE_GROUP"]

SOURCE_GROUP: Final = 8  # Kafka's ConfigSource.GROUP_CONFIG
SOURCE_STATIC_BROKER: Final = 4
SOURCE_DEFAULT: Final = 5
_TYPES: Final = {"boolean": 1, "string": 2, "int": 3, "long": 5, "list": 7}


def _attr(synonym: str | None) -> str | None:
    """The NodeConfig field of a broker setting (Kafka's name, dots as underscores)."""
    return None if synonym is None else synonym.replace(".", "_")


def broker_default(node: Any, name: str) -> tuple[str | None, bool]:
    """The broker's value of group config `name` as Kafka prints it, and whether the node's
    own configuration (file, environment, flags) sets it."""
    definition = DEFS[name]
    attr = _attr(definition.synonym)
    if node is None or attr is None or not hasattr(node, attr):
        return definition.default, False
    value = getattr(node, attr)
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return text, attr in getattr(node, "configured", ())


def group_entries(node: Any, configs: Mapping[str, str], keys: set[str] | None, *,
                  include_synonyms: bool, include_documentation: bool) -> list[dict[str, Any]]:
    """The group's configs (those named in `keys`, or all) as dicts of Kafka's DescribeConfigs
    entry fields, `synonyms` as dicts of (name, value, source)."""
    out = []
    for name, definition in DEFS.items():
        if definition.internal or (keys is not None and name not in keys):
            continue
        default, static = broker_default(node, name)
        synonyms = [{"name": definition.synonym or name, "value": default,  # no broker setting: its own default
                     "source": SOURCE_STATIC_BROKER if static else SOURCE_DEFAULT}]
        if name in configs:
            value, source = configs[name], SOURCE_GROUP
            synonyms.insert(0, {"name": name, "value": value, "source": SOURCE_GROUP})
        else:
            value, source = default, SOURCE_STATIC_BROKER if static else SOURCE_DEFAULT
        out.append({
            "name": name, "value": value, "read_only": False, "is_default": source == SOURCE_DEFAULT,
            "config_source": source, "is_sensitive": False, "config_type": _TYPES.get(definition.type, 2),
            "documentation": definition.doc if include_documentation else None,
            "synonyms": synonyms if include_synonyms else [],
        })  # fmt: skip
    return out
