"""The broker's Kafka APIs beyond produce/consume: acks=0, fetch long-poll, ListOffsets by
timestamp, topic lifecycle, configs, cluster description, auto-creation and memory topics."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode
from flux.protocol.records import RecordSpec, build_batch
from flux.sdk.wire import KafkaConnection

from tests.integration.helpers import (
    create_topic,
    fetch,
    list_offset,
    produce,
    produce_values,
    read_values,
    wait_until,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def conn(broker):
    with KafkaConnection.from_bootstrap(broker.bootstrap_servers) as connection:
        yield connection


def test_acks_zero_gets_no_response_but_is_written(conn) -> None:
    from flux.protocol.api import encode_request

    assert create_topic(conn, "fire") == ErrorCode.NONE
    body = {
        "transactional_id": None,
        "acks": 0,
        "timeout_ms": 1000,
        "topic_data": [
            {
                "name": "fire",
                "partition_data": [{"index": 0, "records": build_batch([(None, b"f", ())])}],
            }
        ],
    }
    conn.send_raw(encode_request(ApiKey.PRODUCE, 7, 999, "raw", body))
    # The next response on this connection answers the next request, not the acks=0 produce.
    assert read_values(conn, "fire") == [(0, b"f")]


def test_fetch_long_poll_wakes_on_append(conn, broker) -> None:
    assert create_topic(conn, "poll") == ErrorCode.NONE
    produce_values(conn, "poll", [b"first"])
    results: list[dict] = []

    def long_poll() -> None:
        with KafkaConnection.from_bootstrap(broker.bootstrap_servers) as waiting:
            results.append(fetch(waiting, "poll", 1, max_wait_ms=20_000, min_bytes=1))

    thread = threading.Thread(target=long_poll)
    thread.start()
    time.sleep(0.2)  # let the fetch reach the broker and park; the append below must wake it
    produce_values(conn, "poll", [b"second"])
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert results[0]["error_code"] == ErrorCode.NONE
    assert results[0]["records"], "the parked fetch returned without the appended batch"
    assert results[0]["high_watermark"] == 2


def test_fetch_waits_max_wait_when_min_bytes_unmet(conn) -> None:
    assert create_topic(conn, "idle") == ErrorCode.NONE
    started = time.monotonic()
    result = fetch(conn, "idle", 0, max_wait_ms=300, min_bytes=1)
    assert time.monotonic() - started >= 0.3
    assert result["error_code"] == ErrorCode.NONE and not result["records"]


def test_fetch_beyond_end_is_out_of_range(conn) -> None:
    assert create_topic(conn, "short") == ErrorCode.NONE
    produce_values(conn, "short", [b"a", b"b"])
    assert fetch(conn, "short", 3)["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
    assert fetch(conn, "short", 2)["records"] in (b"", None)


def test_list_offsets_earliest_latest_and_by_timestamp(conn) -> None:
    assert create_topic(conn, "times") == ErrorCode.NONE
    base = 1_700_000_000_000
    for batch in range(3):
        records = build_batch(
            [
                RecordSpec(None, b"%d-%d" % (batch, i), (), base + batch * 1000 + i * 100)
                for i in range(5)
            ]
        )
        assert produce(conn, "times", records)["error_code"] == ErrorCode.NONE
    assert list_offset(conn, "times", -2)["offset"] == 0
    assert list_offset(conn, "times", -1)["offset"] == 15
    exact = list_offset(conn, "times", base + 1250)
    assert (exact["offset"], exact["timestamp"]) == (8, base + 1300)
    assert list_offset(conn, "times", base)["offset"] == 0
    assert list_offset(conn, "times", base + 10_000)["offset"] == -1
    v0 = conn.request(
        ApiKey.LIST_OFFSETS,
        0,
        {
            "replica_id": -1,
            "topics": [
                {
                    "name": "times",
                    "partitions": [{"partition_index": 0, "timestamp": -1, "max_num_offsets": 1}],
                }
            ],
        },
    )
    assert v0["topics"][0]["partitions"][0]["old_style_offsets"] == [15]


def test_list_offsets_max_timestamp(conn, broker) -> None:
    """ListOffsets v7's MAX_TIMESTAMP (-3, KIP-734), asked by confluent-kafka's AdminClient:
    the first record carrying the largest timestamp, across batches, on a disk and a memory
    topic; none (-1) in an empty partition; a v6 request naming it is refused."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    base = 1_700_000_000_000
    batches = [[base + 1000, base + 2000], [base + 9000, base + 500, base + 9000], [base + 4000]]
    for name, configs in (("peaks", {}), ("peaks-memory", {"storage": "memory"})):
        assert create_topic(conn, name, 2, **configs) == ErrorCode.NONE
        for stamps in batches:
            records = build_batch([RecordSpec(None, b"v", (), stamp) for stamp in stamps])
            assert produce(conn, name, records)["error_code"] == ErrorCode.NONE
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    asked = {
        TopicPartition(name, index): OffsetSpec.max_timestamp()
        for name in ("peaks", "peaks-memory")
        for index in (0, 1)
    }
    answers = {
        (tp.topic, tp.partition): future.result(timeout=30)
        for tp, future in admin.list_offsets(asked).items()
    }
    for name in ("peaks", "peaks-memory"):
        found = answers[(name, 0)]
        assert (found.offset, found.timestamp) == (2, base + 9000), name
        assert answers[(name, 1)].offset == -1  # nothing stored there
    old = conn.request(
        ApiKey.LIST_OFFSETS,
        6,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": "peaks", "partitions": [{"partition_index": 0, "timestamp": -3}]}],
        },
    )
    assert old["topics"][0]["partitions"][0]["error_code"] == ErrorCode.INVALID_REQUEST


