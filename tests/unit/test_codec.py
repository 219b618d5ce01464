"""Literal examples of the Kafka wire codec, and byte-for-byte checks against kafka-python."""

from __future__ import annotations

import struct
import uuid

import pytest
from flux.protocol import framing
from flux.protocol import primitives as p
from flux.protocol.api import (
    SUPPORTED_VERSIONS,
    ApiKey,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_unsupported_api_versions_response,
)
from flux.protocol.errors import (
    FrameTooLargeError,
    InvalidFrameError,
    ProtocolError,
    UnsupportedVersionError,
)
from flux.protocol.messages import REQUESTS, RESPONSES
from flux.protocol.schema import EncodeError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def h(text: str) -> bytes:
    """Hex with spaces and | separators allowed, for readable literals."""
    return bytes.fromhex(text.replace("|", " "))


def sized(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


# ------------------------------------------------------------------------ literal requests

API_VERSIONS_V0 = h("0012 0000 | 00000001 | 0005 6b61666b61")
# Header v2: client_id stays a classic int16 string, then an empty tagged-field section.
API_VERSIONS_V3 = h("0012 0003 | 00000002 | 0001 63 | 00 | 05 666c7578 | 04 302e31 | 00")
METADATA_V1_ALL = h("0003 0001 | 00000003 | ffff | ffffffff")
METADATA_V1_NONE = h("0003 0001 | 00000003 | ffff | 00000000")
PRODUCE_V3 = h(
    "0000 0003 | 00000004 | 0001 70"  # header v1, client_id "p"
    "| ffff | ffff | 00007530"  # transactional_id null, acks -1, timeout 30000
    "| 00000001 | 0001 74"  # one topic "t"
    "| 00000001 | 00000000 | 00000003 616263"  # partition 0, records b"abc"
)


def test_api_versions_v0_request() -> None:
    header, body = decode_request(API_VERSIONS_V0)
    assert header == RequestHeader(ApiKey.API_VERSIONS, 0, 1, "kafka")
    assert body == {"client_software_name": "", "client_software_version": ""}
    assert encode_request(18, 0, 1, "kafka", body) == sized(API_VERSIONS_V0)
    assert encode_request(18, 0, 1, "kafka", {}) == sized(API_VERSIONS_V0)


def test_api_versions_v3_request() -> None:
    header, body = decode_request(API_VERSIONS_V3)
    assert header == RequestHeader(18, 3, 2, "c")
    assert body == {"client_software_name": "flux", "client_software_version": "0.1"}
    assert encode_request(18, 3, 2, "c", body) == sized(API_VERSIONS_V3)


def test_metadata_v1_null_topics_means_all_and_empty_means_none() -> None:
    header, body = decode_request(METADATA_V1_ALL)
    assert header == RequestHeader(3, 1, 3, None)
    assert body["topics"] is None
    assert decode_request(METADATA_V1_NONE)[1]["topics"] == []
    assert encode_request(3, 1, 3, None, {"topics": None}) == sized(METADATA_V1_ALL)
    assert encode_request(3, 1, 3, None, {"topics": []}) == sized(METADATA_V1_NONE)


def test_metadata_v0_topics_cannot_be_null() -> None:
    with pytest.raises(InvalidFrameError):
        decode_request(h("0003 0000 | 00000003 | ffff | ffffffff"))
    with pytest.raises(EncodeError, match="topics"):
        encode_request(3, 0, 3, None, {"topics": None})


def test_produce_v3_one_partition() -> None:
    header, body = decode_request(PRODUCE_V3)
    assert header == RequestHeader(0, 3, 4, "p")
    assert body == {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [
            {
                "name": "t",
                "topic_id": uuid.UUID(int=0),
                "partition_data": [{"index": 0, "records": b"abc"}],
            }
        ],
    }
    assert type(body["topic_data"][0]["partition_data"][0]["records"]) is bytes
    assert encode_request(0, 3, 4, "p", body) == sized(PRODUCE_V3)


def test_records_accept_views_and_chunk_lists() -> None:
    topic = {"name": "t", "partition_data": [{"index": 0, "records": memoryview(b"abc")}]}
    body = {"acks": -1, "timeout_ms": 30000, "topic_data": [topic]}
    assert encode_request(0, 3, 4, "p", body) == sized(PRODUCE_V3)
    topic["partition_data"][0]["records"] = [b"a", bytearray(b"b"), memoryview(b"c")]
    assert encode_request(0, 3, 4, "p", body) == sized(PRODUCE_V3)


def test_large_records_round_trip_in_flexible_produce() -> None:
    records = bytes(range(256)) * 4096  # 1 MiB
    body = {
        "acks": 1,
        "timeout_ms": 5,
        "topic_data": [{"name": "big", "partition_data": [{"index": 3, "records": records}]}],
    }
    frame = encode_request(0, 9, 1, "c", body)
    _, decoded = decode_request(memoryview(frame)[4:])
    assert decoded["topic_data"][0]["partition_data"][0]["records"] == records


def test_missing_fields_take_kafka_defaults() -> None:
    frame = encode_request(
        1,
        12,
        1,
        None,
        {"topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 5}]}]},
    )
    _, body = decode_request(frame[4:])
    assert body["replica_id"] == -1
    assert body["max_bytes"] == 0x7FFFFFFF
    assert body["session_epoch"] == -1
    assert body["rack_id"] == ""
    assert body["cluster_id"] is None
    partition = body["topics"][0]["partitions"][0]
    assert partition["current_leader_epoch"] == -1
    assert partition["last_fetched_epoch"] == -1
    assert partition["log_start_offset"] == -1
    assert partition["partition_max_bytes"] == 0
    # A field the version lacks is still present, with its default.
    assert partition["high_watermark"] == (1 << 63) - 1
    assert body["topics"][0]["topic_id"] == uuid.UUID(int=0)


def test_fields_outside_the_version_are_ignored_on_encode() -> None:
    body = {"topics": None, "allow_auto_topic_creation": False}
    assert encode_request(3, 1, 3, None, body) == sized(METADATA_V1_ALL)


def test_encoding_none_into_a_non_nullable_field_names_the_field() -> None:
    body = {"brokers": [{"node_id": 1, "host": None, "port": 9092}]}
    with pytest.raises(EncodeError, match=r"brokers\.host"):
        encode_response(RequestHeader(3, 1, 1, None), body)
    body = {"topics": [{"name": "t", "partitions": [{"leader_id": None}]}]}
    with pytest.raises(ValueError, match="leader_id"):
        encode_response(RequestHeader(3, 9, 1, None), body)
    with pytest.raises(ValueError, match="range|format"):
        encode_response(RequestHeader(3, 9, 1, None), {"controller_id": 1 << 40})


# ----------------------------------------------------------------- headers and responses


def test_flexible_response_has_header_v1_but_api_versions_keeps_v0() -> None:
    metadata = encode_response(RequestHeader(3, 8, 7, None), {})
    # v8 is not flexible: header v0, classic lengths.
    assert metadata == sized(
        h("00000007 | 00000000 | 00000000 | ffff | ffffffff | 00000000 | 80000000")
    )
    metadata = encode_response(RequestHeader(3, 9, 7, None), {})
    assert metadata[4:9] == h("00000007 | 00")  # v9 is: header v1 with its tag section
    api_versions = encode_response(RequestHeader(18, 3, 7, None), {})
    assert api_versions == sized(h("00000007 | 0000 | 01 | 00000000 | 00"))
    assert decode_response(18, 3, api_versions[4:])[0] == 7


def test_metadata_v9_response_literal() -> None:
    header = RequestHeader(3, 9, 7, None)
    assert encode_response(header, {}) == sized(
        h(
            "00000007 | 00"  # correlation id, header tagged fields
            "| 00000000"  # throttle_time_ms
            "| 01"  # brokers: compact array, empty
            "| 00"  # cluster_id: null
            "| ffffffff"  # controller_id -1
            "| 01"  # topics: empty
            "| 80000000"  # cluster_authorized_operations: default INT32_MIN
            "| 00"  # body tagged fields
        )
    )


def test_unsupported_api_versions_response_is_v0_with_error_35() -> None:
    frame = encode_unsupported_api_versions_response(99)
    expected_keys = b"".join(
        struct.pack(">hhh", key, low, high)
        for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
    )
    payload = h("00000063 | 0023") + struct.pack(">i", len(SUPPORTED_VERSIONS)) + expected_keys
    assert frame == sized(payload)
    # A client that asked at v3 falls back to reading v0, like Kafka's clients do.
    correlation_id, body = decode_response(18, 3, frame[4:])
    assert correlation_id == 99
    assert body["error_code"] == 35
    assert {item["api_key"] for item in body["api_keys"]} == set(SUPPORTED_VERSIONS)


def test_unsupported_versions_and_keys_carry_the_correlation_id() -> None:
    with pytest.raises(UnsupportedVersionError) as caught:
        decode_request(h("0012 0004 | 0000002a | 0001 63 | 00 | 01 01 00"))
    assert (caught.value.api_key, caught.value.api_version) == (18, 4)
    assert caught.value.correlation_id == 42
    with pytest.raises(UnsupportedVersionError) as caught:
        decode_request(h("03e7 0000 | 00000001 | ffff"))
    assert caught.value.api_key == 999
    with pytest.raises(UnsupportedVersionError):
        encode_request(0, 2, 1, None, {})
    with pytest.raises(UnsupportedVersionError):
        encode_response(RequestHeader(1, 13, 1, None), {})


def test_every_supported_api_has_request_and_response_descriptions() -> None:
    for api_key, (low, high) in SUPPORTED_VERSIONS.items():
        for table in (REQUESTS, RESPONSES):
            message = table[api_key]
            assert low in message.valid_versions and high in message.valid_versions


# --------------------------------------------------------------------------- tagged fields


def test_tagged_fields_round_trip_and_are_omitted_at_default() -> None:
    header = RequestHeader(18, 3, 5, None)
    body = {
        "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 9}],
        "finalized_features_epoch": 7,
        "zk_migration_ready": True,
    }
    frame = encode_response(header, body)
    assert frame[4:] == h(
        "00000005 | 0000 | 02 | 0000 0003 0009 00 | 00000000"
        "| 02"  # two tagged fields
        "| 01 08 0000000000000007"  # tag 1: finalized_features_epoch
        "| 03 01 01"  # tag 3: zk_migration_ready
    )
    _, decoded = decode_response(18, 3, frame[4:])
    assert decoded["finalized_features_epoch"] == 7
    assert decoded["zk_migration_ready"] is True
    assert decoded["supported_features"] == []
    # At their defaults the same fields are not written at all.
    frame = encode_response(header, {"finalized_features_epoch": -1, "zk_migration_ready": False})
    assert frame[4:].endswith(h("00000000 | 00"))


def test_tagged_struct_round_trip() -> None:
    header = RequestHeader(1, 12, 5, None)
    partition = {
        "partition_index": 2,
        "high_watermark": 10,
        "records": b"batch",
        "current_leader": {"leader_id": 3, "leader_epoch": 4},
    }
    frame = encode_response(header, {"responses": [{"topic": "t", "partitions": [partition]}]})
    _, body = decode_response(1, 12, frame[4:])
    decoded = body["responses"][0]["partitions"][0]
    assert decoded["current_leader"] == {"leader_id": 3, "leader_epoch": 4}
    assert decoded["diverging_epoch"] == {"epoch": -1, "end_offset": -1}
    assert decoded["records"] == b"batch"


def test_unknown_tagged_fields_are_skipped() -> None:
    frame = h(
        "0012 0003 | 00000002 | 0001 63"
        "| 01 | 07 02 abcd"  # header: unknown tag 7
        "| 05 666c7578 | 04 302e31"
        "| 02 | 00 01 ff | 09 03 010203"  # body: unknown tags 0 and 9
    )
    header, body = decode_request(frame)
    assert header.correlation_id == 2
    assert body == {"client_software_name": "flux", "client_software_version": "0.1"}


def test_known_tag_with_payload_past_its_size_is_rejected() -> None:
    # Tag 1 (finalized_features_epoch, int64) announced with a 2-byte payload.
    frame = h("00000005 | 0000 | 01 | 00000000 | 01 | 01 02 0000")
    with pytest.raises(InvalidFrameError):
        decode_response(18, 3, frame)


# ------------------------------------------------------------------------ malformed input


def test_huge_array_length_in_small_frame_fails_before_allocating() -> None:
    frame = h("0003 0001 | 00000003 | ffff | 7fffffff | 0001 61")
    with pytest.raises(InvalidFrameError):
        decode_request(frame)
    frame = h("0003 0001 | 00000003 | ffff | 00100000 | 0001 61")
    with pytest.raises(InvalidFrameError):
        decode_request(frame)


def test_negative_lengths_other_than_null_are_rejected() -> None:
    with pytest.raises(InvalidFrameError):
        decode_request(h("0003 0001 | 00000003 | ffff | fffffffe"))
    with pytest.raises(InvalidFrameError):
        decode_request(h("0003 0001 | 00000003 | fffe"))
    with pytest.raises(InvalidFrameError):
        decode_request(h("0003 0001 | 00000003 | ffff | 00000001 | fffe"))


def test_string_length_past_the_end_is_rejected() -> None:
    with pytest.raises(InvalidFrameError):
        decode_request(h("0003 0001 | 00000003 | ffff | 00000001 | 7fff 61"))
    with pytest.raises(InvalidFrameError):
        decode_request(h("0012 0003 | 00000002 | 0001 63 | 00 | ffffffff0f | 00 | 00"))


def test_truncated_frames_are_rejected_and_trailing_bytes_ignored() -> None:
    for cut in range(len(PRODUCE_V3)):
        with pytest.raises(ProtocolError):
            decode_request(PRODUCE_V3[:cut])
    # Like Kafka's brokers, bytes after a complete request body are ignored.
    assert decode_request(PRODUCE_V3 + b"\x00") == decode_request(PRODUCE_V3)


def test_librdkafka_all_topics_metadata_request_decodes() -> None:
    """The exact frame librdkafka 2.16 sends for list_topics() (three stray bytes at the end):
    rejecting it disconnected confluent-kafka's AdminClient.list_topics()."""
    frame = h("0003 000c | 00000003 | 0007 72646b61666b61 | 00 | 00 00 00 00 | 010000")
    header, body = decode_request(frame)
    assert (header.api_key, header.api_version, header.client_id) == (3, 12, "rdkafka")
    assert body["topics"] is None and body["allow_auto_topic_creation"] is False


def test_invalid_utf8_is_an_invalid_frame() -> None:
    with pytest.raises(InvalidFrameError):
        decode_request(h("0003 0001 | 00000003 | 0002 c328 | ffffffff"))


def test_overlong_varint_is_rejected() -> None:
    with pytest.raises(InvalidFrameError):
        decode_request(h("0012 0003 | 00000002 | 0001 63 | 00 | ffffffffff7f | 00 | 00"))


# ------------------------------------------------------------------------------ primitives


@pytest.mark.parametrize("value", [0, 1, -1, 63, -64, 64, 300, -300, (1 << 31) - 1, -(1 << 31)])
def test_varint_round_trip(value: int) -> None:
    encoded = p.write_varint(value)
    assert p.read_varint(memoryview(encoded), 0) == (value, len(encoded))


@pytest.mark.parametrize("value", [0, 1, -1, (1 << 63) - 1, -(1 << 63), 1 << 40])
def test_varlong_round_trip(value: int) -> None:
    encoded = p.write_varlong(value)
    assert p.read_varlong(memoryview(encoded), 0) == (value, len(encoded))


def test_known_varint_encodings() -> None:
    assert p.write_uvarint(0) == b"\x00"
    assert p.write_uvarint(300) == b"\xac\x02"
    assert p.write_varint(-1) == b"\x01"
    assert p.write_varint(1) == b"\x02"
    assert p.write_varlong(-(1 << 63)) == b"\xff" * 9 + b"\x01"


# -------------------------------------------------------------------------------- framing


def test_framing() -> None:
    assert framing.SIZE_PREFIX == 4
    assert framing.frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert framing.read_size(b"\x00\x00\x00\x03", limit=10) == 3
    with pytest.raises(InvalidFrameError):
        framing.read_size(b"\xff\xff\xff\xff", limit=10)
    with pytest.raises(FrameTooLargeError):
        framing.read_size(b"\x00\x00\x01\x00", limit=10)
    with pytest.raises(InvalidFrameError):
        framing.read_size(b"\x00\x00", limit=10)


# ------------------------------------------------ reference bytes from kafka-python's encoder


def _kafka_python_frame(message: object, correlation_id: int, client_id: str | None) -> bytes:
    message.with_header(correlation_id=correlation_id, client_id=client_id)  # type: ignore[attr-defined]
    return bytes(message.encode(header=True, framed=True))  # type: ignore[attr-defined]


def test_kafka_python_metadata_requests() -> None:
    from kafka.protocol.metadata import MetadataRequest as M

    topic = M.MetadataRequestTopic
    for version in (1, 5, 8):
        theirs = M[version](
            topics=[topic(name="a"), topic(name="bb")], allow_auto_topic_creation=False
        )
        ours = encode_request(
            3,
            version,
            11,
            "kp",
            {
                "topics": [{"name": "a"}, {"name": "bb"}],
                "allow_auto_topic_creation": False,
            },
        )
        assert ours == _kafka_python_frame(theirs, 11, "kp")
    topic_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    theirs = M[12](
        topics=[topic(topic_id=topic_id, name=None)],
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=True,
    )
    ours = encode_request(
        3,
        12,
        12,
        "kp",
        {
            "topics": [{"topic_id": topic_id, "name": None}],
            "include_topic_authorized_operations": True,
        },
    )
    assert ours == _kafka_python_frame(theirs, 12, "kp")
    theirs = M[4](topics=None, allow_auto_topic_creation=True)
    assert encode_request(3, 4, 1, None, {"topics": None}) == _kafka_python_frame(theirs, 1, None)


def test_kafka_python_produce_requests() -> None:
    from kafka.protocol.producer import ProduceRequest as P

    partition = P.TopicProduceData.PartitionProduceData
    for version in (3, 7, 9):
        theirs = P[version](
            transactional_id="tx" if version == 9 else None,
            acks=-1,
            timeout_ms=1500,
            topic_data=[
                P.TopicProduceData(
                    name="events",
                    partition_data=[
                        partition(index=0, records=b"\x01" * 70),
                        partition(index=5, records=None),
                    ],
                )
            ],
        )
        ours = encode_request(
            0,
            version,
            3,
            "kp",
            {
                "transactional_id": "tx" if version == 9 else None,
                "acks": -1,
                "timeout_ms": 1500,
                "topic_data": [
                    {
                        "name": "events",
                        "partition_data": [
                            {"index": 0, "records": b"\x01" * 70},
                            {"index": 5, "records": None},
                        ],
                    }
                ],
            },
        )
        assert ours == _kafka_python_frame(theirs, 3, "kp")


def test_kafka_python_fetch_requests_and_responses() -> None:
    from kafka.protocol.consumer import FetchRequest as F
    from kafka.protocol.consumer import FetchResponse as R

    for version in (4, 11, 12):
        theirs = F[version](
            replica_id=-1,
            max_wait_ms=500,
            min_bytes=1,
            max_bytes=52428800,
            isolation_level=1,
            session_id=0,
            session_epoch=-1,
            topics=[
                F.FetchTopic(
                    topic="t",
                    partitions=[
                        F.FetchTopic.FetchPartition(
                            partition=2,
                            current_leader_epoch=7,
                            fetch_offset=1000,
                            log_start_offset=-1,
                            partition_max_bytes=1048576,
                            last_fetched_epoch=-1,
                        )
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
        )
        ours = encode_request(
            1,
            version,
            9,
            "kp",
            {
                "max_wait_ms": 500,
                "min_bytes": 1,
                "max_bytes": 52428800,
                "isolation_level": 1,
                "topics": [
                    {
                        "topic": "t",
                        "partitions": [
                            {
                                "partition": 2,
                                "current_leader_epoch": 7,
                                "fetch_offset": 1000,
                                "partition_max_bytes": 1048576,
                            }
                        ],
                    }
                ],
            },
        )
        assert ours == _kafka_python_frame(theirs, 9, "kp")

    for version in (4, 11, 12):
        partition = {
            "partition_index": 2,
            "error_code": 0,
            "high_watermark": 1234,
            "last_stable_offset": 1234,
            "log_start_offset": 0,
            "aborted_transactions": None,
            "preferred_read_replica": -1,
            "records": b"\x00" * 61,
        }
        frame = encode_response(
            RequestHeader(1, version, 9, None),
            {
                "responses": [{"topic": "t", "partitions": [partition]}],
            },
        )
        decoded = R.decode(frame[4:], version=version, header=True)
        got = decoded.responses[0].partitions[0]
        assert (got.partition_index, got.high_watermark, bytes(got.records)) == (
            2,
            1234,
            b"\x00" * 61,
        )
        assert bytes(decoded.encode(header=True, framed=True)) == frame


def test_kafka_python_list_offsets_create_delete_describe() -> None:
    from kafka.protocol.admin import (
        CreateTopicsRequest,
        DeleteTopicsRequest,
        DescribeClusterRequest,
        DescribeConfigsRequest,
    )
    from kafka.protocol.consumer import ListOffsetsRequest as L

    for version in (1, 5, 7):
        theirs = L[version](
            replica_id=-1,
            isolation_level=0,
            topics=[
                L.ListOffsetsTopic(
                    name="t",
                    partitions=[
                        L.ListOffsetsTopic.ListOffsetsPartition(
                            partition_index=0, current_leader_epoch=-1, timestamp=-2
                        )
                    ],
                )
            ],
        )
        ours = encode_request(
            2,
            version,
            1,
            "kp",
            {
                "replica_id": -1,
                "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -2}]}],
            },
        )
        assert ours == _kafka_python_frame(theirs, 1, "kp")

    C = CreateTopicsRequest
    for version in (0, 3, 5):
        theirs = C[version](
            topics=[
                C.CreatableTopic(
                    name="new",
                    num_partitions=3,
                    replication_factor=2,
                    assignments=[],
                    configs=[
                        C.CreatableTopic.CreatableTopicConfig(name="retention.ms", value="1000")
                    ],
                )
            ],
            timeout_ms=30000,
            validate_only=False,
        )
        ours = encode_request(
            19,
            version,
            2,
            "kp",
            {
                "topics": [
                    {
                        "name": "new",
                        "num_partitions": 3,
                        "replication_factor": 2,
                        "configs": [{"name": "retention.ms", "value": "1000"}],
                    }
                ],
                "timeout_ms": 30000,
            },
        )
        assert ours == _kafka_python_frame(theirs, 2, "kp")

    for version in (0, 3, 4):
        theirs = DeleteTopicsRequest[version](topic_names=["a", "b"], timeout_ms=100)
        ours = encode_request(20, version, 3, "kp", {"topic_names": ["a", "b"], "timeout_ms": 100})
        assert ours == _kafka_python_frame(theirs, 3, "kp")

    D = DescribeConfigsRequest
    for version in (0, 1, 4):
        theirs = D[version](
            resources=[
                D.DescribeConfigsResource(
                    resource_type=2, resource_name="t", configuration_keys=None
                )
            ],
            include_synonyms=False,
            include_documentation=False,
        )
        ours = encode_request(
            32,
            version,
            4,
            "kp",
            {"resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": None}]},
        )
        assert ours == _kafka_python_frame(theirs, 4, "kp")

    for version in (0, 1):
        theirs = DescribeClusterRequest[version](include_cluster_authorized_operations=True)
        ours = encode_request(60, version, 5, "kp", {"include_cluster_authorized_operations": True})
        assert ours == _kafka_python_frame(theirs, 5, "kp")


ALTER_CONFIGS_BODY = {
    "resources": [
        {
            "resource_type": 2,
            "resource_name": "t",
            "configs": [{"name": "a", "value": "1"}, {"name": "b", "value": None}],
        }
    ],
    "validate_only": True,
}
ALTER_CONFIGS_V0 = h(
    "0021 0000 | 00000001 | 0001 63"  # header v1, client_id "c"
    "| 00000001 | 02 | 0001 74"  # one resource: topic (2) "t"
    "| 00000002 | 0001 61 | 0001 31 | 0001 62 | ffff"  # a=1, b=null (delete)
    "| 01"  # validate_only
)
# v2 is flexible: header v2, compact arrays and strings (length + 1), tagged-field sections.
ALTER_CONFIGS_V2 = h(
    "0021 0002 | 00000001 | 0001 63 | 00"
    "| 02 | 02 | 02 74"
    "| 03 | 02 61 | 02 31 | 00 | 02 62 | 00 | 00"
    "| 00 | 01 | 00"
)


def test_alter_configs_requests_of_every_version() -> None:
    """AlterConfigs (33) v0-v2: literal bytes, and the same bytes kafka-python writes."""
    from kafka.protocol.admin import AlterConfigsRequest as A

    assert decode_request(ALTER_CONFIGS_V0) == (RequestHeader(33, 0, 1, "c"), ALTER_CONFIGS_BODY)
    assert decode_request(ALTER_CONFIGS_V2) == (RequestHeader(33, 2, 1, "c"), ALTER_CONFIGS_BODY)
    assert encode_request(33, 0, 1, "c", ALTER_CONFIGS_BODY) == sized(ALTER_CONFIGS_V0)
    assert encode_request(33, 2, 1, "c", ALTER_CONFIGS_BODY) == sized(ALTER_CONFIGS_V2)
    config = A.AlterConfigsResource.AlterableConfig
    for version in (0, 1, 2):
        theirs = A[version](
            resources=[
                A.AlterConfigsResource(
                    resource_type=2,
                    resource_name="t",
                    configs=[config(name="a", value="1"), config(name="b", value=None)],
                )
            ],
            validate_only=True,
        )
        ours = encode_request(33, version, 1, "c", ALTER_CONFIGS_BODY)
        assert ours == _kafka_python_frame(theirs, 1, "c")
        assert decode_request(ours[4:]) == (RequestHeader(33, version, 1, "c"), ALTER_CONFIGS_BODY)


def test_alter_configs_responses_of_every_version() -> None:
    from kafka.protocol.admin import AlterConfigsResponse

    body = {
        "throttle_time_ms": 0,
        "responses": [
            {"error_code": 0, "error_message": None, "resource_type": 2, "resource_name": "t"},
            {
                "error_code": 40,
                "error_message": "topic config retention.ms: expected an integer",
                "resource_type": 2,
                "resource_name": "u",
            },
        ],
    }
    for version in (0, 1, 2):
        frame = encode_response(RequestHeader(33, version, 8, None), body)
        assert decode_response(33, version, frame[4:]) == (8, body)
        theirs = AlterConfigsResponse.decode(frame[4:], version=version, header=True)
        assert [r.error_message for r in theirs.responses] == [
            None,
            "topic config retention.ms: expected an integer",
        ]
        assert bytes(theirs.encode(header=True, framed=True)) == frame


def test_kafka_python_api_versions_request_v3() -> None:
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    theirs = ApiVersionsRequest[3](
        client_software_name="kafka-python", client_software_version="3.0"
    )
    frame = _kafka_python_frame(theirs, 1, "kp")
    header, body = decode_request(frame[4:])
    assert header == RequestHeader(18, 3, 1, "kp")
    assert body == {"client_software_name": "kafka-python", "client_software_version": "3.0"}
    # kafka-python reads our unsupported-version answer (it retries at our maximum).
    unsupported = ApiVersionsResponse.decode(
        encode_unsupported_api_versions_response(1)[4:], version=4, header=True
    )
    assert unsupported.error_code == 35
    assert {item.api_key: item.max_version for item in unsupported.api_keys}[18] == 3


def test_old_versions_match_kafka_python_legacy_structs() -> None:
    """Versions Kafka 4 dropped, checked against kafka-python's hand-written legacy structs."""
    from kafka.protocol.old import commit, list_offsets, offset_for_leader_epoch

    cases = [
        (
            REQUESTS[ApiKey.LIST_OFFSETS],
            0,
            list_offsets.ListOffsetsRequest_v0(replica_id=-1, topics=[("t", [(0, -1, 1)])]),
            {"replica_id": -1, "topics": [{"name": "t", "partitions": [{"timestamp": -1}]}]},
        ),
        (
            RESPONSES[ApiKey.LIST_OFFSETS],
            0,
            list_offsets.ListOffsetsResponse_v0(topics=[("t", [(0, 0, [5, 3])])]),
            {"topics": [{"name": "t", "partitions": [{"old_style_offsets": [5, 3]}]}]},
        ),
        (
            REQUESTS[ApiKey.OFFSET_COMMIT],
            0,
            commit.OffsetCommitRequest_v0(group_id="g", topics=[("t", [(1, 5, "m")])]),
            {
                "group_id": "g",
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {"partition_index": 1, "committed_offset": 5, "committed_metadata": "m"}
                        ],
                    }
                ],
            },
        ),
        (
            REQUESTS[ApiKey.OFFSET_COMMIT],
            1,
            commit.OffsetCommitRequest_v1(
                group_id="g",
                generation_id_or_member_epoch=3,
                member_id="m1",
                topics=[("t", [(1, 5, 1234, "")])],
            ),
            {
                "group_id": "g",
                "generation_id_or_member_epoch": 3,
                "member_id": "m1",
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {
                                "partition_index": 1,
                                "committed_offset": 5,
                                "commit_timestamp": 1234,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            },
        ),
        (
            REQUESTS[ApiKey.OFFSET_FETCH],
            0,
            commit.OffsetFetchRequest_v0(group_id="g", topics=[("t", [0, 1])]),
            {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]},
        ),
        (
            RESPONSES[ApiKey.OFFSET_FETCH],
            0,
            commit.OffsetFetchResponse_v0(topics=[("t", [(0, 9, "", 0)])]),
            {"topics": [{"name": "t", "partitions": [{"committed_offset": 9, "metadata": ""}]}]},
        ),
        (
            REQUESTS[ApiKey.OFFSET_FOR_LEADER_EPOCH],
            0,
            offset_for_leader_epoch.OffsetForLeaderEpochRequest_v0(topics=[("t", [(0, 4)])]),
            {"topics": [{"topic": "t", "partitions": [{"partition": 0, "leader_epoch": 4}]}]},
        ),
        (
            RESPONSES[ApiKey.OFFSET_FOR_LEADER_EPOCH],
            0,
            offset_for_leader_epoch.OffsetForLeaderEpochResponse_v0(topics=[("t", [(0, 0, 77)])]),
            {"topics": [{"topic": "t", "partitions": [{"end_offset": 77}]}]},
        ),
    ]
    for message, version, theirs, body in cases:
        expected = bytes(theirs.encode())
        assert message.encode(version, body) == expected, (message.name, version)
        decoded, end = message.decode(memoryview(expected), 0, version)
        assert end == len(expected)
        assert message.encode(version, decoded) == expected


