"""Consumer groups on a real 3-node cluster with unmodified clients: members share a topic,
a SIGKILLed member's partitions move to the others, commits with stale generations are
refused, and committed offsets survive a coordinator SIGKILL and a full restart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode
from flux.sdk.wire import KafkaConnection

from tests.integration.cluster_helpers import partitions
from tests.integration.helpers import join_as_only_member, wait_until
from tests.integration.test_replication import _create

pytestmark = pytest.mark.integration

MESSAGES = 600
GROUP_SETTINGS = {"broker": {"group_initial_rebalance_delay_ms": 0}}


def _produce(bootstrap: str, topic: str, count: int) -> list[str]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    values = [f"m-{index:05d}" for index in range(count)]
    for index, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=index % 6)
    assert producer.flush(30) == 0
    return values


def _consumed(paths: list[Path]) -> set[str]:
    values = set()
    for path in paths:
        if path.exists():
            for line in path.read_text().splitlines():
                parts = line.split(" ")
                if len(parts) == 3:
                    values.add(parts[2])
    return values


def _describe(node, group: str) -> dict:
    with _coordinator(node, group) as conn:
        return conn.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group]})["groups"][0]


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_group_members_share_partitions_and_survive_a_killed_member(
    cluster_factory, tmp_path: Path, client: str
) -> None:
    nodes = cluster_factory(3, **GROUP_SETTINGS)
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    _create(nodes[0], "work", [[1, 2, 3], [2, 3, 1], [3, 1, 2]] * 2)
    produced = set(_produce(bootstrap, "work", MESSAGES))
    outputs = [tmp_path / f"member-{i}.txt" for i in range(3)]
    members = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.group_member",
                client,
                bootstrap,
                "workers",
                "work",
                str(path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for path in outputs
    ]
    try:
        wait_until(lambda: len(_describe(nodes[0], "workers")["members"]) == 3, timeout_s=60)
        wait_until(
            lambda: outputs[0].exists() and outputs[0].read_text().count("\n") >= 10, timeout_s=60
        )
        members[0].kill()
        members[0].wait(10)
        wait_until(lambda: produced <= _consumed(outputs), timeout_s=90)
        described = wait_until(
            lambda: (
                (d := _describe(nodes[0], "workers"))["group_state"] == "Stable"
                and len(d["members"]) == 2
                and d
            ),
            timeout_s=60,
        )
        assert described["protocol_type"] == "consumer"
        from flux.sdk.consumer_protocol import decode_assignment

        owned = [
            partition
            for member in described["members"]
            for partition in decode_assignment(member["member_assignment"]).assigned.get("work", [])
        ]
        assert sorted(owned) == list(range(6)), "the two survivors own every partition once"
    finally:
        for member in members:
            member.terminate()
        for member in members:
            try:
                member.wait(10)
            except subprocess.TimeoutExpired:
                member.kill()


def _commit(conn: KafkaConnection, group: str, member_id: str, generation: int, offset: int) -> int:
    body = {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "topics": [{"name": "work", "partitions": [{"partition_index": 0, "committed_offset": offset, "committed_metadata": None}]}],
    }  # fmt: skip
    return conn.request(ApiKey.OFFSET_COMMIT, 3, body)["topics"][0]["partitions"][0]["error_code"]


def _committed(conn: KafkaConnection, group: str) -> int:
    body = {"group_id": group, "topics": [{"name": "work", "partition_indexes": [0]}]}
    return conn.request(ApiKey.OFFSET_FETCH, 3, body)["topics"][0]["partitions"][0][
        "committed_offset"
    ]


def _coordinator(node, group: str) -> KafkaConnection:
    with KafkaConnection.from_bootstrap(node.bootstrap_servers) as conn:
        found = wait_until(
            lambda: (
                (r := conn.request(ApiKey.FIND_COORDINATOR, 2, {"key": group, "key_type": 0}))[
                    "error_code"
                ]
                == 0
                and r
            )
        )
    return KafkaConnection(found["host"], found["port"])


def test_stale_generation_commit_is_refused_and_offsets_survive_failures(cluster_factory) -> None:
    # broker.group_max_session_timeout_ms: a longer session is refused, as Kafka's
    # group.max.session.timeout.ms does.
    nodes = cluster_factory(
        3, broker={**GROUP_SETTINGS["broker"], "group_max_session_timeout_ms": 20000}
    )
    _create(nodes[0], "work", [[1, 2, 3]])
    with _coordinator(nodes[0], "ledger") as conn:
        too_long = conn.request(
            ApiKey.JOIN_GROUP,
            5,
            {
                "group_id": "ledger",
                "session_timeout_ms": 20001,
                "rebalance_timeout_ms": 20001,
                "member_id": "",
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
            },  # fmt: skip
        )
        assert too_long["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT, too_long
        member_id, generation = join_as_only_member(conn, "ledger")
        assert _commit(conn, "ledger", member_id, generation, 42) == ErrorCode.NONE
        assert _commit(conn, "ledger", member_id, generation - 1, 7) == ErrorCode.ILLEGAL_GENERATION
        assert _commit(conn, "ledger", "stranger", generation, 7) == ErrorCode.UNKNOWN_MEMBER_ID
        assert _committed(conn, "ledger") == 42
        coordinator_port = conn._socket.getpeername()[1]
    coordinator = next(node for node in nodes if node.kafka_port == coordinator_port)
    coordinator.kill()
    survivor = next(node for node in nodes if node is not coordinator)

    def intact_at_new_coordinator() -> bool:
        # Until the dead coordinator is fenced, FindCoordinator may still name it.
        try:
            with _coordinator(survivor, "ledger") as conn:
                return _committed(conn, "ledger") == 42
        except OSError:
            return False

    wait_until(intact_at_new_coordinator, timeout_s=30)
    coordinator.start()
    coordinator.wait_ready()
    for node in nodes:
        node.stop()
    for node in nodes:
        node.start()
    for node in nodes:
        node.wait_ready()
    wait_until(
        lambda: all(p["leader_id"] >= 0 for p in partitions(nodes[0], "__consumer_offsets")),
        timeout_s=30,
    )
    survivor = nodes[1]
    wait_until(intact_at_new_coordinator, timeout_s=30)
