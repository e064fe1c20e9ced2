"""UpdateFeatures (key 57), versions 0-2 (issue 41): `kafka-features upgrade|downgrade` and the
admin clients' updateFeatures, a thin adapter onto the metadata port's `update_features` (the active
controller checks every update against metadata/features.py and writes FeatureLevel records).
DescribeFeatures is ApiVersions v3+ (versions.py). All or nothing, as Kafka 4: a refused
update fails the whole request with INVALID_UPDATE_VERSION and its reason (the top-level
error; v0-1 repeat it per feature). v0's AllowDowngrade is a SAFE_DOWNGRADE. ACLs: ALTER on
the cluster, at the port's guard (raftlog/node/guarded_metadata.py)."""

from __future__ import annotations

from typing import Final

from kafka.protocol.admin.cluster import UpdateFeaturesResponse

from metadata.port import FeatureUpdate
from raftlog.node.kafka import errors
from raftlog.node.kafka.context import Call, KafkaContext, Later, Reply

__all__ = ["HANDLERS"]

UPDATE_FEATURES_KEY: Final = 57
UPGRADE, SAFE_DOWNGRADE = 1, 2


async def handle_update_features(ctx: KafkaContext, call: Call) -> Reply:
    R = UpdateFeaturesResponse
    request = call.request
    updates = [FeatureUpdate(u.feature, u.max_version_level,
                             (SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE) if call.version == 0
                             else u.upgrade_type) for u in request.feature_updates or ()]
    validate_only = bool(request.validate_only) if call.version >= 1 else False

    async def answer() -> Reply:
        code, message = errors.NONE, None
        try:
            await ctx.admin().update_features(updates, validate_only=validate_only)
        except Exception as exc:  # noqa: BLE001 - the whole request's answer
            code, message = errors.kafka_error(exc)
        results = [R.UpdatableFeatureResult(feature=u.feature, error_code=code, error_message=message)
                   for u in updates] if call.version < 2 else []
        return R(throttle_time_ms=0, error_code=code, error_message=message, results=results)

    return Later(answer)


HANDLERS: Final = {UPDATE_FEATURES_KEY: handle_update_features}
