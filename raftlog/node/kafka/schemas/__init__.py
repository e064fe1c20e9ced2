"""Kafka 4 message schemas that kafka-python 3.0 does not carry, copied from Apache Kafka's
`clients/src/main/resources/common/message/` (Apache License 2.0) so that the listener can
answer those APIs in their own layout: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe
(69) of KIP-848, served by consumer_groups.py. The classes
are built from these files by kafka-python's own schema loader, below; codec.py imports
this module so that its tables list them."""

from __future__ import annotations

import sys

from kafka.protocol.api_message import ApiMessage

__all__ = [
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
]

_HERE = sys.modules[__name__]


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=_HERE):
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=_HERE):
    pass


class ConsumerGroupDescribeRequest(ApiMessage, load_json=_HERE):
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=_HERE):
    pass
