"""The HTTP API of a secured cluster: Basic credentials of SCRAM users, ACLs per endpoint, and
secrets kept out of logs and /metrics."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
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
from flux.sdk.schema_registry import SchemaRegistryClient
from flux.sdk.wire import KafkaConnection

from tests.integration.helpers import list_offset
from tests.integration.http_helpers import stalled_bodies

pytestmark = pytest.mark.integration

PASSWORD = "h77p-Secret-pass"


def _call(
    node: NodeProcess,
    method: str,
    path: str,
    body: Any = None,
    *,
    user: str | None = None,
    password: str = PASSWORD,
) -> tuple[int, Any, dict[str, str]]:
    headers = {"Content-Type": "application/json"}
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://{node.ready['broker_http']}{path}", data=data, method=method, headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read() or b"null"), dict(reply.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null"), dict(error.headers)


def _alice_may(node: NodeProcess, topics: list[Any], operations: tuple[Any, ...]) -> AdminClient:
    """Create the SCRAM user alice, ``topics``, and ACLs letting alice do ``operations`` on
    the topic orders; the admin client (the anonymous super user) that did it."""
    admin = AdminClient({"bootstrap.servers": node.ready["bootstrap_servers"]})
    upsertion = UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), PASSWORD.encode()
    )
    for future in admin.alter_user_scram_credentials([upsertion]).values():
        future.result(timeout=30)
    for future in admin.create_topics(topics).values():
        future.result(timeout=30)
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            "orders",
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            operation,
            AclPermissionType.ALLOW,
        )
        for operation in operations
    ]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)
    return admin


def test_http_api_needs_credentials_and_acls(node_factory: Callable[..., NodeProcess]) -> None:
    # The PLAINTEXT listener's anonymous principal is the administrator here (a test setup:
    # a real cluster names a certificate or SCRAM user in super_users).
    node = node_factory(
        security={
            "http_auth": "required",
            "authorizer_enable": True,
            "super_users": ["User:ANONYMOUS"],
        },
        topic={"partitions": 1, "replication_factor": 1},
        broker={"request_timeout_ms": 1500},
    )
    admin = _alice_may(
        node,
        [NewTopic(t, 1, 1) for t in ("orders", "payments")],
        (AclOperation.WRITE, AclOperation.READ),
    )

    message = {"id": "m-1", "topic": "orders", "message": "hello"}
    # No credentials, a wrong password, an unknown user: 401, nothing written.
    status, answer, headers = _call(node, "POST", "/publish", message)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert _call(node, "POST", "/publish", message, user="alice", password="nope")[0] == 401
    assert _call(node, "POST", "/publish", message, user="mallory")[0] == 401
    assert _end(node, "orders") == 0
    # Open endpoints stay open.
    assert _call(node, "GET", "/health")[0] == 200
    # alice may write and read orders, not payments.
    status, answer, _ = _call(node, "POST", "/publish", message, user="alice")
    assert status == 200, answer
    status, answer, _ = _call(
        node, "POST", "/publish", {**message, "topic": "payments"}, user="alice"
    )
    assert status == 403 and "WRITE" in answer["message"]
    assert _end(node, "orders") == 1 and _end(node, "payments") == 0
    status, answer, _ = _call(
        node, "GET", "/topics/orders/partitions/0/messages?offset=0", user="alice"
    )
    assert status == 200 and "hello" in json.dumps(answer)
    status, _, _ = _call(
        node, "GET", "/topics/payments/partitions/0/messages?offset=0", user="alice"
    )
    assert status == 403
    # Creating a topic needs CREATE; listing everything needs DESCRIBE on the cluster.
    status, _, _ = _call(node, "POST", "/publish", {**message, "topic": "new-topic"}, user="alice")
    assert status == 403
    assert "new-topic" not in admin.list_topics(timeout=10).topics
    assert _call(node, "GET", "/topics", user="alice")[0] == 403
    # The console: its page needs credentials only, its live figures what they describe.
    assert _raw(node, "/ui/")[0] == 401
    status, page = _raw(node, "/ui/", user="alice")
    assert status == 200 and b"Flux console" in page
    assert _raw(node, "/ui/static/app.js", user="alice")[0] == 200
    assert _raw(node, "/ui/events?topic=orders", user="alice")[0] == 403  # no DESCRIBE cluster
    # The schema registry: a subject is guarded by its topic's ACLs.
    schema = {"schema": json.dumps({"type": "record", "name": "O", "fields": []})}
    assert _call(node, "POST", "/schemas/subjects/orders-value/versions", schema)[0] == 401
    status, answer, _ = _call(
        node, "POST", "/schemas/subjects/orders-value/versions", schema, user="alice"
    )
    assert status == 200, answer
    schema_id = answer["id"]
    status, answer, _ = _call(
        node, "POST", "/schemas/subjects/payments-value/versions", schema, user="alice"
    )
    assert status == 403 and "WRITE" in answer["message"]
    status, answer, _ = _call(node, "GET", "/schemas/subjects/orders-value/versions", user="alice")
    assert (status, answer) == (200, [1])
    assert _call(node, "GET", "/schemas/subjects/payments-value/versions", user="alice")[0] == 403
    assert _call(node, "GET", f"/schemas/schemas/ids/{schema_id}", user="alice")[0] == 200
    assert _call(node, "GET", "/schemas/subjects", user="alice")[0] == 403
    registry = SchemaRegistryClient(
        f"http://{node.ready['broker_http']}/schemas", basic_auth=("alice", PASSWORD)
    )
    assert registry.versions("orders-value") == [1]
    assert _call(node, "PUT", "/schemas/config", {"compatibility": "NONE"}, user="alice")[0] == 403
    # A body the authorization check reads that stops arriving: 408 once
    # broker.request_timeout_ms has passed, and the connection closed (it waited for ever).
    token = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    for status, answer, took in stalled_bodies(
        node.ready["broker_http"], "/publish", f"Authorization: Basic {token}\r\n"
    ):
        assert status == b"408", answer[:300]
        assert b"Connection: close" in answer and b'"field": "body"' in answer, answer
        assert 1.0 < took < 10.0, took
    assert _call(node, "GET", "/topics/orders", user="alice")[0] == 200
    # Secrets are nowhere: not in the log, not in /metrics.
    metrics = (
        urllib.request.urlopen(f"http://{node.ready['broker_http']}/metrics", timeout=10)
        .read()
        .decode()
    )
    for text in (node.log_path.read_text(), metrics):
        assert PASSWORD not in text
        assert base64.b64encode(f"alice:{PASSWORD}".encode()).decode() not in text


def _raw(node: NodeProcess, path: str, *, user: str | None = None) -> tuple[int, bytes]:
    headers = {}
    if user is not None:
        token = base64.b64encode(f"{user}:{PASSWORD}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    request = urllib.request.Request(f"http://{node.ready['broker_http']}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _end(node: NodeProcess, topic: str) -> int:
    with KafkaConnection.from_bootstrap(node.ready["bootstrap_servers"]) as conn:
        return list_offset(conn, topic, -1)["offset"]


def test_brokers_forward_reads_to_each_other_in_a_secured_cluster(tmp_path: Any) -> None:
    """With http_auth required, what a broker asks another of a topic (a read of a partition
    it does not lead, the leaders' offsets of a describe) goes under the node credential: the
    client's credentials were checked by the broker it called."""
    from tests.integration.http_helpers import running_cluster

    security = {
        "http_auth": "required",
        "authorizer_enable": True,
        "super_users": ["User:ANONYMOUS"],
        "internal_auth": True,
    }
    with running_cluster(tmp_path, 3, security=security, topic={"replication_factor": 3}) as nodes:
        _alice_may(
            nodes[0],
            [NewTopic("orders", 3, 3)],
            (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE),
        )
        for partition in range(3):
            message = {"messages": [{"value": f"m-{partition}", "partition": partition}]}
            status, answer, _ = _call(
                nodes[1], "POST", "/topics/orders/messages", message, user="alice"
            )
            assert status == 200, answer
        # Broker 1 leads at most one partition: the others' reads are forwarded.
        for partition in range(3):
            status, answer, _ = _call(
                nodes[0], "GET", f"/topics/orders/partitions/{partition}/messages", user="alice"
            )
            assert status == 200, answer
            assert [m["value"] for m in answer["messages"]] == [f"m-{partition}"]
        status, answer, _ = _call(nodes[2], "GET", "/topics/orders?offsets=all", user="alice")
        assert status == 200, answer
        assert [p["high_watermark"] for p in answer["partitions"]] == [1, 1, 1]
        # The node-only paths refuse a client, even one with valid credentials.
        status, _, _ = _call(
            nodes[0], "GET", "/internal/topics/orders/partitions/0/messages", user="alice"
        )
        assert status == 401
