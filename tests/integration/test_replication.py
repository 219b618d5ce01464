"""Replication on real 3-node clusters: no acknowledged write lost across a leader SIGKILL,
byte-identical replicas afterwards, ISR shrink and rejoin of a paused follower, min ISR, and
consumers never reading at or above the high watermark."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict

import pytest
from aiohttp import WSCloseCode
from flux.cluster.launcher import NodeProcess
from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode
from flux.protocol.records import build_batch, decode_records, iter_batches
from flux.sdk.wire import KafkaConnection
from flux.storage import LogConfig, PartitionLog

from tests.integration.cluster_helpers import active_controller, partitions
from tests.integration.helpers import fetch, list_offset, produce, wait_until

pytestmark = pytest.mark.integration

VALUES = 50_000


def _create(node: NodeProcess, name: str, assignments: list[list[int]], **configs: str) -> None:
    with KafkaConnection.from_bootstrap(node.bootstrap_servers, timeout_s=15) as conn:
        answer = conn.request(
            ApiKey.CREATE_TOPICS,
            7,
            {
                "topics": [
                    {
                        "name": name,
                        "num_partitions": -1,
                        "replication_factor": -1,
                        "assignments": [
                            {"partition_index": i, "broker_ids": replicas}
                            for i, replicas in enumerate(assignments)
                        ],
                        "configs": [{"name": k, "value": v} for k, v in configs.items()],
                    }
                ],
                "timeout_ms": 10000,
            },
        )
    assert answer["topics"][0]["error_code"] == ErrorCode.NONE, answer


def _by_id(nodes: list[NodeProcess], node_id: int) -> NodeProcess:
    return next(node for node in nodes if node.node_id == node_id)


def _replica_bytes(node: NodeProcess, topic: str, partition: int, high_watermark: int) -> bytes:
    """The batches of a stopped node's replica below ``high_watermark``, as stored."""
    log = PartitionLog.open(node.data_dir / f"{topic}-{partition}", LogConfig())
    try:
        return log.read(log.log_start_offset, 1 << 30, max_offset=high_watermark)
    finally:
        log.close()


def test_no_acknowledged_write_lost_when_the_leader_dies(cluster_factory) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    nodes = cluster_factory(3)
    _create(nodes[0], "ledger", [[1, 2, 3], [2, 3, 1], [3, 1, 2]], **{"min.insync.replicas": "2"})
    controller = wait_until(lambda: active_controller(nodes))
    # The victim leads partition 1 or 2 and is not the active controller, so the test measures
    # data failover rather than waiting on a controller election too.
    victim = next(node for node in nodes if node is not controller)
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "max.in.flight.requests.per.connection": 1,
            "linger.ms": 2,
            "message.timeout.ms": 120000,
            "retry.backoff.ms": 50,
        }
    )
    acknowledged: dict[int, list[bytes]] = defaultdict(list)
    failed = 0

    def on_delivery(error, message) -> None:
        nonlocal failed
        if error is None:
            acknowledged[message.partition()].append(message.value())
        else:
            failed += 1

    for index in range(VALUES):
        producer.produce(
            "ledger", value=b"v-%06d" % index, partition=index % 3, on_delivery=on_delivery
        )
        if index % 1000 == 0:
            producer.poll(0)
        if index == VALUES // 2:
            producer.flush(60)
            victim.kill()
    assert producer.flush(120) == 0
    acked = sum(len(values) for values in acknowledged.values())

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "checker", "enable.auto.commit": False}
    )
    survivor = next(node for node in nodes if node is not victim)
    ends = {p: list_offset_of(survivor, "ledger", p) for p in range(3)}
    consumer.assign([TopicPartition("ledger", p, 0) for p in range(3)])
    read: dict[int, list[bytes]] = defaultdict(list)
    deadline = time.monotonic() + 60
    while sum(len(v) for v in read.values()) < sum(ends.values()) and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=5000, timeout=1.0):
            assert message.error() is None, message.error()
            read[message.partition()].append(message.value())
    consumer.close()

    lost = duplicated = 0
    for partition, values in acknowledged.items():
        positions = {}
        for position, value in enumerate(read[partition]):
            if value in positions:
                duplicated += 1
            positions.setdefault(value, position)
        missing = [value for value in values if value not in positions]
        lost += len(missing)
        order = [positions[value] for value in values if value in positions]
        assert order == sorted(order), f"partition {partition}: acknowledged order not kept"
    print(f"acknowledged={acked} failed={failed} lost={lost} duplicated={duplicated}")
    assert lost == 0
    assert acked + failed == VALUES

    # The old leader returns: it rejoins every ISR and all replicas hold identical logs.
    victim.start()
    victim.wait_ready()
    wait_until(
        lambda: all(len(p["isr_nodes"]) == 3 for p in partitions(survivor, "ledger")), timeout_s=60
    )
    high_watermarks = {p: list_offset_of(survivor, "ledger", p) for p in range(3)}
    for node in nodes:
        node.stop()
    for partition, high_watermark in high_watermarks.items():
        copies = {n.node_id: _replica_bytes(n, "ledger", partition, high_watermark) for n in nodes}
        assert len(set(copies.values())) == 1, f"partition {partition} replicas differ"
        last = None
        for header, _ in iter_batches(copies[1]):
            last = header
        assert last is not None and last.last_offset == high_watermark - 1