def test_aiokafka_reads_and_rewrites_our_responses() -> None:
    """aiokafka has its own hand-written structs; it must read our bytes and write them back."""
    from aiokafka.protocol.fetch import FetchResponse_v4, FetchResponse_v11
    from aiokafka.protocol.metadata import MetadataResponse_v5
    from aiokafka.protocol.produce import ProduceResponse_v7

    partition = {
        "partition_index": 2,
        "high_watermark": 10,
        "aborted_transactions": [{"producer_id": 5, "first_offset": 6}],
        "records": b"rec",
    }
    fetch = {"throttle_time_ms": 1, "responses": [{"topic": "t", "partitions": [partition]}]}
    metadata = {
        "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
        "cluster_id": "c",
        "controller_id": 1,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "leader_id": 1, "replica_nodes": [1], "isr_nodes": [1]}
                ],
            }
        ],
    }
    produce = {
        "responses": [
            {
                "name": "t",
                "partition_responses": [{"index": 0, "base_offset": 7, "log_start_offset": 0}],
            }
        ]
    }
    cases = [
        (FetchResponse_v4, ApiKey.FETCH, 4, fetch),
        (FetchResponse_v11, ApiKey.FETCH, 11, fetch),
        (MetadataResponse_v5, ApiKey.METADATA, 5, metadata),
        (ProduceResponse_v7, ApiKey.PRODUCE, 7, produce),
    ]
    for theirs, api_key, version, body in cases:
        raw = RESPONSES[api_key].encode(version, body)
        assert bytes(theirs.decode(raw).encode()) == raw, (theirs.__name__, version)
