"""The Kafka listener's tables agree: every advertised API has a handler and a range inside kafka-python's schema, every raftlog wire code maps to a Kafka error code, and the zero-copy splice yields the bytes a plain encode would."""

from __future__ import annotations

import os
import re
from pathlib import Path

from kafka.protocol.consumer.fetch import FetchResponse

from raftlog.node.kafka import codec, errors, versions
from raftlog.node.kafka.codec import Header, encode_response, placeholder
from raftlog.node.kafka.dispatch import HANDLERS
from partition.segment import FileSlice


def test_every_advertised_api_has_a_handler_and_a_schema_range():
    assert set(HANDLERS) == set(versions.SUPPORTED_VERSIONS)
    for key, (lo, hi) in versions.SUPPORTED_VERSIONS.items():
        schema_lo, schema_hi = codec.REQUEST_CLASSES[key].valid_versions
        assert hi <= schema_hi, key
        assert lo >= schema_lo or key == 0, key  # Produce 0-2: advertised, refused when used


def test_every_wire_code_has_a_kafka_code():
    source = (Path(__file__).parents[3] / "raftlog" / "base" / "errors.py").read_text()
    codes = set(re.findall(r'code = "([A-Z_]+)"', source))
    assert codes <= set(errors.KAFKA_ERROR_CODES), codes - set(errors.KAFKA_ERROR_CODES)


def test_zero_copy_splice_matches_a_plain_encode(tmp_path):
    path = tmp_path / "segment"
    payload = os.urandom(3000)
    path.write_bytes(b"x" * 100 + payload)
    R = FetchResponse
    for version in (4, 11, 12):
        header = Header(1, version, 7, "c")

        def response(records):
            return R(throttle_time_ms=0, error_code=0, session_id=0, responses=[R.FetchableTopicResponse(
                topic="t", partitions=[R.FetchableTopicResponse.PartitionData(
                    partition_index=0, error_code=0, high_watermark=5, last_stable_offset=5,
                    log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
                    records=records)])])

        plain = b"".join(encode_response(header, response(payload)))
        fd = os.open(path, os.O_RDONLY)
        try:
            chunks = encode_response(header, response(placeholder(0)),
                                     splices={placeholder(0): FileSlice(fd, 100, len(payload))})
            spliced = b"".join(os.pread(c.fd, c.length, c.offset) if isinstance(c, FileSlice) else bytes(c)
                               for c in chunks)
        finally:
            os.close(fd)
        assert spliced == plain, version


def test_every_schema_version_has_an_error_answer_that_round_trips():
    """Every API and version we carry a schema for (served or not, down to the versions Kafka
    4 removed) has an UNSUPPORTED_VERSION answer that encodes and decodes back, with the code in
    its top-level error field where it has one: nothing the listener answers that way closes."""
    from raftlog.node.kafka.dispatch import error_response

    for key, cls in codec.RESPONSE_CLASSES.items():
        if key == codec.API_VERSIONS_KEY:
            continue  # answered per KIP-511 (dispatch.api_versions_unsupported)
        for version in range(0, cls.max_version + 1):
            response = error_response(key, version, errors.UNSUPPORTED_VERSION)
            assert response is not None, (key, version)
            body = bytes(response.encode(version=version))
            decoded = cls[version].decode(body)
            top = cls._struct.fields.get("error_code")
            if top is not None and top.for_version_q(version):
                assert decoded.error_code == errors.UNSUPPORTED_VERSION, (key, version)
        assert error_response(key, cls.max_version + 1, errors.UNSUPPORTED_VERSION) is None


def test_an_error_answer_mirrors_the_requests_items():
    from kafka.protocol.admin.configs import DescribeConfigsRequest as DC
    from kafka.protocol.producer.transaction import TxnOffsetCommitRequest as T

    from raftlog.node.kafka.dispatch import error_response

    request = T[3](transactional_id="t", group_id="g", producer_id=1, producer_epoch=0, topics=[
        T.TxnOffsetCommitRequestTopic(name="a", partitions=[
            T.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(partition_index=i, committed_offset=0)
            for i in (0, 4)])])
    response = error_response(28, 3, errors.UNSUPPORTED_VERSION, request)
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in response.topics] == [
        ("a", [(0, errors.UNSUPPORTED_VERSION), (4, errors.UNSUPPORTED_VERSION)])]
    request = DC[0](resources=[DC.DescribeConfigsResource(resource_type=2, resource_name="x")])
    response = error_response(32, 0, errors.UNSUPPORTED_VERSION, request, "m")
    assert [(r.resource_type, r.resource_name, r.error_code, r.error_message) for r in response.results] == [
        (2, "x", errors.UNSUPPORTED_VERSION, "m")]
