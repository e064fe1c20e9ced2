"""The Kafka workload's client reads librdkafka's serialised group metadata (generation, member id) as librdkafka 2.x writes it, and reports no generation for any other layout rather than a wrong one."""

import struct
import sys

import pytest

from jepsen_style_tests.kafka_client import group_generation


def _cgmd(generation: int, group: bytes, member: bytes, tail: bytes = b"\x01") -> bytes:
    order = "<" if sys.byteorder == "little" else ">"
    return b"CGMDv2:" + struct.pack(order + "i", generation) + group + b"\0" + member + b"\0" + tail


def test_reads_what_librdkafka_wrote_here():
    # Bytes of a confluent-kafka 2.16 consumer after its first join (measured on this machine).
    measured = b"CGMDv2:\x01\x00\x00\x00gg\x00rdkafka-827df6bf-e23d-4e8f-9b8f-40ad7b722681\x00\x01"
    if sys.byteorder == "little":
        assert group_generation(measured) == (1, "rdkafka-827df6bf-e23d-4e8f-9b8f-40ad7b722681")
    assert group_generation(_cgmd(7, b"jepsen", b"m-1")) == (7, "m-1")


@pytest.mark.parametrize("blob", [
    b"", b"CGMDv1:\x01\x00\x00\x00g\x00m\x00", b"CGMDv2:\x01\x00", b"CGMDv2:\x01\x00\x00\x00g",
    _cgmd(-1, b"g", b"m"),   # not in a generation yet
])
def test_unknown_layouts_and_no_generation_give_none(blob):
    assert group_generation(blob)[0] is None


def test_a_member_without_an_id_has_none():
    assert group_generation(_cgmd(3, b"g", b"")) == (3, None)
