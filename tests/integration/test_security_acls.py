"""ACLs with unmodified clients: an administrator authenticated by a client certificate (a
super user) creates SCRAM users, topics and ACLs; users get exactly what the ACLs allow, with
Kafka's error codes and nothing written when refused."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from flux.cluster.launcher import NodeProcess
from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode
from flux.sdk.wire import KafkaConnection

from tests.integration.helpers import wait_until
from tests.integration.security_helpers import node_security, write_certificates

pytestmark = pytest.mark.integration


class Cluster:
    def __init__(self, node: NodeProcess, directory: Path) -> None:
        self.node = node
        self.directory = directory
        self.listeners = node.ready["listeners"]

    def admin_config(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.listeners["SSL"],
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.directory / "ca.pem"),
            "ssl.certificate.location": str(self.directory / "admin.pem"),
            "ssl.key.location": str(self.directory / "admin.key"),
        }

    def user_config(self, user: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.listeners["SASL_PLAINTEXT"],
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": f"{user}-password",
        }

    def end_offset(self, topic: str) -> int:
        consumer = Consumer({**self.admin_config(), "group.id": "admin-watermarks"})
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        finally:
            consumer.close()


@pytest.fixture
def cluster(node_factory: Callable[..., NodeProcess], tmp_path: Path) -> Cluster:
    write_certificates(tmp_path, {"admin": None})
    node = node_factory(
        broker={"listeners": ["SSL://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0"]},
        security=node_security(
            tmp_path,
            ssl_client_auth="requested",
            authorizer_enable=True,
            super_users=["User:CN=admin"],
        ),
        topic={"partitions": 1, "replication_factor": 1},
    )
    cluster = Cluster(node, tmp_path)
    client = AdminClient(cluster.admin_config())
    for user in ("alice", "bob"):
        upsertion = UserScramCredentialUpsertion(
            user,
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
            f"{user}-password".encode(),
        )
        for future in client.alter_user_scram_credentials([upsertion]).values():
            future.result(timeout=30)
    topics = [NewTopic(name, 1, 1) for name in ("orders", "orders-audit", "payments")]
    for future in client.create_topics(topics).values():
        future.result(timeout=30)
    return cluster


def _acl(
    kind: ResourceType,
    name: str,
    principal: str,
    operation: AclOperation,
    *,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(kind, name, pattern, principal, "*", operation, permission)


def _create_acls(cluster: Cluster, bindings: list[AclBinding]) -> None:
    admin = AdminClient(cluster.admin_config())  # referenced until the futures are done
    for future in admin.create_acls(bindings).values():
        assert future.result(timeout=30) is None


def _produce(config: dict[str, Any], topic: str) -> str:
    outcome: list[Any] = []
    producer = Producer({**config, "acks": "all", "message.timeout.ms": 10000})
    producer.produce(topic, b"value", on_delivery=lambda error, _m: outcome.append(error))
    producer.flush(20)
    assert len(outcome) == 1
    return "ok" if outcome[0] is None else outcome[0].name()


def test_acls_decide_what_each_user_may_do(cluster: Cluster) -> None:
    _create_acls(
        cluster,
        [
            _acl(
                ResourceType.TOPIC,
                "orders",
                "User:alice",
                AclOperation.WRITE,
                pattern=ResourcePatternType.PREFIXED,
            ),
            _acl(ResourceType.TOPIC, "payments", "User:alice", AclOperation.READ),
            _acl(ResourceType.GROUP, "g-alice", "User:alice", AclOperation.READ),
            _acl(ResourceType.TOPIC, "*", "User:bob", AclOperation.ALL),
            _acl(
                ResourceType.TOPIC,
                "payments",
                "User:bob",
                AclOperation.WRITE,
                permission=AclPermissionType.DENY,
            ),
        ],
    )
    alice, bob = cluster.user_config("alice"), cluster.user_config("bob")
    # Prefixed ALLOW WRITE: both orders topics, not payments (READ does not imply WRITE).
    assert _produce(alice, "orders") == "ok"
    assert _produce(alice, "orders-audit") == "ok"
    assert _produce(alice, "payments") == "TOPIC_AUTHORIZATION_FAILED"
    # DENY beats bob's wildcard ALLOW ALL; the wildcard covers the others.
    assert _produce(bob, "payments") == "TOPIC_AUTHORIZATION_FAILED"
    assert _produce(bob, "orders-audit") == "ok"
    # Refused produces wrote nothing; the super user's did.
    assert cluster.end_offset("payments") == 0
    assert _produce(cluster.admin_config(), "payments") == "ok"
    assert cluster.end_offset("payments") == 1
    assert cluster.end_offset("orders-audit") == 2

    # Metadata lists only what alice may describe (WRITE and READ imply DESCRIBE).
    alice_admin = AdminClient(alice)
    assert sorted(alice_admin.list_topics(timeout=10).topics) == [
        "orders",
        "orders-audit",
        "payments",
    ]
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        for future in alice_admin.create_topics([NewTopic("alice-topic", 1, 1)]).values():
            future.result(timeout=30)
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        for future in alice_admin.create_acls(
            [_acl(ResourceType.TOPIC, "x", "User:alice", AclOperation.ALL)]
        ).values():
            future.result(timeout=30)

    # Reading needs READ on the topic and on the group.
    assert _consume_first(alice, "g-alice") == b"value"
    assert _consume_first(alice, "g-other") == "GROUP_AUTHORIZATION_FAILED"


def _consume_first(config: dict[str, Any], group: str) -> bytes | str:
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe(["payments"])
    try:

        def first() -> bytes | str | None:
            message = consumer.poll(0.5)
            if message is None:
                return None
            if message.error():
                return message.error().name()
            return message.value()

        return wait_until(first, timeout_s=30)
    finally:
        consumer.close()


def test_acl_changes_apply_to_open_connections(cluster: Cluster) -> None:
    admin = AdminClient(cluster.admin_config())
    alice = cluster.user_config("alice")
    assert _produce(alice, "orders") == "TOPIC_AUTHORIZATION_FAILED"
    grant = _acl(
        ResourceType.TOPIC,
        "ord",
        "User:alice",
        AclOperation.WRITE,
        pattern=ResourcePatternType.PREFIXED,
    )
    _create_acls(cluster, [grant])
    producer = Producer({**alice, "acks": "all"})
    outcome: list[Any] = []
    producer.produce("orders", b"v", on_delivery=lambda error, _m: outcome.append(error))
    producer.flush(20)
    assert outcome == [None]
    described = admin.describe_acls(
        AclBindingFilter(
            ResourceType.TOPIC,
            "orders",
            ResourcePatternType.MATCH,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(timeout=30)
    assert described == [grant]
    deleted = admin.delete_acls(
        [
            AclBindingFilter(
                ResourceType.TOPIC,
                None,
                ResourcePatternType.PREFIXED,
                "User:alice",
                None,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
        ]
    )
    (matched,) = [future.result(timeout=30) for future in deleted.values()]
    assert matched == [grant]
    # The same producer's connection is refused from the next request on.
    outcome.clear()
    producer.produce("orders", b"w", on_delivery=lambda error, _m: outcome.append(error))
    producer.flush(20)
    assert [error.name() for error in outcome] == ["TOPIC_AUTHORIZATION_FAILED"]
    assert cluster.end_offset("orders") == 1


def test_an_acl_change_reaches_every_broker_within_a_second(
    cluster_factory: Callable[..., list[NodeProcess]],
) -> None:
    # Anonymous PLAINTEXT clients are super users here: the test is about propagation.
    nodes = cluster_factory(
        3, security={"authorizer_enable": True, "super_users": ["User:ANONYMOUS"]}
    )
    connections = [KafkaConnection.from_bootstrap(n.ready["bootstrap_servers"]) for n in nodes]
    describe = {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }
    try:
        for round_number in range(3):
            name = f"topic-{round_number}"
            answer = connections[round_number].request(
                ApiKey.CREATE_ACLS,
                3,
                {
                    "creations": [
                        {
                            "resource_type": 2,
                            "resource_name": name,
                            "resource_pattern_type": 3,
                            "principal": "User:alice",
                            "host": "*",
                            "operation": 4,
                            "permission_type": 3,
                        }
                    ]
                },
            )
            assert answer["results"][0]["error_code"] == ErrorCode.NONE
            created = time.monotonic()

            def everywhere(name: str = name) -> bool:
                for conn in connections:
                    found = conn.request(ApiKey.DESCRIBE_ACLS, 3, describe)["resources"]
                    if name not in {resource["resource_name"] for resource in found}:
                        return False
                return True

            wait_until(everywhere, timeout_s=10, interval_s=0.01)
            # Metadata follows by long poll: milliseconds; the bound leaves room for a loaded CI.
            assert time.monotonic() - created < 2.0, time.monotonic() - created
    finally:
        for conn in connections:
            conn.close()
