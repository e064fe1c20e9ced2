"""Dynamic broker configs applied to the running node, without a restart.

The metadata image holds the dynamic broker configs (metadata/broker_config.py): this node's
own entry over the cluster default (`""`) over the value it was started with. On every image
whose `broker_configs` changed, `DynamicBrokerConfig.on_image` sets the effective value of each
dynamic setting on the objects that read it at request time: the Kafka listener's context
(`auto_create_topics`, `default_partitions`, `default_replication_factor`), the connection
gate (`max_connections`, `max_connections_per_ip`; connections already open stay open, as in
Kafka), the partition service (`compression_type`) and the replica manager (the replication
throttles' rates). A setting deleted everywhere goes back to the node's static value.

Concurrency: trio thread only (a metadata subscriber).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metadata.broker_config import DYNAMIC_BROKER_CONFIGS, effective
from metadata.image import MetadataImage

__all__ = ["DynamicBrokerConfig"]


class DynamicBrokerConfig:
    """Applies the image's dynamic broker configs of `config.node_id` to `targets` (each
    object gets the settings it has an attribute of, under NodeConfig's attribute name)."""

    def __init__(self, config: Any, targets: list[Any]) -> None:
        self._config = config
        self._targets = targets
        self._seen: Mapping[str, Mapping[str, str]] | None = None

    def on_image(self, image: MetadataImage) -> None:
        if image.broker_configs is self._seen:  # unchanged maps are shared between images
            return
        self._seen = image.broker_configs
        dynamic = effective(image.broker_configs, self._config.node_id)
        for name, definition in DYNAMIC_BROKER_CONFIGS.items():
            value = dynamic[name][0] if name in dynamic else getattr(self._config, definition.attr, None)
            if value is None:  # a config with no node setting behind it (accepted, no effect)
                continue
            for target in self._targets:
                if hasattr(target, definition.attr):
                    setattr(target, definition.attr, value)