def test_delete_topic_removes_data_and_name_can_be_reused(conn, broker) -> None:
    assert create_topic(conn, "doomed", partitions=2) == ErrorCode.NONE
    produce_values(conn, "doomed", [b"old"])
    assert (broker.data_dir / "doomed-0").is_dir()
    response = conn.request(
        ApiKey.DELETE_TOPICS, 4, {"topic_names": ["doomed", "never-was"], "timeout_ms": 1000}
    )
    codes = {item["name"]: item["error_code"] for item in response["responses"]}
    assert codes == {"doomed": ErrorCode.NONE, "never-was": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert not (broker.data_dir / "doomed-0").exists()
    metadata = conn.request(
        ApiKey.METADATA, 5, {"topics": [{"name": "doomed"}], "allow_auto_topic_creation": False}
    )
    assert metadata["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert create_topic(conn, "doomed") == ErrorCode.NONE
    assert read_values(conn, "doomed") == []


def test_the_group_offsets_topic_cannot_be_deleted(conn) -> None:
    """__consumer_offsets (created by the first FindCoordinator of a group) holds every
    group's positions: DeleteTopics refuses it by name, naming why, and it stays."""
    found = conn.request(ApiKey.FIND_COORDINATOR, 3, {"key": "keeper", "key_type": 0})
    assert found["error_code"] in (ErrorCode.NONE, ErrorCode.COORDINATOR_NOT_AVAILABLE)

    def offsets_topic() -> dict:
        answer = conn.request(
            ApiKey.METADATA,
            5,
            {"topics": [{"name": "__consumer_offsets"}], "allow_auto_topic_creation": False},
        )
        return answer["topics"][0]

    wait_until(lambda: offsets_topic()["error_code"] == ErrorCode.NONE)
    response = conn.request(
        ApiKey.DELETE_TOPICS, 5, {"topic_names": ["__consumer_offsets"], "timeout_ms": 1000}
    )
    (refused,) = response["responses"]
    assert refused["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "cannot be deleted" in refused["error_message"]
    assert offsets_topic()["error_code"] == ErrorCode.NONE


def test_metadata_auto_create_and_topic_ids(conn, broker) -> None:
    created = conn.request(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [{"name": "ids", "num_partitions": 2, "replication_factor": 1}],
            "timeout_ms": 1000,
        },
    )
    topic_id = created["topics"][0]["topic_id"]
    assert topic_id != uuid.UUID(int=0)
    metadata = conn.request(
        ApiKey.METADATA,
        12,
        {"topics": [{"name": "ids"}, {"name": "auto-made"}], "allow_auto_topic_creation": True},
    )
    by_name = {topic["name"]: topic for topic in metadata["topics"]}
    assert by_name["ids"]["topic_id"] == topic_id
    assert [p["leader_id"] for p in by_name["ids"]["partitions"]] == [1, 1]
    assert by_name["auto-made"]["error_code"] == ErrorCode.NONE
    assert metadata["brokers"] == [
        {"node_id": 1, "host": "127.0.0.1", "port": broker.kafka_port, "rack": None}
    ]
    refused = conn.request(
        ApiKey.METADATA, 12, {"topics": [{"name": "not-made"}], "allow_auto_topic_creation": False}
    )
    assert refused["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    everything = conn.request(ApiKey.METADATA, 12, {"topics": None})
    assert {topic["name"] for topic in everything["topics"]} == {"ids", "auto-made"}


def test_admin_describe_configs_and_cluster(broker) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics(
        [
            NewTopic(
                "configured",
                num_partitions=1,
                replication_factor=1,
                config={"retention.ms": "12345"},
            )
        ]
    )["configured"].result(timeout=30)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "configured")
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["retention.ms"].value == "12345"
    assert configs["retention.ms"].source == 1  # DYNAMIC_TOPIC_CONFIG
    assert configs["segment.bytes"].is_default
    broker_resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    broker_configs = admin.describe_configs([broker_resource])[broker_resource].result(timeout=30)
    assert broker_configs["message.max.bytes"].value == "1048588"
    cluster = admin.describe_cluster().result(timeout=30)
    assert cluster.cluster_id == "flux-local"
    assert [node.id for node in cluster.nodes] == [1]


def test_memory_topic_serves_like_a_disk_topic(conn, broker) -> None:
    assert create_topic(conn, "volatile", storage="memory") == ErrorCode.NONE
    produce_values(conn, "volatile", [b"m1", b"m2"])
    assert read_values(conn, "volatile") == [(0, b"m1"), (1, b"m2")]
    assert not (broker.data_dir / "volatile-0").exists()


def test_min_insync_replicas_above_one_refuses_acks_all(conn) -> None:
    assert create_topic(conn, "strict", min_insync_replicas="2") == ErrorCode.NONE
    records = build_batch([(None, b"v", ())])
    assert produce(conn, "strict", records, acks=-1)["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
    assert produce(conn, "strict", records, acks=1)["error_code"] == ErrorCode.NONE
