"""The partition port's service answers a partition it does not lead with one NotLeaderError hint (leader id, address, the image's epoch) that both listeners read, keeps one result per asked part in order, and hands out producer ids from controller blocks (COORDINATOR_LOAD_IN_PROGRESS when the controller is away)."""

from types import MappingProxyType

import pytest

from metadata.image import BrokerRegistration, MetadataImage, PartitionState, TopicImage
from partition.port import ClientInfo, DeletePart, FetchPart, FetchRequest, OffsetQuery, ProducePart
from partition.service import PartitionService
from partition.telemetry import TopicTraffic
from raftlog.base.errors import (
    CoordinatorLoadInProgressError,
    NotControllerError,
    NotLeaderError,
    TransactionalIdAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from raftlog.node.kafka.metadata import leader_hint

TOPIC = "t"


def _image(leader: int, epoch: int) -> MetadataImage:
    brokers = {i: BrokerRegistration(i, f"inc{i}", "127.0.0.1", 1, "127.0.0.1", 1, None, False) for i in (1, 2, 3)}
    parts = (PartitionState(0, (1, 2, 3), 1, leader, epoch),)
    topic = TopicImage(TOPIC, "tid-1", False, 1, MappingProxyType({}), parts)
    return MetadataImage(brokers=MappingProxyType(brokers), topics=MappingProxyType({"tid-1": topic}),
                         topic_ids=MappingProxyType({TOPIC: "tid-1"}))


class Host:
    """A broker hosting no open replica (every partition is led elsewhere, or nowhere)."""

    node_id = 1

    def __init__(self, image: MetadataImage):
        self.image = image
        self.traffic = TopicTraffic()

    def replica(self, topic, partition):
        return None

    def replicas(self):
        return []

    def image_now(self):
        return self.image

    async def wait_named_leader(self, topic, partition, deadline):
        return None


class Directory:
    def __init__(self):
        self.blocks = [(100, 2), (200, 2)]
        self.down = False

    def client_address(self, broker_id):
        return f"10.0.0.{broker_id}:9000"

    async def allocate_producer_ids(self):
        if self.down:
            raise NotControllerError("no controller")
        return self.blocks.pop(0)


def service(leader: int = 2, epoch: int = 7) -> PartitionService:
    return PartitionService(Host(_image(leader, epoch)), Directory())


async def test_not_leader_hint_is_made_once_for_both_listeners():
    port = service(leader=2, epoch=7)
    [fetched] = await port.fetch(FetchRequest([FetchPart(TOPIC, 0, 0, 100)], max_wait_ms=0, min_bytes=0,
                                              max_bytes=100))
    error = fetched.error
    assert isinstance(error, NotLeaderError)
    assert (error.leader_id, error.leader, error.epoch) == (2, "10.0.0.2:9000", 7)  # native hint
    assert leader_hint(error) == (2, 7)  # Kafka's KIP-951 CurrentLeader, from the same error
    assert error.to_wire()["leader"] == "10.0.0.2:9000"


async def test_no_leader_known_means_no_hint():
    port = service(leader=-1)
    [listed] = await port.list_offsets([OffsetQuery(TOPIC, 0, -1)])
    assert isinstance(listed.error, NotLeaderError) and listed.error.leader_id is None
    assert leader_hint(listed.error) is None


async def test_one_result_per_part_in_the_order_asked():
    port = service()
    parts = [ProducePart("nope", 0, b"x"), ProducePart(TOPIC, 0, b"x"), ProducePart("nope", 3, b"x")]
    appended = await port.append(parts, acks=-1, client=ClientInfo("test"))
    assert not appended.waiting
    assert [(r.topic, r.partition, type(r.error)) for r in appended.results] == [
        ("nope", 0, UnknownTopicOrPartitionError), (TOPIC, 0, NotLeaderError), ("nope", 3, UnknownTopicOrPartitionError)]
    assert all(r.base_offset == -1 for r in appended.results)
    deleted = await port.delete_records([DeletePart(TOPIC, 0, 5), DeletePart("nope", 0, 5)], deadline=0)
    assert [type(r.error) for r in deleted] == [NotLeaderError, UnknownTopicOrPartitionError]


async def test_producer_ids_come_from_controller_blocks():
    port = service()
    ids = [(await port.init_producer_id()).producer_id for _ in range(3)]
    assert ids == [100, 101, 200]
    port._metadata.down = True
    await port.init_producer_id()  # 201: still in the block
    with pytest.raises(CoordinatorLoadInProgressError):  # retriable, as Kafka's "block not ready"
        await port.init_producer_id()
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        await port.init_producer_id(transactional_id="tx")
