"""Feature levels (issue 41; Kafka's UpdateFeatures rules): FeatureLevel records replay into the
image and snapshot byte for byte; an update is checked against raftlog's supported ranges, a
downgrade needs a downgrade type and metadata.version is never downgraded; one refused update
refuses the whole request."""

import pytest

from metadata import features
from metadata.delta import replay_decoded
from metadata.image import MetadataImage, image_from_snapshot, image_to_snapshot
from metadata.records import Envelope, FeatureLevel
from raftlog.base.errors import InvalidRequestError, InvalidUpdateVersionError

pytestmark = pytest.mark.unit

UP, SAFE, UNSAFE = features.UPGRADE, features.SAFE_DOWNGRADE, features.UNSAFE_DOWNGRADE


def _apply(image: MetadataImage, records: list[FeatureLevel], request_id: str = "r1") -> MetadataImage:
    return replay_decoded(image, Envelope(request_id, 1, tuple(records)))


def _update(*updates: tuple[str, int, int], validate_only: bool = False, image: MetadataImage | None = None):
    return features.plan_update(image or MetadataImage.empty(), {
        "updates": [{"feature": f, "level": lv, "upgrade_type": t} for f, lv, t in updates],
        "validate_only": validate_only})


def test_bootstrap_levels_are_what_raftlog_serves():
    described = features.describe(MetadataImage.empty())
    assert set(described["supported"]) == {"metadata.version", "kraft.version", "transaction.version",
                                           "group.version", "eligible.leader.replicas.version",
                                           "share.version", "streams.version"}
    # level 0 is "off": not listed as finalized, as Kafka lists them
    assert described["finalized"] == {"metadata.version": 25, "group.version": 1, "transaction.version": 2}
    for name, level in features.finalized(MetadataImage.empty()).items():
        lo, hi = described["supported"][name]
        assert lo <= level <= hi


def test_downgrade_replays_snapshots_and_upgrades_back():
    records = _update(("group.version", 0, SAFE))
    assert records == [FeatureLevel("group.version", 0)]
    image = _apply(MetadataImage.empty(), records)
    assert "group.version" not in features.describe(image)["finalized"]
    assert image_to_snapshot(image_from_snapshot(image_to_snapshot(image))) == image_to_snapshot(image)
    assert image_from_snapshot(image_to_snapshot(image)).features == {"group.version": 0}
    image = _apply(image, _update(("group.version", 1, UP), image=image), "r2")
    assert features.finalized(image)["group.version"] == 1
    # an image without feature records keeps the bytes it had before features existed
    assert b"features" not in image_to_snapshot(MetadataImage.empty())


def test_the_same_level_and_validate_only_write_nothing():
    assert _update(("metadata.version", 25, UP)) == []
    assert _update(("group.version", 0, SAFE), validate_only=True) == []


@pytest.mark.parametrize("update, why", [
    (("no.such.feature", 1, UP), "does not support"),
    (("metadata.version", 26, UP), "supports levels 7-25"),
    (("metadata.version", 6, UP), "supports levels 7-25"),
    (("metadata.version", 24, SAFE), "refusing to perform the requested downgrade"),
    (("metadata.version", 24, UNSAFE), "refusing to perform the requested downgrade"),
    (("group.version", 0, UP), "without setting the upgrade type"),
    (("group.version", 2, UP), "supports levels 0-1"),
    (("share.version", 1, UP), "supports levels 0-0"),
    (("group.version", 1, 9), "unknown upgrade type"),
])
def test_refused_updates_say_why(update, why):
    with pytest.raises(InvalidUpdateVersionError, match=why):
        _update(update)


def test_one_refused_update_refuses_the_request():
    with pytest.raises(InvalidUpdateVersionError):
        _update(("group.version", 0, SAFE), ("metadata.version", 99, UP))


def test_upgrade_type_downgrade_to_a_higher_level_is_refused():
    image = _apply(MetadataImage.empty(), [FeatureLevel("transaction.version", 0)])
    with pytest.raises(InvalidUpdateVersionError, match="newer version"):
        _update(("transaction.version", 1, SAFE), image=image)


@pytest.mark.parametrize("fields", [{"updates": "x"}, {"updates": [{"feature": "group.version"}]},
                                    {"updates": [{"feature": "group.version", "level": 1}] * 2}])
def test_malformed_requests_are_invalid_requests(fields):
    with pytest.raises(InvalidRequestError):
        features.plan_update(MetadataImage.empty(), fields)
