"""Client quota records (Kafka's ClientQuotaRecord, issue 41) replay into the image's
`client_quotas`, are checked strictly, and snapshot and round-trip byte for byte; an image
without quotas keeps the snapshot bytes it had before they existed."""

import pytest

from metadata.delta import replay_decoded
from metadata.errors import InvalidRecordError
from metadata.image import MetadataImage, image_from_snapshot, image_to_snapshot
from metadata.records import DEFAULT_ENTITY, ClientQuota, Envelope, record_from_obj, record_to_obj

pytestmark = pytest.mark.unit


def _apply(image: MetadataImage, *records: ClientQuota, request_id: str = "r1") -> MetadataImage:
    return replay_decoded(image, Envelope(request_id, 1, tuple(records)))


def test_quotas_set_replace_and_delete_per_entity():
    image = _apply(MetadataImage.empty(),
                   ClientQuota("alice", None, {"producer_byte_rate": "1048576", "consumer_byte_rate": "2e6"}),
                   ClientQuota(DEFAULT_ENTITY, None, {"request_percentage": "50"}),
                   ClientQuota(None, "app", {"producer_byte_rate": "1000"}),
                   ClientQuota("alice", "app", {"producer_byte_rate": "10"}))
    assert image.client_quotas[("alice", None)] == {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2e6}
    assert image.client_quotas[(DEFAULT_ENTITY, None)] == {"request_percentage": 50.0}
    assert set(image.client_quotas) == {("alice", None), (DEFAULT_ENTITY, None), (None, "app"), ("alice", "app")}
    image = _apply(image, ClientQuota("alice", None, {"producer_byte_rate": "5"}, ("consumer_byte_rate",)),
                   ClientQuota(None, "app", delete=("producer_byte_rate",)),
                   ClientQuota(None, "nobody", delete=("producer_byte_rate",)), request_id="r2")
    assert image.client_quotas[("alice", None)] == {"producer_byte_rate": 5.0}
    assert (None, "app") not in image.client_quotas and (None, "nobody") not in image.client_quotas
    again = image_from_snapshot(image_to_snapshot(image))
    assert again.client_quotas == image.client_quotas
    assert image_to_snapshot(again) == image_to_snapshot(image)


@pytest.mark.parametrize("kwargs", [
    {},  # no entity
    {"user": "alice", "set": {"bogus_rate": "1"}},
    {"user": "alice", "set": {"producer_byte_rate": "0"}},
    {"user": "alice", "set": {"producer_byte_rate": "-1"}},
    {"user": "alice", "set": {"producer_byte_rate": "inf"}},
    {"user": "alice", "set": {"producer_byte_rate": "fast"}},
    {"user": "", "set": {"producer_byte_rate": "1"}},
    {"user": "alice", "set": {"producer_byte_rate": "1"}, "delete": ("producer_byte_rate",)},
])
def test_bad_quota_records_are_refused(kwargs):
    with pytest.raises(InvalidRecordError):
        ClientQuota(**kwargs)


def test_a_quota_record_round_trips_strictly():
    record = ClientQuota(DEFAULT_ENTITY, "", {"consumer_byte_rate": "100"})
    assert record_from_obj(record_to_obj(record)) == record
    obj = record_to_obj(record) | {"extra": 1}
    with pytest.raises(InvalidRecordError):
        record_from_obj(obj)


def test_an_image_without_quotas_snapshots_as_before():
    assert b"client_quotas" not in image_to_snapshot(MetadataImage.empty())
