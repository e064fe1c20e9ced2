"""The API versions this listener speaks, and ApiVersions (key 18).

Ranges cover what the clients send (their sources, shared notes kafka-wire.md: librdkafka
2.x, kafka-python 3.x, aiokafka 0.12-0.14, kcat through librdkafka). Each range must lie
inside kafka-python's schema range for the key (checked by the unit tests) and every key
here must have a handler in `listener.HANDLERS` (also checked).

* Produce 0-12: versions 0-2 (message formats v0/v1) are advertised but answered
  UNSUPPORTED_VERSION when used, as Kafka 4.0 does: librdkafka < 2.12 sends gzip/snappy/lz4
  uncompressed unless the broker lists Produce v0 (librdkafka #4956, KAFKA-18659). v13 names
  topics by id; not yet.
* Fetch 4-12: v13+ names topics by id (KIP-516); clients fall back to 12.
* Metadata 1-12, ListOffsets 1-7 (v7: max timestamp), the admin APIs at their full
  non-topic-id ranges. SaslHandshake 1 and SaslAuthenticate 0-2 (sasl.py), the ACL and SCRAM
  APIs (acls.py) at the ranges Kafka 4 serves. CreatePartitions and DeleteRecords are not served yet (no controller
  op to add partitions, no replicated log-start move): not advertised, so clients report
  them unsupported by the broker.
"""

from __future__ import annotations

from typing import Final

from kafka.protocol.metadata.api_versions import ApiVersionsResponse

from raftlog.node.kafka import errors
from raftlog.node.kafka.codec import API_VERSIONS_KEY
from raftlog.node.kafka.context import Call, KafkaContext, Reply

__all__ = ["SUPPORTED_VERSIONS", "PRODUCE_MIN_USABLE", "api_versions_response", "HANDLERS"]

PRODUCE_MIN_USABLE: Final = 3

# api_key -> (min, max) advertised.
SUPPORTED_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    0: (0, 12),  # Produce
    1: (4, 12),  # Fetch
    2: (1, 7),  # ListOffsets
    3: (1, 12),  # Metadata
    17: (0, 1),  # SaslHandshake (librdkafka wants v0 listed; a v0 request is refused: sasl.py)
    18: (0, 4),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 5),  # DeleteTopics (v6 adds topic ids)
    22: (0, 4),  # InitProducerId
    29: (1, 3),  # DescribeAcls
    30: (1, 3),  # CreateAcls
    31: (1, 3),  # DeleteAcls
    32: (1, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    36: (0, 2),  # SaslAuthenticate
    44: (0, 1),  # IncrementalAlterConfigs
    50: (0, 0),  # DescribeUserScramCredentials
    51: (0, 0),  # AlterUserScramCredentials
    60: (0, 1),  # DescribeCluster
}


def supported(api_key: int, api_version: int) -> bool:
    lo_hi = SUPPORTED_VERSIONS.get(api_key)
    return lo_hi is not None and lo_hi[0] <= api_version <= lo_hi[1]


def api_versions_response(error_code: int = errors.NONE, version: int = 0) -> ApiVersionsResponse:
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
        for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
    ]
    return ApiVersionsResponse[version](error_code=error_code, api_keys=keys, throttle_time_ms=0)


async def handle_api_versions(ctx: KafkaContext, call: Call) -> Reply:
    return api_versions_response(version=call.header.api_version)


HANDLERS: Final = {API_VERSIONS_KEY: handle_api_versions}
