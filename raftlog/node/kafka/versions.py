"""The API versions this listener speaks, and ApiVersions (key 18).

Ranges cover what the clients send at their highest (read from their sources: librdkafka
2.15 `rd_kafka_broker_ApiVersion_supported` calls and `rd_kafka_ProduceRequest_max_version`:
Produce 10, Fetch 16, Metadata 13, ListOffsets 7, CreateTopics 4, DeleteTopics 4,
CreatePartitions 2, DeleteRecords 2, DescribeConfigs 1, AlterConfigs 2,
IncrementalAlterConfigs 1, InitProducerId 4; kafka-python 3.0.12 caps Fetch at 12, Produce
at 9, InitProducerId at 4 and otherwise sends the broker's highest; aiokafka 0.12-0.14 uses
its own structs up to Produce 8, Fetch 11, Metadata 5, ListOffsets 5; kcat is librdkafka;
shared notes kafka-wire.md). Each range must lie inside kafka-python's schema range for the
key (checked by the unit tests) and every key here must have a handler in
`dispatch.HANDLERS` (also checked).

* Produce 0-13: versions 0-2 (message formats v0/v1) are advertised but answered
  UNSUPPORTED_VERSION when used, as Kafka 4.0 does: librdkafka < 2.12 sends gzip/snappy/lz4
  uncompressed unless the broker lists Produce v0 (librdkafka #4956, KAFKA-18659). v13
  names topics by id (KIP-516).
* Fetch 4-16: v13+ names topics by id; v16 adds the leader's endpoint to NOT_LEADER answers
  (KIP-951). v17-18 carry only replica fields (KIP-853, KIP-1166): not advertised.
* Metadata 0-13 (aiokafka 0.12 sends Metadata v0 right behind its ApiVersions probe and
  takes a closed connection for "no Kafka here"), ListOffsets 1-11 (v7 max timestamp; v8-11 tiered-storage timestamps,
  answered as without tiered storage), DeleteTopics 1-6 (v6 by topic id), DescribeCluster
  0-2 (v2 flags fenced brokers), the other admin APIs at their full schema ranges.
  SaslHandshake 1 and SaslAuthenticate 0-2 (sasl.py), the ACL and SCRAM APIs (acls.py) at
  the ranges Kafka 4 serves.
* The group APIs (groups.py) at their full classic-protocol ranges below topic ids: JoinGroup
  0-9, SyncGroup 0-5, Heartbeat 0-4, LeaveGroup 0-5, OffsetCommit 2-9, OffsetFetch 1-9,
  FindCoordinator 0-6, DescribeGroups 0-6, ListGroups 0-5, DeleteGroups 0-2, OffsetDelete 0. The KIP-848
  consumer protocol (consumer_groups.py): ConsumerGroupHeartbeat 0-1 and ConsumerGroupDescribe
  0-1, the versions librdkafka 2.12+ (`group.protocol=consumer`) and the Java client 4.x send.
  The KIP-932 share-group APIs (share_groups.py) at kafka-clients 4.4.0's versions:
  ShareGroupHeartbeat 1, ShareGroupDescribe 1, ShareFetch 1-2, ShareAcknowledge 1-2,
  DescribeShareGroupOffsets 0-1, AlterShareGroupOffsets 0, DeleteShareGroupOffsets 0.
* The read-only operator APIs (describe.py): DescribeLogDirs 1-4 (v5's cordoned flag is
  Kafka 4.2's), DescribeQuorum 0-2, DescribeProducers 0, DescribeTopicPartitions 0 (their
  only versions).
* The transaction APIs (txn.py) at Kafka 4's versions, Transactions V2 included (KIP-890
  part 2; transaction.version 2): AddPartitionsToTxn 0-5, AddOffsetsToTxn 0-4, EndTxn 0-5,
  WriteTxnMarkers 1, TxnOffsetCommit 0-5, DescribeTransactions 0, ListTransactions 0-1;
  InitProducerId with a transactional id goes to the transaction coordinator. Which protocol
  a transaction follows is the request version's (EndTxn 5, Produce 12, TxnOffsetCommit 5),
  as in Kafka: librdkafka, kafka-python and aiokafka send V1's.
* AlterPartitionReassignments 0-1 and ListPartitionReassignments 0 (reassign.py): their
  full schema ranges.
* ElectLeaders 0-2 (elect.py): its full schema range.
* UpdateFeatures 0-2 (features.py); ApiVersions v3+ lists raftlog's supported and finalized
  features (metadata/features.py), which is Kafka's DescribeFeatures.
* Every other API Kafka 4 lists is absent, and a request for it is answered UNSUPPORTED_VERSION
  (listener.py, dispatch.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kafka.protocol.metadata.api_versions import ApiVersionsResponse

from metadata import features
from raftlog.node.kafka import errors
from raftlog.node.kafka.codec import API_VERSIONS_KEY
from raftlog.node.kafka.context import Call, KafkaContext, Reply

__all__ = ["SUPPORTED_VERSIONS", "PRODUCE_MIN_USABLE", "api_versions_response", "HANDLERS"]

PRODUCE_MIN_USABLE: Final = 3

# api_key -> (min, max) advertised.
SUPPORTED_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    0: (0, 13),  # Produce (v13: topic ids)
    1: (4, 16),  # Fetch (v13+: topic ids; librdkafka sends 16)
    2: (1, 11),  # ListOffsets (kafka-python sends the broker's highest)
    23: (2, 4),  # OffsetForLeaderEpoch (KIP-320; librdkafka 2, kafka-python the highest)
    3: (0, 13),  # Metadata (aiokafka 0.12 probes with v0 beside ApiVersions)
    8: (2, 9),  # OffsetCommit (v10 names topics by id)
    9: (1, 9),  # OffsetFetch (v10 names topics by id)
    10: (0, 6),  # FindCoordinator (v4+ batched keys; v6 = v5 plus share-group keys, kafka-python pinned to 4.0 asks it)
    11: (0, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 6),  # DescribeGroups
    16: (0, 5),  # ListGroups
    17: (0, 1),  # SaslHandshake (librdkafka wants v0 listed; a v0 request is refused: sasl.py)
    18: (0, 4),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics (v6: by name or topic id)
    21: (0, 2),  # DeleteRecords
    37: (0, 3),  # CreatePartitions
    45: (0, 1),  # AlterPartitionReassignments (reassign.py; the Java Admin sends 0-1)
    46: (0, 0),  # ListPartitionReassignments
    43: (0, 2),  # ElectLeaders (elect.py: PREFERRED -> leadership transfer, UNCLEAN -> recover_partition)
    22: (0, 4),  # InitProducerId
    29: (1, 3),  # DescribeAcls
    30: (1, 3),  # CreateAcls
    31: (1, 3),  # DeleteAcls
    32: (1, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    36: (0, 2),  # SaslAuthenticate
    42: (0, 2),  # DeleteGroups
    47: (0, 0),  # OffsetDelete (its only version)
    44: (0, 1),  # IncrementalAlterConfigs
    50: (0, 0),  # DescribeUserScramCredentials
    51: (0, 0),  # AlterUserScramCredentials
    60: (0, 2),  # DescribeCluster (v2: fenced brokers flagged)
    35: (1, 4),  # DescribeLogDirs (v4: volume total/usable bytes; describe.py)
    55: (0, 2),  # DescribeQuorum (the metadata quorum; v2 lists the voters' endpoints; describe.py)
    61: (0, 0),  # DescribeProducers (describe.py)
    75: (0, 0),  # DescribeTopicPartitions (KIP-966, paginated; describe.py)
    24: (0, 5),  # AddPartitionsToTxn (v4+: the batched broker form; v5 as v4: txn.py)
    25: (0, 4),  # AddOffsetsToTxn (v4 as v3: KIP-890 part 2 clients do not send it)
    26: (0, 5),  # EndTxn (v5: KIP-890 part 2, the epoch bumped per transaction; txn.py)
    27: (1, 1),  # WriteTxnMarkers (Kafka 4 serves 1+; v2 carries KIP-890's transaction version)
    28: (0, 5),  # TxnOffsetCommit (v4 adds TRANSACTION_ABORTABLE, v5 adds the group's partition itself)
    65: (0, 0),  # DescribeTransactions
    66: (0, 1),  # ListTransactions (v1: duration filter; v2's id pattern is not served)
    68: (0, 1),  # ConsumerGroupHeartbeat (KIP-848; consumer_groups.py)
    69: (0, 1),  # ConsumerGroupDescribe (KIP-848; consumer_groups.py)
    76: (1, 1),  # ShareGroupHeartbeat (KIP-932; share_groups.py; v0 was 4.0's early access)
    77: (1, 1),  # ShareGroupDescribe
    78: (1, 2),  # ShareFetch (v2: KIP-1206/1222 fields, RENEW refused)
    79: (1, 2),  # ShareAcknowledge
    90: (0, 1),  # DescribeShareGroupOffsets (v1: lag)
    91: (0, 0),  # AlterShareGroupOffsets
    92: (0, 0),  # DeleteShareGroupOffsets
    48: (0, 1),  # DescribeClientQuotas (quotas.py)
    49: (0, 1),  # AlterClientQuotas (quotas.py)
    57: (0, 2),  # UpdateFeatures (features.py)
}


def supported(api_key: int, api_version: int) -> bool:
    lo_hi = SUPPORTED_VERSIONS.get(api_key)
    return lo_hi is not None and lo_hi[0] <= api_version <= lo_hi[1]


def api_versions_response(error_code: int = errors.NONE, version: int = 0,
                          features: Mapping[str, Any] | None = None) -> ApiVersionsResponse:
    """ApiVersions' answer; from v3 with `features` (metadata/features.py `describe`, plus its
    "epoch"): the supported ranges (v3 leaves out those starting at 0, as Kafka does) and the
    finalized levels, which Kafka's DescribeFeatures reads."""
    R = ApiVersionsResponse
    keys = [R.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())]
    extra: dict[str, Any] = {}
    if features is not None and version >= 3:
        extra["supported_features"] = [
            R.SupportedFeatureKey(name=name, min_version=lo, max_version=hi)
            for name, (lo, hi) in sorted(features["supported"].items()) if version >= 4 or lo > 0]
        extra["finalized_features_epoch"] = int(features.get("epoch", 0))
        extra["finalized_features"] = [
            R.FinalizedFeatureKey(name=name, max_version_level=level, min_version_level=level)
            for name, level in sorted(features["finalized"].items())]
    return R[version](error_code=error_code, api_keys=keys, throttle_time_ms=0, **extra)


async def handle_api_versions(ctx: KafkaContext, call: Call) -> Reply:
    image = getattr(ctx.metadata, "image", None)
    described = None if image is None else features.describe(image) | {"epoch": ctx.metadata.applied_index}
    return api_versions_response(version=call.header.api_version, features=described)


HANDLERS: Final = {API_VERSIONS_KEY: handle_api_versions}
