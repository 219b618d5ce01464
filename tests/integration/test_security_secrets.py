"""Secrets stay secret: after logins that work and logins that fail (Kafka and HTTP), user
administration, a signed subscription and `fluxctl` output, no password, stored key, salt,
signing secret or cluster credential appears in a node's log, `/metrics` or command output."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, Producer
from flux.auth.internal import authorization_value, node_token
from flux.cluster.launcher import NodeProcess

from tests.integration.helpers import wait_until
from tests.integration.http_helpers import call

pytestmark = pytest.mark.integration

PASSWORD = "correct-Horse-battery-9"
WRONG = "wrong-Guess-pa55word"


def _fluxctl(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "flux.cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_no_secret_is_logged_or_shown(node_factory: Callable[..., NodeProcess]) -> None:
    node = node_factory(
        broker={"listeners": ["PLAINTEXT://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0"]},
        security={
            "authorizer_enable": True,
            "super_users": ["User:ANONYMOUS"],
            "allow_everyone_if_no_acl_found": True,
            "http_auth": "required",
            "internal_auth": True,
        },
        node={"log_level": "DEBUG"},
        topic={"partitions": 1, "replication_factor": 1},
    )
    plain = node.ready["listeners"]["PLAINTEXT"]
    sasl = node.ready["listeners"]["SASL_PLAINTEXT"]
    outputs = [_fluxctl("user", "create", "alice", "--password-stdin", "-b", plain, stdin=PASSWORD)]
    outputs.append(_fluxctl("user", "list", "--json", "-b", plain))
    assert "alice" in outputs[-1]

    def login(password: str, mechanism: str) -> bool:
        errors: list[KafkaError] = []
        delivered: list[object] = []
        producer = Producer(
            {
                "bootstrap.servers": sasl,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism,
                "sasl.username": "alice",
                "sasl.password": password,
                "error_cb": errors.append,
            }
        )
        producer.produce("secrets", b"x", on_delivery=lambda e, _m: delivered.append(e))

        def settled() -> bool:
            producer.poll(0.1)
            return bool(delivered) or any(e.code() == KafkaError._AUTHENTICATION for e in errors)

        wait_until(settled, timeout_s=30)
        # Logged in: the produce got an answer.
        answered = bool(delivered)
        producer.purge()
        producer.flush(5)
        return answered

    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"):
        assert login(PASSWORD, mechanism)
        assert not login(WRONG, mechanism)
    base = f"http://{node.ready['broker_http']}"
    for password in (PASSWORD, WRONG):
        token = base64.b64encode(f"alice:{password}".encode()).decode()
        request = urllib.request.Request(
            base + "/topics", headers={"Authorization": f"Basic {token}"}
        )
        try:
            urllib.request.urlopen(request, timeout=10).read()
        except urllib.error.HTTPError as error:
            error.read()
    # A signed subscription, made by alice over HTTP.
    token = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    request = urllib.request.Request(
        base + "/subscribe",
        data=json.dumps({"address": "http://127.0.0.1:9/none", "topics": ["secrets"]}).encode(),
        headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        signing_secret = json.loads(reply.read())["signingSecret"]
    outputs.append(_fluxctl("topic", "describe", "secrets", "-b", plain))
    # What the cluster stores for alice (read as a member would, with the node credential).
    cluster_secret = tomllib.loads(node.config_path.read_text())["controller"]["secret"]
    metadata_request = urllib.request.Request(
        f"http://{node.ready['controller_http']}/controller/metadata?version=0&wait_ms=0",
        headers={"Authorization": authorization_value(cluster_secret)},
    )
    with urllib.request.urlopen(metadata_request, timeout=10) as reply:
        stored = [
            value
            for credential in _find(json.loads(reply.read()), "scram_credentials")
            for key, value in credential.items()
            if key in ("salt", "stored_key", "server_key")
        ]
    assert len(stored) == 6  # two mechanisms
    outputs.append(_fluxctl("user", "delete", "alice", "-b", plain))
    status, _ = call(node, "GET", "/health")
    assert status == 200
    metrics = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    secrets = {
        "password": PASSWORD,
        "wrong password": WRONG,
        "basic credentials": token,
        "signing secret": signing_secret,
        "cluster secret": cluster_secret,
        "node token": node_token(cluster_secret),
    }
    secrets.update({f"stored value {i}": value for i, value in enumerate(stored)})
    texts = {"node log": node.log_path.read_text(), "metrics": metrics}
    texts.update({f"fluxctl output {i}": text for i, text in enumerate(outputs)})
    for where, text in texts.items():
        for what, secret in secrets.items():
            assert secret not in text, f"the {what} appears in the {where}"


def _find(document: object, key: str) -> list[dict]:
    """Every list under ``key`` anywhere in a JSON document, concatenated."""
    found: list[dict] = []
    if isinstance(document, dict):
        for name, value in document.items():
            if name == key and isinstance(value, list):
                found.extend(value)
            else:
                found.extend(_find(value, key))
    elif isinstance(document, list):
        for item in document:
            found.extend(_find(item, key))
    return found
