"""``fluxctl acl add|list|remove`` (and the SDK's ACL admin calls under it) against a real node
with the authorizer on: what it adds takes effect for an unmodified client, ``list`` matches
as Kafka does, ``remove`` takes it away again."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from confluent_kafka import Producer
from flux.sdk import AclBinding, AclFilter, Admin

from tests.integration.test_security_acls import Cluster, cluster  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration

#: librdkafka's text of TOPIC_AUTHORIZATION_FAILED.
DENIED = "Broker: Topic authorization failed"


def run(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:  # noqa: F811
    """``fluxctl ARGS`` as the administrator (client certificate), in a subprocess."""
    admin = cluster.admin_config()
    options = [
        "--bootstrap",
        admin["bootstrap.servers"],
        "--security-protocol",
        "SSL",
        "--ssl-cafile",
        admin["ssl.ca.location"],
        "--ssl-certfile",
        admin["ssl.certificate.location"],
        "--ssl-keyfile",
        admin["ssl.key.location"],
    ]
    return subprocess.run(
        [sys.executable, "-m", "flux.cli.main", *args, *options],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _json(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["acls"]


def _produce(config: dict[str, Any], topic: str) -> str:
    outcome: list[Any] = []
    producer = Producer({**config, "acks": "all", "message.timeout.ms": 10000})
    producer.produce(topic, b"value", on_delivery=lambda error, _m: outcome.append(error))
    producer.flush(20)
    assert len(outcome) == 1, outcome
    return "ok" if outcome[0] is None else outcome[0].str()


def test_fluxctl_acl_add_list_remove(cluster: Cluster) -> None:  # noqa: F811
    alice = cluster.user_config("alice")
    assert _produce(alice, "orders") == DENIED
    added = _json(
        run(
            cluster,
            "acl",
            "add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "WRITE",
            "--operation",
            "DESCRIBE",
            "--topic",
            "ord",
            "--prefixed",
            "--json",
        )
    )
    assert {(a["operation"], a["pattern_type"], a["resource_name"]) for a in added} == {
        ("WRITE", "PREFIXED", "ord"),
        ("DESCRIBE", "PREFIXED", "ord"),
    }
    denied = _json(
        run(
            cluster,
            "acl",
            "add",
            "--deny-principal",
            "User:alice",
            "--operation",
            "WRITE",
            "--topic",
            "orders-audit",
            "--json",
        )
    )
    assert denied[0]["permission"] == "DENY"
    assert _produce(alice, "orders") == "ok"
    assert _produce(alice, "orders-audit") == DENIED

    # list with a resource: every binding that applies to it (the prefix and the literal deny).
    applying = _json(run(cluster, "acl", "list", "--topic", "orders-audit", "--json"))
    assert {(a["permission"], a["resource_name"]) for a in applying} == {
        ("ALLOW", "ord"),
        ("DENY", "orders-audit"),
    }
    everything = _json(run(cluster, "acl", "list", "--principal", "User:alice", "--json"))
    assert len(everything) == 3
    text = run(cluster, "acl", "list")
    assert "DENY User:alice from * to WRITE topic orders-audit" in text.stdout

    # Refused input is an error naming the problem, and adds nothing.
    bad = run(
        cluster, "acl", "add", "--allow-principal", "alice", "--operation", "READ", "--topic", "x"
    )
    assert bad.returncode == 1 and "principal" in bad.stderr.lower(), bad.stderr
    assert run(cluster, "acl", "remove").returncode != 0  # never "remove everything"

    removed = _json(
        run(
            cluster,
            "acl",
            "remove",
            "--principal",
            "User:alice",
            "--topic",
            "ord",
            "--prefixed",
            "--operation",
            "WRITE",
            "--json",
        )
    )
    assert [(a["operation"], a["resource_name"]) for a in removed] == [("WRITE", "ord")]
    assert _produce(alice, "orders") == DENIED

    # The SDK calls under the commands, as a program would use them.
    admin_config = cluster.admin_config()
    security = {
        key: admin_config[key]
        for key in (
            "security.protocol",
            "ssl.ca.location",
            "ssl.certificate.location",
            "ssl.key.location",
        )
    }
    with Admin(admin_config["bootstrap.servers"], security=security) as admin:
        admin.create_acls([AclBinding("GROUP", "billing", "User:alice", "READ")])
        groups = admin.describe_acls(AclFilter(resource_type="GROUP"))
        assert groups == [AclBinding("GROUP", "billing", "User:alice", "READ")]
        assert admin.delete_acls([AclFilter(principal="User:alice")]) != []
        assert admin.describe_acls() == []
