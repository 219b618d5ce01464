"""``__consumer_offsets`` is compacted, offsets expire by Kafka's retention rules, and
OffsetDelete removes them: real nodes, real clients (confluent-kafka, kafka-python) and raw
requests where a client cannot say exactly what is needed.

* an idle group's single commit survives hundreds of segment rolls of ``__consumer_offsets``,
  a topic retention of two seconds, the log cleaner and two SIGKILLed coordinators;
* OffsetDelete through kafka-python's admin client, with GROUP_SUBSCRIBED_TO_TOPIC,
  NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, INVALID_GROUP_ID and NOT_COORDINATOR, and tombstones
  in the log;
* the offsets of an empty group, of a standalone commit and of a topic a live group no longer
  subscribes to expire after ``offsets_retention_ms``; a live group's and a live push
  subscription's do not;
* a ``__consumer_offsets`` and a ``__flux_spark_sink`` created with ``cleanup.policy=delete``
  are converted to ``compact`` by the brokers.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from flux.cluster.groups.offsets_records import (
    GroupMetadataEntry,
    OffsetCommitEntry,
    offset_commit_record,
    parse_record,
    partition_for_group,
)
from flux.protocol.api import ApiKey, encode_request
from flux.protocol.errors import ErrorCode
from flux.protocol.records import build_batch
from flux.sdk.consumer_protocol import Subscription, encode_subscription
from flux.sdk.wire import KafkaConnection

from tests.integration.cluster_helpers import partitions
from tests.integration.helpers import (
    create_topic,
    join_as_only_member,
    list_offset,
    read_records,
    wait_until,
)
from tests.integration.http_helpers import call, metrics_text

pytestmark = pytest.mark.integration

OFFSETS = "__consumer_offsets"
SPARK_MARKERS = "__flux_spark_sink"
GROUPS_AT_ONCE = {"group_initial_rebalance_delay_ms": 0}
TOPIC_RESOURCE = 2


# ------------------------------------------------------------------------ raw requests


def _find_coordinator(node, group: str) -> dict[str, Any] | None:
    """The coordinator entry ``node`` answers for ``group``, or None while there is none."""
    try:
        with KafkaConnection.from_bootstrap(node.bootstrap_servers, timeout_s=5) as conn:
            found = conn.request(ApiKey.FIND_COORDINATOR, 2, {"key": group, "key_type": 0})
    except OSError:
        return None
    return found if found["error_code"] == ErrorCode.NONE else None


def _coordinator(node, group: str) -> KafkaConnection:
    found = wait_until(lambda: _find_coordinator(node, group))
    return KafkaConnection(found["host"], found["port"])


def _coordinator_node(nodes, group: str):
    found = wait_until(lambda: _find_coordinator(next(n for n in nodes if n.is_running()), group))
    return next(node for node in nodes if node.node_id == found["node_id"])


def _commit(
    conn: KafkaConnection,
    group: str,
    offsets: dict[tuple[str, int], int],
    *,
    member_id: str = "",
    generation: int = -1,
) -> list[int]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": index, "committed_offset": offset, "committed_metadata": None}
        )
    body = {
        "group_id": group,
        "generation_id_or_member_epoch": generation,
        "member_id": member_id,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
    }
    answer = conn.request(ApiKey.OFFSET_COMMIT, 3, body)
    return [p["error_code"] for t in answer["topics"] for p in t["partitions"]]


def _committed(conn: KafkaConnection, group: str) -> dict[tuple[str, int], int] | ErrorCode:
    """Every offset ``group`` committed (OffsetFetch v2+, null topics), or the group error."""
    answer = conn.request(ApiKey.OFFSET_FETCH, 5, {"group_id": group, "topics": None})
    if answer["error_code"] != ErrorCode.NONE:
        return ErrorCode(answer["error_code"])
    return {
        (topic["name"], part["partition_index"]): part["committed_offset"]
        for topic in answer["topics"]
        for part in topic["partitions"]
    }


def _heartbeat(conn: KafkaConnection, group: str, member_id: str, generation: int) -> int:
    body = {"group_id": group, "generation_id": generation, "member_id": member_id}
    return conn.request(ApiKey.HEARTBEAT, 3, body)["error_code"]


def _leave(conn: KafkaConnection, group: str, member_id: str) -> None:
    answer = conn.request(ApiKey.LEAVE_GROUP, 1, {"group_id": group, "member_id": member_id})
    assert answer["error_code"] == ErrorCode.NONE, answer


def _offset_delete(
    conn: KafkaConnection, group: str, topics: dict[str, list[int]]
) -> tuple[int, dict[tuple[str, int], int]]:
    body = {
        "group_id": group,
        "topics": [
            {"name": name, "partitions": [{"partition_index": i} for i in indexes]}
            for name, indexes in topics.items()
        ],
    }
    answer = conn.request(ApiKey.OFFSET_DELETE, 0, body)
    return answer["error_code"], {
        (topic["name"], part["partition_index"]): part["error_code"]
        for topic in answer["topics"]
        for part in topic["partitions"]
    }


def _list_groups(conn: KafkaConnection) -> set[str]:
    answer = conn.request(ApiKey.LIST_GROUPS, 3, {})
    return {group["group_id"] for group in answer["groups"]}


def _topic_configs(node, topic: str) -> dict[str, str]:
    with KafkaConnection.from_bootstrap(node.bootstrap_servers, timeout_s=5) as conn:
        answer = conn.request(
            ApiKey.DESCRIBE_CONFIGS,
            1,
            {
                "resources": [
                    {
                        "resource_type": TOPIC_RESOURCE,
                        "resource_name": topic,
                        "configuration_keys": None,
                    }
                ],
                "include_synonyms": False,
            },
        )
    result = answer["results"][0]
    assert result["error_code"] == ErrorCode.NONE, result
    return {entry["name"]: entry["value"] for entry in result["configs"]}


def _offsets_log(conn: KafkaConnection, group: str) -> list[Any]:
    """Every record of ``group``'s offsets partition from its log start, parsed (tombstones
    too)."""
    count = len(_partitions_of(conn, OFFSETS))
    partition = partition_for_group(group, count)
    start = list_offset(conn, OFFSETS, -2, partition=partition)["offset"]
    records = read_records(conn, OFFSETS, partition=partition, start=start)
    return [parse_record(record.key, record.value) for record in records]


def _partitions_of(conn: KafkaConnection, topic: str) -> list[dict[str, Any]]:
    answer = conn.request(
        ApiKey.METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}
    )
    return answer["topics"][0]["partitions"]


def _subscription(*topics: str) -> bytes:
    return encode_subscription(Subscription(topics=list(topics)))


def _segment_bases(node, topic: str, partition: int = 0) -> set[int]:
    directory = Path(node.data_dir) / f"{topic}-{partition}"
    return {int(path.stem) for path in directory.glob("*.log")}


def _wait_all_in_sync(asked, nodes) -> None:
    """Every replica of ``__consumer_offsets``-0 is in its ISR; on failure the nodes' logs say
    why (a restarted replica that cannot open its log never catches up)."""
    try:
        wait_until(lambda: len(partitions(asked, OFFSETS)[0]["isr_nodes"]) == 3, timeout_s=60)
    except AssertionError:
        logs = "\n".join(f"--- node {n.node_id}\n{n.log_tail(15)}" for n in nodes)
        raise AssertionError(f"{OFFSETS}-0 never got all replicas back in sync:\n{logs}") from None


def _cleans(node) -> float:
    for line in metrics_text(node).splitlines():
        if line.startswith("flux_log_cleaner_cleans_total "):
            return float(line.split()[1])
    return 0.0


# -------------------------------------------------------------- the durability test


def test_idle_group_offset_survives_rolls_retention_cleaning_and_coordinator_kills(
    cluster_factory,
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    nodes = cluster_factory(
        3,
        broker={
            **GROUPS_AT_ONCE,
            "offsets_topic_segment_bytes": 1024,
            "offsets_topic_partitions": 1,
            "retention_check_interval_ms": 100,
        },
        topic={"retention_ms": 2000, "segment_ms": 1000},
        cleaner={"backoff_ms": 100},
    )
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    with KafkaConnection.from_bootstrap(nodes[0].bootstrap_servers, timeout_s=15) as conn:
        assert create_topic(conn, "work") == ErrorCode.NONE

    # The idle group: a confluent-kafka consumer joins, commits offset 42 once and leaves.
    idle = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "idle",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
        }
    )
    try:
        idle.subscribe(["work"])
        wait_until(lambda: idle.poll(0.2) is None and idle.assignment(), timeout_s=30)
        idle.commit(offsets=[TopicPartition("work", 0, 42)], asynchronous=False)
    finally:
        idle.close()
    idle_committed_at = time.monotonic()

    configs = _topic_configs(nodes[0], OFFSETS)
    assert configs["cleanup.policy"] == "compact"
    assert configs["segment.bytes"] == "1024"
    coordinator = _coordinator_node(nodes, "idle")
    others = [node for node in nodes if node is not coordinator]
    with KafkaConnection.from_bootstrap(others[0].bootstrap_servers) as conn:
        error, _ = _offset_delete(conn, "idle", {"work": [0]})
        assert error == ErrorCode.NOT_COORDINATOR

    # The busy group commits thousands of times: every segment holds a few commits only, so
    # the partition rolls hundreds of times. Between two looks at the directory at least
    # one segment rolled, so every look finds a new active segment.
    # The smallest commit record (offset 0; a commit time has 13 digits until 2286).
    key, value = offset_commit_record("busy", "work", 0, 0, -1, None, 10**12)
    per_segment = 1024 // len(build_batch([(key, value, ())]))
    commits = 3000
    seen_segments: set[int] = set()
    cleans_before = {node.node_id: _cleans(node) for node in nodes}
    with _coordinator(nodes[0], "busy") as conn:
        for offset in range(commits):
            assert _commit(conn, "busy", {("work", 0): offset}) == [ErrorCode.NONE]
            if offset % (per_segment + 1) == 0:
                seen_segments |= _segment_bases(coordinator, OFFSETS)
        assert _committed(conn, "busy") == {("work", 0): commits - 1}
        log_end = list_offset(conn, OFFSETS, -1)["offset"]
    assert log_end >= commits
    assert len(seen_segments) >= commits // (per_segment + 1), (len(seen_segments), per_segment)
    assert len(seen_segments) >= 200

    # Every replica cleans its own log: the rolled segments collapse into a few, while the
    # topic's retention (2 s, checked every 100 ms) deletes nothing of a compact-only log.
    wait_until(
        lambda: all(_cleans(node) > cleans_before[node.node_id] for node in nodes), timeout_s=60
    )
    wait_until(lambda: all(len(_segment_bases(node, OFFSETS)) < 50 for node in nodes), timeout_s=60)
    wait_until(lambda: time.monotonic() - idle_committed_at > 3, timeout_s=10)
    with _coordinator(nodes[0], "idle") as conn:
        assert list_offset(conn, OFFSETS, -2)["offset"] == 0  # nothing deleted by age
        assert _committed(conn, "idle") == {("work", 0): 42}

    # Two coordinator SIGKILLs; the group moves each time and loads from the new leader's
    # own (independently compacted) replica.
    for _ in range(2):
        _wait_all_in_sync(others[0], nodes)
        coordinator = _coordinator_node(nodes, "idle")
        coordinator.kill()
        survivors = [node for node in nodes if node is not coordinator]

        def moved_and_intact(survivors=survivors, dead=coordinator) -> bool:
            found = _find_coordinator(survivors[0], "idle")
            if found is None or found["node_id"] == dead.node_id:
                return False
            try:
                with KafkaConnection(found["host"], found["port"], timeout_s=5) as conn:
                    return _committed(conn, "idle") == {("work", 0): 42}
            except OSError:
                return False

        wait_until(moved_and_intact, timeout_s=60)
        coordinator.start()
        coordinator.wait_ready()
        others = survivors

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "idle"})
    try:
        committed = reader.committed([TopicPartition("work", 0)], timeout=30)
    finally:
        reader.close()
    assert [(tp.topic, tp.partition, tp.offset) for tp in committed] == [("work", 0, 42)]


# ------------------------------------------------------------------------- OffsetDelete


def test_offset_delete_through_kafka_python_admin(node_factory) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import (
        GroupIdNotFoundError,
        GroupSubscribedToTopicError,
        NoError,
        RebalanceInProgressError,
    )
    from kafka.structs import OffsetAndMetadata

    node = node_factory(broker=GROUPS_AT_ONCE)
    with KafkaConnection.from_bootstrap(node.bootstrap_servers, timeout_s=15) as conn:
        for name in ("work", "old"):
            assert create_topic(conn, name) == ErrorCode.NONE
    work, old = TopicPartition("work", 0), TopicPartition("old", 0)
    consumer = KafkaConsumer(
        bootstrap_servers=node.bootstrap_servers, group_id="reader", enable_auto_commit=False
    )
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap_servers)
    try:
        # kafka-python assigns nothing for a topic its metadata does not show yet, and does
        # not look again for minutes: let it see "work" first.
        wait_until(lambda: consumer.partitions_for_topic("work"))
        consumer.subscribe(["work"])
        wait_until(lambda: consumer.poll(timeout_ms=200) is not None and consumer.assignment())

        def committed() -> bool:
            # On a loaded machine the member may be rejoining (a heartbeat came late): as the
            # error says, poll to finish the rebalance and commit again.
            try:
                consumer.commit(
                    {work: OffsetAndMetadata(5, "", -1), old: OffsetAndMetadata(7, "", -1)}
                )
            except RebalanceInProgressError:
                consumer.poll(timeout_ms=200)
                return False
            return True

        wait_until(committed)

        # A live member subscribes to "work": only "old" may go.
        results = admin.delete_group_offsets("reader", [work, old])
        assert results == {work: GroupSubscribedToTopicError, old: NoError}
        assert admin.list_group_offsets("reader") == {
            "reader": {work: OffsetAndMetadata(5, "", -1)}
        }

        consumer.close()  # the group is empty now: anything may go
        assert admin.delete_group_offsets("reader", [work]) == {work: NoError}
        assert admin.list_group_offsets("reader") == {"reader": {}}
        # No member and no offset left: the group is gone, as in Kafka.
        with pytest.raises(GroupIdNotFoundError):
            admin.delete_group_offsets("reader", [work])
        with pytest.raises(GroupIdNotFoundError):
            admin.delete_group_offsets("never-existed", [work])
    finally:
        consumer.close()
        admin.close()

    with _coordinator(node, "reader") as conn:
        tombstones = [
            entry
            for entry in _offsets_log(conn, "reader")
            if isinstance(entry, OffsetCommitEntry)
            and entry.group == "reader"
            and entry.committed is None
        ]
        assert {(e.topic, e.partition) for e in tombstones} == {("work", 0), ("old", 0)}
        assert any(
            isinstance(entry, GroupMetadataEntry) and entry.group == "reader" and not entry.record
            for entry in _offsets_log(conn, "reader")
        ), "the emptied group's metadata tombstone"


def test_offset_delete_refusals_and_odd_requests_keep_the_connection(node_factory) -> None:
    node = node_factory(broker=GROUPS_AT_ONCE)
    with _coordinator(node, "connectors") as conn:
        # Members of a protocol other than the consumer's: what they read is unknown.
        member_id, generation = join_as_only_member(
            conn, "connectors", metadata=b"opaque", protocol_type="connect", timeout_ms=30000
        )
        assert _commit(
            conn, "connectors", {("work", 0): 1}, member_id=member_id, generation=generation
        ) == [ErrorCode.NONE]
        assert _offset_delete(conn, "connectors", {"work": [0]}) == (
            ErrorCode.NON_EMPTY_GROUP,
            {},
        )
        # A consumer member whose subscription does not decode: every topic counts as its.
        garbled, garbled_generation = join_as_only_member(
            conn, "garbled", metadata=b"\x00", timeout_ms=30000
        )
        assert _commit(
            conn, "garbled", {("old", 0): 1}, member_id=garbled, generation=garbled_generation
        ) == [ErrorCode.NONE]
        assert _offset_delete(conn, "garbled", {"old": [0]}) == (
            ErrorCode.NONE,
            {("old", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC},
        )
        assert _offset_delete(conn, "", {"work": [0]}) == (ErrorCode.INVALID_GROUP_ID, {})
        # Standalone commits: partitions named twice, negative or never committed are fine.
        assert _commit(conn, "simple", {("work", 0): 3, ("work", 1): 4}) == [0, 0]
        error, results = _offset_delete(
            conn, "simple", {"work": [0, 0, -1, 99], "": [0], "x" * 300: [2**31 - 1]}
        )
        assert error == ErrorCode.NONE
        assert set(results.values()) == {ErrorCode.NONE}
        assert set(results) == {
            ("work", 0),
            ("work", -1),
            ("work", 99),
            ("", 0),
            ("x" * 300, 2**31 - 1),
        }
        assert _committed(conn, "simple") == {("work", 1): 4}
        # A frame that does not decode closes only its own connection (the listener's rule
        # for every API); this one keeps serving.
        frame = encode_request(ApiKey.OFFSET_DELETE, 0, 1, "raw", {"group_id": "g", "topics": []})
        truncated = struct.pack(">i", len(frame) - 4 - 2) + frame[4:-2]
        with socket.create_connection(("127.0.0.1", node.kafka_port), timeout=10) as raw:
            raw.sendall(truncated)
            assert raw.recv(1) == b""
        assert _heartbeat(conn, "connectors", member_id, generation) == ErrorCode.NONE
        assert _committed(conn, "connectors") == {("work", 0): 1}


# ------------------------------------------------------------------------- expiration


def test_offsets_expire_after_the_retention_unless_a_member_or_subscription_holds_them(
    node_factory,
) -> None:
    node = node_factory(
        broker={
            **GROUPS_AT_ONCE,
            "offsets_retention_ms": 2000,
            "offsets_retention_check_interval_ms": 200,
        }
    )
    with KafkaConnection.from_bootstrap(node.bootstrap_servers, timeout_s=15) as conn:
        assert create_topic(conn, "work") == ErrorCode.NONE
    # A push subscription keeps its position as a memberless group: it must stay while the
    # subscription exists (a failover would otherwise restart it from the log start).
    status, subscribed = call(
        node, "POST", "/subscribe", {"address": "http://127.0.0.1:9/hook", "topics": ["work"]}
    )
    assert status in (200, 201), subscribed
    push_group = f"__flux_push.{subscribed['id']}"
    with _coordinator(node, "gone") as conn:
        gone, gone_generation = join_as_only_member(
            conn, "gone", metadata=_subscription("work"), timeout_ms=30000
        )
        live, live_generation = join_as_only_member(
            conn, "live", metadata=_subscription("work"), timeout_ms=30000
        )
        assert _commit(
            conn, "gone", {("work", 0): 10}, member_id=gone, generation=gone_generation
        ) == [0]
        assert _commit(
            conn,
            "live",
            {("work", 0): 20, ("old", 0): 21},
            member_id=live,
            generation=live_generation,
        ) == [0, 0]
        assert _commit(conn, "simple", {("work", 0): 30}) == [0]
        _leave(conn, "gone", gone)
        assert {"gone", "live", "simple", push_group} <= _list_groups(conn)
        assert _committed(conn, push_group) == {("work", 0): 0}

        def expired() -> bool:
            assert _heartbeat(conn, "live", live, live_generation) == ErrorCode.NONE
            return (
                _committed(conn, "gone") == {}
                and _committed(conn, "simple") == {}
                and _committed(conn, "live") == {("work", 0): 20}  # "old": not subscribed
            )

        wait_until(expired, timeout_s=30)
        assert _committed(conn, push_group) == {("work", 0): 0}
        groups = _list_groups(conn)
        assert "gone" not in groups and "simple" not in groups
        assert {"live", push_group} <= groups
        entries = [e for g in ("gone", "simple", "live") for e in _offsets_log(conn, g)]
        tombstones = {
            (e.group, e.topic, e.partition)
            for e in entries
            if isinstance(e, OffsetCommitEntry) and e.committed is None
        }
        assert tombstones == {
            ("gone", "work", 0),
            ("simple", "work", 0),
            ("live", "old", 0),
        }
        assert any(
            isinstance(e, GroupMetadataEntry) and e.group == "gone" and e.record is None
            for e in entries
        )


# -------------------------------------------------------------------------- upgrade


def test_existing_uncompacted_internal_topics_are_converted(node_factory) -> None:
    node = node_factory(broker=GROUPS_AT_ONCE)
    with KafkaConnection.from_bootstrap(node.bootstrap_servers, timeout_s=15) as conn:
        # As a cluster from before compaction has them: created with the delete policy.
        for name in (OFFSETS, SPARK_MARKERS):
            assert create_topic(conn, name, 2, cleanup_policy="delete") == ErrorCode.NONE
    wait_until(
        lambda: all(
            _topic_configs(node, name)["cleanup.policy"] == "compact"
            for name in (OFFSETS, SPARK_MARKERS)
        ),
        timeout_s=30,
    )
    # The converted topic serves groups as before.
    with _coordinator(node, "after") as conn:
        assert _commit(conn, "after", {("work", 0): 7}) == [ErrorCode.NONE]
        assert _committed(conn, "after") == {("work", 0): 7}
    log_text = Path(node.log_path).read_text()
    assert log_text.count(f"{OFFSETS} converted to cleanup.policy=compact") == 1
