"""Kafka 4 message schemas that kafka-python 3.0 does not carry, copied from Apache Kafka's
`clients/src/main/resources/common/message/` (Apache License 2.0) so that the listener can
answer those APIs in their own layout: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe
(69) of KIP-848, served by consumer_groups.py, and the share-group APIs of KIP-932 (76-79,
90-92), served by share_groups.py (the files as kafka-clients 4.4.0 carries them). The classes
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
    "ShareGroupHeartbeatRequest",
    "ShareGroupHeartbeatResponse",
    "ShareGroupDescribeRequest",
    "ShareGroupDescribeResponse",
    "ShareFetchRequest",
    "ShareFetchResponse",
    "ShareAcknowledgeRequest",
    "ShareAcknowledgeResponse",
    "DescribeShareGroupOffsetsRequest",
    "DescribeShareGroupOffsetsResponse",
    "AlterShareGroupOffsetsRequest",
    "AlterShareGroupOffsetsResponse",
    "DeleteShareGroupOffsetsRequest",
    "DeleteShareGroupOffsetsResponse",
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


class ShareGroupHeartbeatRequest(ApiMessage, load_json=_HERE):
    pass


class ShareGroupHeartbeatResponse(ApiMessage, load_json=_HERE):
    pass


class ShareGroupDescribeRequest(ApiMessage, load_json=_HERE):
    pass


class ShareGroupDescribeResponse(ApiMessage, load_json=_HERE):
    pass


class ShareFetchRequest(ApiMessage, load_json=_HERE):
    pass


class ShareFetchResponse(ApiMessage, load_json=_HERE):
    pass


class ShareAcknowledgeRequest(ApiMessage, load_json=_HERE):
    pass


class ShareAcknowledgeResponse(ApiMessage, load_json=_HERE):
    pass


class DescribeShareGroupOffsetsRequest(ApiMessage, load_json=_HERE):
    pass


class DescribeShareGroupOffsetsResponse(ApiMessage, load_json=_HERE):
    pass


class AlterShareGroupOffsetsRequest(ApiMessage, load_json=_HERE):
    pass


class AlterShareGroupOffsetsResponse(ApiMessage, load_json=_HERE):
    pass


class DeleteShareGroupOffsetsRequest(ApiMessage, load_json=_HERE):
    pass


class DeleteShareGroupOffsetsResponse(ApiMessage, load_json=_HERE):
    pass
