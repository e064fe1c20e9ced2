"""Manual replica assignments in create_topic and create_partitions: taken as given (the first
replica the preferred leader), and each bad one refused with INVALID_REPLICA_ASSIGNMENT and the reason."""

from __future__ import annotations

import random

import pytest

from metadata.controller import Controller, ControllerResult
from metadata.delta import replay_envelope
from metadata.image import MetadataImage
from metadata.records import encode_envelope
from raftlog.base.errors import InvalidReplicaAssignmentError


class Cluster:
    """A controller, its committed image and three live brokers."""

    def __init__(self) -> None:
        self.image = MetadataImage.empty()
        self.c = Controller(self.image, 1, 0, random.Random(0), random_bytes=random.Random(0).randbytes)
        self.commit(self.c.noop())
        for b in (1, 2, 3):
            self.commit(self.c.register_broker(b, f"inc-{b}", "localhost", 9000 + b, "localhost", 9100 + b, now_ms=0))
            self.commit(self.c.heartbeat(b, f"inc-{b}", now_ms=0))

    def commit(self, result: ControllerResult):
        for env in result.envelopes:
            self.image = replay_envelope(self.image, encode_envelope(env))
            assert self.image.request_outcome(env.request_id).ok
        self.c.update_image(self.image, 0)
        return result.response


def test_a_manual_assignment_is_taken_as_given():
    cl = Cluster()
    cl.commit(cl.c.create_topic("t", -1, -1, assignments=[[3, 1], [2, 3]], now_ms=0))
    parts = cl.image.topic("t").partitions
    assert [(p.replicas, p.preferred_leader) for p in parts] == [((3, 1), 3), ((2, 3), 2)]
    cl.commit(cl.c.create_partitions("t", 3, assignments=[[1, 2]], now_ms=0))
    assert cl.image.topic("t").partitions[2].replicas == (1, 2)


@pytest.mark.parametrize("assignments, words", [
    ([], "no partition"),
    ([[1, 1]], "appears twice"),
    ([[1, 9]], "do not exist"),
    ([[1, 2], [3]], "every partition needs 2"),
    ([[]], "no replicas"),
    ([["1"]], "broker ids"),
    ("12", "list"),
])
def test_a_bad_assignment_says_why(assignments, words):
    cl = Cluster()
    with pytest.raises(InvalidReplicaAssignmentError, match=words):
        cl.c.create_topic("t", -1, -1, assignments=assignments, now_ms=0)


def test_create_partitions_checks_count_and_replication_factor():
    cl = Cluster()
    cl.commit(cl.c.create_topic("t", 1, 2, now_ms=0))
    with pytest.raises(InvalidReplicaAssignmentError, match="1 assignments for 2 new partitions"):
        cl.c.create_partitions("t", 3, assignments=[[1, 2]], now_ms=0)
    with pytest.raises(InvalidReplicaAssignmentError, match="every partition needs 2"):
        cl.c.create_partitions("t", 2, assignments=[[1, 2, 3]], now_ms=0)
