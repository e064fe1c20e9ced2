"""The cluster's feature levels (issue 41; Kafka's DescribeFeatures / UpdateFeatures, KIP-584
and KIP-778), pure: which features raftlog supports at which levels, the finalized level of
each (the bootstrap level, or the last FeatureLevel record in the metadata log), and the
UpdateFeatures rules, as Kafka's FeatureControlManager applies them.

    describe(image)                  -> {"supported": {name: [min, max]}, "finalized": {name: level}}
    plan_update(image, fields)       -> [FeatureLevel records]; raises InvalidUpdateVersionError
        fields: {"updates": [{"feature", "level", "upgrade_type"}], "validate_only": bool}

The levels are what raftlog really serves (docs/operator-apis.md), with Kafka's feature names
so that Kafka's tools and clients read them (`kafka-features describe`):
* metadata.version 7-25 (3.3-IV3 .. 4.0-IV3), finalized 25: raftlog answers the Kafka 4.0
  APIs; metadata.version names Kafka's metadata record formats, which raftlog does not use,
  so the level only tells clients which Kafka release raftlog matches.
* group.version 0-1, finalized 1: the KIP-848 consumer protocol (ConsumerGroupHeartbeat) is
  served.
* transaction.version 0-2, finalized 2: Transactions V2 (KIP-890 part 2: EndTxn v5 bumps the
  epoch per transaction, Produce v12 and TxnOffsetCommit v5 add their partitions themselves),
  as Kafka 4.x. The Java client reads the level and sends those versions; the brokers decide
  by the request version, so clients that speak only V1 (librdkafka, kafka-python, aiokafka,
  Java at level 1) are served as before.
* kraft.version, eligible.leader.replicas.version, share.version, streams.version 0-0: the
  quorum's membership is not changed through Kafka's AddRaftVoter; a Raft group has no
  eligible leader replicas (a majority elects); share groups are not on the Kafka wire yet;
  Kafka Streams' KIP-1071 protocol is not served.
A level of 0 is "off": Kafka lists only features at level 1 or more as finalized.

Broker capabilities (issue 46): what a broker understands beyond the records every raftlog
release reads, sent with its registration and each heartbeat (`capabilities`, a list of
names), as Kafka's BrokerRegistrationRequest names the feature levels a broker supports and
its controller writes a record format only at a metadata.version every broker supports. The
active controller keeps them in memory per broker incarnation (controller.py
`record_capabilities`; a new controller hears them with the next heartbeats) and uses a
format only for partitions whose replicas all said so:
* `first_term`: a new partition's record names its first leader at epoch 0 ("named, not
  confirmed"; partition/raft.py "First term"), and the broker holds a request for a partition
  it is named leader of until its replica leads (partition/service.py "Named leaders"). A
  broker of an older release does neither: it would run its own election for epoch 1
  (two leaders of one epoch), and answer NOT_LEADER to clients the record sent to it.

UpdateFeatures is all or nothing (Kafka 4): every update is checked first, and the first
refused one fails the request with INVALID_UPDATE_VERSION and its reason. Refused: an unknown
feature; a level outside the supported range; a lower level with upgrade type UPGRADE (1);
a higher level with a downgrade type (2 SAFE_DOWNGRADE, 3 UNSAFE_DOWNGRADE); any
metadata.version downgrade (Kafka 4 refuses them: it might lose metadata).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from metadata.image import MetadataImage
from metadata.records import FeatureLevel
from raftlog.base.errors import InvalidRequestError, InvalidUpdateVersionError

__all__ = [
    "METADATA_VERSION", "FEATURES", "UPGRADE", "SAFE_DOWNGRADE", "UNSAFE_DOWNGRADE", "MAX_UPDATES",
    "Feature", "finalized", "describe", "plan_update", "FIRST_TERM", "BROKER_CAPABILITIES",
    "MAX_CAPABILITIES",
]

METADATA_VERSION: Final = "metadata.version"
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
MAX_UPDATES: Final = 64

FIRST_TERM: Final = "first_term"
BROKER_CAPABILITIES: Final[tuple[str, ...]] = (FIRST_TERM,)  # what this release's brokers say they support
MAX_CAPABILITIES: Final = 32  # names a broker may send (more are refused: INVALID_REQUEST)


@dataclass(frozen=True, slots=True)
class Feature:
    min_level: int
    max_level: int
    bootstrap_level: int


FEATURES: Final[Mapping[str, Feature]] = {
    METADATA_VERSION: Feature(7, 25, 25),
    "kraft.version": Feature(0, 0, 0),
    "transaction.version": Feature(0, 2, 2),
    "group.version": Feature(0, 1, 1),
    "eligible.leader.replicas.version": Feature(0, 0, 0),
    "share.version": Feature(0, 0, 0),
    "streams.version": Feature(0, 0, 0),
}


def finalized(image: MetadataImage) -> dict[str, int]:
    """Every feature's finalized level (0: off), by name."""
    return {name: image.features.get(name, f.bootstrap_level) for name, f in FEATURES.items()}