def list_offset_of(node: NodeProcess, topic: str, partition: int) -> int:
    """The high watermark of ``topic``-``partition``, asked of its current leader."""
    leader = partitions(node, topic)[partition]["leader_id"]
    with KafkaConnection.from_bootstrap(node.bootstrap_servers) as conn:
        brokers = {
            b["node_id"]: f"{b['host']}:{b['port']}"
            for b in conn.request(ApiKey.METADATA, 12, {"topics": []})["brokers"]
        }
    with KafkaConnection.from_bootstrap(brokers[leader]) as conn:
        return list_offset(conn, topic, -1, partition=partition)["offset"]


def test_paused_follower_leaves_and_rejoins_the_isr(cluster_factory) -> None:
    nodes = cluster_factory(
        3,
        broker={"replica_lag_time_max_ms": 1000},
        controller={"session_timeout_ms": 30000},
    )
    controller = wait_until(lambda: active_controller(nodes))
    others = [node.node_id for node in nodes if node is not controller]
    leader, paused = _by_id(nodes, others[0]), _by_id(nodes, others[1])
    _create(
        leader,
        "lagging",
        [[leader.node_id, paused.node_id, controller.node_id]],
        **{"min.insync.replicas": "2"},
    )
    wait_until(lambda: len(partitions(leader, "lagging")[0]["isr_nodes"]) == 3)
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        with KafkaConnection.from_bootstrap(leader.bootstrap_servers) as conn:
            # While the paused follower is still in the ISR, acks=1 data stays above the high
            # watermark: a consumer must not see it.
            for batch in range(5):
                result = produce(conn, "lagging", build_batch([(None, b"early-%d" % batch, ())]))
                assert result["error_code"] == ErrorCode.NONE
                answer = fetch(conn, "lagging", 0)
                high_watermark = answer["high_watermark"]
                for _, raw in iter_batches(answer["records"]):
                    for record in decode_records(bytes(raw)):
                        assert record.offset < high_watermark
            wait_until(
                lambda: paused.node_id not in partitions(leader, "lagging")[0]["isr_nodes"],
                timeout_s=15,
            )
            for batch in range(20):
                result = produce(
                    conn, "lagging", build_batch([(None, b"all-%d" % batch, ())]), acks=-1
                )
                assert result["error_code"] == ErrorCode.NONE, result
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    wait_until(
        lambda: paused.node_id in partitions(leader, "lagging")[0]["isr_nodes"], timeout_s=30
    )
    # Back in the ISR means caught up: `fluxctl topic describe` shows every replica's log end
    # at the high watermark, lag 0.
    described = json.loads(
        subprocess.run(
            [
                sys.executable,
                "-m",
                "flux.cli.main",
                "topic",
                "describe",
                "lagging",
                "--json",
                "--bootstrap",
                leader.bootstrap_servers,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    )
    partition = described["partitions"][0]
    assert partition["high_watermark"] == 25
    assert set(partition["replica_log_end_offsets"].values()) == {25}
    assert set(partition["replica_lag"].values()) == {0}


def test_acks_all_needs_min_insync_replicas(cluster_factory) -> None:
    # One controller-only node keeps the quorum alive while two of the three brokers stop.
    nodes = cluster_factory(4, controller_ids=[1], broker_ids=[2, 3, 4])
    brokers = nodes[1:]
    _create(brokers[0], "strict", [[2, 3, 4]], **{"min.insync.replicas": "2"})
    acknowledged: list[bytes] = []
    with KafkaConnection.from_bootstrap(brokers[0].bootstrap_servers) as conn:

        def send(value: bytes) -> int:
            body = {
                "transactional_id": None,
                "acks": -1,
                "timeout_ms": 2000,
                "topic_data": [
                    {
                        "name": "strict",
                        "partition_data": [
                            {"index": 0, "records": build_batch([(None, value, ())])}
                        ],
                    }
                ],
            }
            result = conn.request(ApiKey.PRODUCE, 7, body)["responses"][0]["partition_responses"][0]
            if result["error_code"] == ErrorCode.NONE:
                acknowledged.append(value)
            return result["error_code"]

        assert send(b"three") == ErrorCode.NONE
        brokers[1].kill()
        wait_until(lambda: 3 not in partitions(brokers[0], "strict")[0]["isr_nodes"], timeout_s=20)
        assert send(b"two") == ErrorCode.NONE
        brokers[2].kill()
        codes = []

        def refused() -> bool:
            codes.append(send(b"one-%d" % len(codes)))
            return codes[-1] == ErrorCode.NOT_ENOUGH_REPLICAS

        wait_until(refused, timeout_s=30)
        # On the way there: timeouts while the ISR still names the dead broker, and
        # NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank under an appended batch.
        assert set(codes) <= {
            ErrorCode.NOT_ENOUGH_REPLICAS,
            ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            ErrorCode.REQUEST_TIMED_OUT,
            ErrorCode.NONE,
        }
    # Every acknowledged record is on at least min.insync.replicas = 2 replicas: bring the
    # stopped brokers back and read from each one once it leads.
    for node in brokers[1:]:
        node.start()
        node.wait_ready()
    wait_until(lambda: len(partitions(brokers[0], "strict")[0]["isr_nodes"]) == 3, timeout_s=60)
    with KafkaConnection.from_bootstrap(brokers[0].bootstrap_servers) as conn:
        answer = fetch(conn, "strict", 0)
        stored = [
            record.value
            for _, raw in iter_batches(answer["records"])
            for record in decode_records(bytes(raw))
        ]
    assert [value for value in stored if value in acknowledged] == acknowledged


def _replication_session(
    node: NodeProcess, params: dict[str, str], messages: list[bytes | str]
) -> tuple[int, list[bytes], int | None]:
    """Open ``GET /replication/session`` as a follower would, send ``messages`` one at a time
    (each waits for its answer): (HTTP status, binary answers, close code if it closed)."""
    import asyncio

    import aiohttp

    async def run() -> tuple[int, list[bytes], int | None]:
        url = f"http://{node.ready['broker_http']}/replication/session"
        async with aiohttp.ClientSession() as client:
            try:
                socket = await client.ws_connect(url, params=params)
            except aiohttp.WSServerHandshakeError as error:
                return error.status, [], None
            answers: list[bytes] = []
            async with socket:
                for message in messages:
                    if isinstance(message, str):
                        await socket.send_str(message)
                    else:
                        await socket.send_bytes(message)
                    reply = await socket.receive(timeout=10)
                    if reply.type is not aiohttp.WSMsgType.BINARY:
                        return 101, answers, socket.close_code
                    answers.append(reply.data)
            return 101, answers, None

    return asyncio.run(run())


def test_bad_replication_fetches_get_errors_and_change_nothing(cluster_factory) -> None:
    from flux.cluster.replication.wire import (
        FetchEntry,
        FetchRequest,
        decode_fetch_response,
        encode_fetch_request,
    )

    nodes = cluster_factory(3)
    _create(nodes[0], "guarded", [[1, 2, 3]])
    leader, follower = nodes[0], nodes[1]
    with KafkaConnection.from_bootstrap(leader.bootstrap_servers) as conn:
        assert produce(conn, "guarded", build_batch([(None, b"v", ())]), acks=-1)["error_code"] == 0
        before = fetch(conn, "guarded", 0)["high_watermark"]
    topic_id = _topic_id(leader, "guarded")
    incarnation = _incarnation(leader, follower.node_id)

    def ask(replica_id: int, broker_epoch: str, fetch_offset: int, last_epoch: int = -1) -> int:
        request = FetchRequest(
            0,
            1 << 20,
            [FetchEntry("guarded", 0, topic_id, fetch_offset, last_epoch, -1, 1 << 20)],
            [],
        )
        status, answers, _ = _replication_session(
            leader,
            {"replica_id": str(replica_id), "broker_epoch": broker_epoch},
            [encode_fetch_request(request)],
        )
        assert status == 101 and len(answers) == 1
        return decode_fetch_response(answers[0])[0].error_code

    assert ask(7, "nobody", 0) == ErrorCode.STALE_BROKER_EPOCH  # not a registered broker
    assert ask(follower.node_id, "old-incarnation", 0) == ErrorCode.STALE_BROKER_EPOCH
    assert ask(follower.node_id, incarnation, before + 5) == ErrorCode.OFFSET_OUT_OF_RANGE
    assert (
        ask(leader.node_id, _incarnation(leader, leader.node_id), 0)
        == ErrorCode.REPLICA_NOT_AVAILABLE
    )
    # A session without its parameters is refused; a malformed request closes the session
    # with "unsupported data" and the leader goes on serving.
    status, _, _ = _replication_session(leader, {"replica_id": "x"}, [])
    assert status == 400
    params = {"replica_id": str(follower.node_id), "broker_epoch": incarnation}
    for garbage in (b"\x01\x00", "{not binary", b"\x09" + bytes(20)):
        status, answers, code = _replication_session(leader, params, [garbage])
        assert (status, answers, code) == (101, [], WSCloseCode.UNSUPPORTED_DATA)
    with KafkaConnection.from_bootstrap(leader.bootstrap_servers) as conn:
        assert fetch(conn, "guarded", 0)["high_watermark"] == before
        assert produce(conn, "guarded", build_batch([(None, b"w", ())]), acks=-1)["error_code"] == 0


def _controller_image(node: NodeProcess) -> dict:
    import urllib.request

    address = node.ready["controller_http"]
    with urllib.request.urlopen(
        f"http://{address}/controller/metadata?version=-1", timeout=5
    ) as reply:
        return json.loads(reply.read())["image"]


def _incarnation(node: NodeProcess, broker_id: int) -> str:
    brokers = _controller_image(node)["brokers"]
    entry = (
        brokers[str(broker_id)]
        if isinstance(brokers, dict)
        else next(b for b in brokers if b["broker_id"] == broker_id)
    )
    return entry["incarnation_id"]


def _topic_id(node: NodeProcess, name: str) -> str:
    """The topic id from ``node``'s controller, once it has applied the topic (a standby's
    committed state may trail the active controller's by a moment)."""

    def lookup() -> str | None:
        topics = _controller_image(node)["topics"]
        if isinstance(topics, dict):
            entry = topics.get(name)
        else:
            entry = next((t for t in topics if t["name"] == name), None)
        return entry["topic_id"] if entry else None

    return wait_until(lookup)


def test_follower_with_a_corrupt_tail_truncates_and_refetches(cluster_factory) -> None:
    nodes = cluster_factory(3)
    _create(nodes[0], "mended", [[1, 2, 3]])
    with KafkaConnection.from_bootstrap(nodes[0].bootstrap_servers) as conn:
        for batch in range(20):
            value = b"m-%d" % batch + b"x" * 200
            assert (
                produce(conn, "mended", build_batch([(None, value, ())]), acks=-1)["error_code"]
                == 0
            )
    follower = nodes[2]
    follower.kill()
    segment = sorted((follower.data_dir / "mended-0").glob("*.log"))[-1]
    data = bytearray(segment.read_bytes())
    data[len(data) - 30] ^= 0xFF  # a flipped byte in the last batch
    segment.write_bytes(bytes(data))
    follower.start()
    follower.wait_ready()
    wait_until(lambda: 3 in partitions(nodes[0], "mended")[0]["isr_nodes"], timeout_s=30)
    assert "dropped" in follower.log_tail(400) or "truncat" in follower.log_tail(400).lower()
    for node in nodes:
        node.stop()
    copies = {n.node_id: _replica_bytes(n, "mended", 0, 20) for n in nodes}
    assert len(set(copies.values())) == 1


def _epoch_end(node: NodeProcess, topic: str, epoch: int, current: int = -1) -> dict:
    with KafkaConnection.from_bootstrap(node.bootstrap_servers, timeout_s=10) as conn:
        answer = conn.request(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            4,
            {
                "replica_id": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}
                        ],
                    }
                ],
            },
        )
    return answer["topics"][0]["partitions"][0]


def test_offset_for_leader_epoch_across_a_leader_change(cluster_factory) -> None:
    """OffsetForLeaderEpoch (KIP-320) at the leader: where each leader epoch ends in its log,
    the current epoch checked, followers refusing; and a confluent-kafka consumer that read
    up to the leader change goes on from its position after checking it there (with
    ``auto.offset.reset=error``, a wrong answer would surface as a truncation error)."""
    from confluent_kafka import Consumer, TopicPartition

    nodes = cluster_factory(3)
    _create(nodes[0], "epochs", [[1, 2, 3]], **{"min.insync.replicas": "2"})
    wait_until(lambda: len(partitions(nodes[0], "epochs")[0]["isr_nodes"]) == 3)
    first = partitions(nodes[0], "epochs")[0]
    leader, epoch = _by_id(nodes, first["leader_id"]), first["leader_epoch"]
    with KafkaConnection.from_bootstrap(leader.bootstrap_servers, timeout_s=10) as conn:
        records = build_batch([(None, b"v%d" % i, ()) for i in range(5)])
        assert produce(conn, "epochs", records, acks=-1)["error_code"] == ErrorCode.NONE

    assert _epoch_end(leader, "epochs", epoch, epoch) == {
        "error_code": ErrorCode.NONE, "partition": 0, "leader_epoch": epoch, "end_offset": 5,
    }  # fmt: skip
    assert _epoch_end(leader, "epochs", epoch, epoch + 1)["error_code"] == (
        ErrorCode.UNKNOWN_LEADER_EPOCH
    )
    follower = next(node for node in nodes if node is not leader)
    assert _epoch_end(follower, "epochs", epoch)["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert _epoch_end(leader, "nowhere", 0)["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    consumer = Consumer(
        {
            "bootstrap.servers": ",".join(node.bootstrap_servers for node in nodes),
            "group.id": "epochs-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    try:
        consumer.assign([TopicPartition("epochs", 0, 0)])
        read: list[bytes] = []

        def consume_until(count: int) -> bool:
            for message in consumer.consume(num_messages=100, timeout=0.2):
                assert message.error() is None, message.error()
                read.append(message.value())
            return len(read) >= count

        wait_until(lambda: consume_until(5))

        leader.kill()
        survivor = follower
        # A new leader, and an ISR of two again (on a loaded machine the other follower may
        # have fallen out of it and not rejoined yet), so an acks=all write can be acknowledged.
        moved = wait_until(
            lambda: (
                (state := partitions(survivor, "epochs")[0])["leader_id"]
                not in (-1, leader.node_id)
                and len(state["isr_nodes"]) >= 2
                and state
            ),
            timeout_s=60,
        )
        new_leader, new_epoch = _by_id(nodes, moved["leader_id"]), moved["leader_epoch"]
        assert new_epoch > epoch
        with KafkaConnection.from_bootstrap(new_leader.bootstrap_servers, timeout_s=10) as conn:
            records = build_batch([(None, b"v%d" % i, ()) for i in range(5, 8)])

            def produced() -> bool:
                # NOT_ENOUGH_REPLICAS is answered before appending: retried, nothing doubles.
                code = produce(conn, "epochs", records, acks=-1)["error_code"]
                assert code in (ErrorCode.NONE, ErrorCode.NOT_ENOUGH_REPLICAS), code
                return code == ErrorCode.NONE

            wait_until(produced, timeout_s=30, interval_s=0.2)

        # The old epoch ends where the new one began; the new one at the log end.
        old = _epoch_end(new_leader, "epochs", epoch, new_epoch)
        assert (old["leader_epoch"], old["end_offset"]) == (epoch, 5)
        new = _epoch_end(new_leader, "epochs", new_epoch, new_epoch)
        assert (new["leader_epoch"], new["end_offset"]) == (new_epoch, 8)
        assert _epoch_end(new_leader, "epochs", epoch, epoch)["error_code"] == (
            ErrorCode.FENCED_LEADER_EPOCH
        )

        wait_until(lambda: consume_until(8), timeout_s=60)
        assert read == [b"v%d" % i for i in range(8)]
    finally:
        consumer.close()