def describe(image: MetadataImage) -> dict[str, Any]:
    """What DescribeFeatures answers: supported ranges and the levels finalized (above 0)."""
    return {
        "supported": {name: [f.min_level, f.max_level] for name, f in FEATURES.items()},
        "finalized": {name: level for name, level in finalized(image).items() if level > 0},
    }


def _check(name: str, level: int, upgrade_type: int, current: int) -> None:
    feature = FEATURES.get(name)
    if feature is None:
        raise InvalidUpdateVersionError(f"the controller does not support the given {name!r:.80} feature")
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        raise InvalidUpdateVersionError(f"unknown upgrade type {upgrade_type} for {name}")
    if not feature.min_level <= level <= feature.max_level:
        raise InvalidUpdateVersionError(
            f"invalid update version {level} for feature {name}: raftlog supports levels "
            f"{feature.min_level}-{feature.max_level}")
    if level < current:
        if name == METADATA_VERSION:
            raise InvalidUpdateVersionError(
                f"invalid metadata.version {level}: refusing to perform the requested downgrade "
                "because it might delete metadata information")
        if upgrade_type == UPGRADE:
            raise InvalidUpdateVersionError(
                f"can't downgrade the version of {name} from {current} to {level} without setting "
                "the upgrade type to either safe or unsafe downgrade")
    elif level > current and upgrade_type != UPGRADE:
        raise InvalidUpdateVersionError(f"can't downgrade {name} to a newer version ({current} -> {level})")


def plan_update(image: MetadataImage, fields: Mapping[str, Any]) -> list[FeatureLevel]:
    """The FeatureLevel records of an UpdateFeatures request (none for validate_only or for
    levels already finalized). Raises InvalidUpdateVersionError (the first update refused:
    nothing changes) or InvalidRequestError (a malformed request)."""
    updates = fields.get("updates")
    if not isinstance(updates, list) or len(updates) > MAX_UPDATES:
        raise InvalidRequestError(f"updates must be a list of at most {MAX_UPDATES}", field="updates")
    levels = finalized(image)
    seen: set[str] = set()
    records = []
    for update in updates:
        name = update.get("feature") if isinstance(update, Mapping) else None
        level, upgrade_type = (update.get("level"), update.get("upgrade_type", UPGRADE)) if name else (None, None)
        if type(name) is not str or type(level) is not int or type(upgrade_type) is not int:
            raise InvalidRequestError("each update has a feature name, an int level and an upgrade type",
                                      field="updates")
        if name in seen:
            raise InvalidRequestError(f"feature {name!r:.80} updated twice in one request", field="updates")
        seen.add(name)
        _check(name, level, upgrade_type, levels.get(name, 0))
        if level != levels[name]:
            records.append(FeatureLevel(name, level))
    return [] if fields.get("validate_only") else records
