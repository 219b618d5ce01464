"""``fluxctl cluster up --secure`` as an operator uses it: a 3-node cluster with one SASL_SSL
listener per node, ACLs and authenticated HTTP, and the admin's client settings in
``client.properties``. The printed settings work with confluent-kafka, kafka-python, aiokafka
and ``fluxctl --client-config``; clients without credentials, or with a wrong password, get
nothing; ``status``, ``kill``, ``restart`` and ``down`` work as on a plain cluster.

The secured chaos run is in ``chaos/tests/test_scenarios.py`` with the other scenarios.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import ssl
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from flux.sdk.security import load_client_properties

pytestmark = pytest.mark.integration

TOPIC = "secure-orders"
#: librdkafka: no log lines (refused logins are the point of some checks here).
QUIET = {"log_level": 0}


def _fluxctl(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "flux.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    if check and done.returncode != 0:
        raise AssertionError(f"fluxctl {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


@pytest.fixture
def secure_cluster(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any], str]]:
    """``cluster up --secure`` in ``tmp_path/cluster``: (data dir, its JSON, its stderr);
    ``cluster down`` at teardown, and any node it missed is killed."""
    data_dir = tmp_path / "cluster"
    try:
        up = _fluxctl(
            "cluster", "up", "--secure", "--data-dir", str(data_dir), "--base-port", "0", "--json"
        )
        yield data_dir, json.loads(up.stdout), up.stdout + up.stderr
    finally:
        _fluxctl("cluster", "down", "--data-dir", str(data_dir), check=False)
        _kill_leftovers(data_dir)


def _kill_leftovers(data_dir: Path) -> None:
    try:
        state = json.loads((data_dir / "cluster.json").read_text())
    except (OSError, ValueError):
        return
    for entry in state.get("nodes", []):
        pid = entry.get("pid")
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_secure_cluster_up_serves_only_logged_in_clients(
    secure_cluster: tuple[Path, dict[str, Any], str],
) -> None:
    data_dir, up, output = secure_cluster
    security = up["security"]
    properties_path = Path(security["client_properties"])
    properties = load_client_properties(properties_path)
    password = properties["sasl.password"]
    bootstrap = up["bootstrap_servers"]

    # What was made, and how it is kept.
    assert up["secure"] is True and all(node["healthy"] for node in up["nodes"])
    assert sum(node["active_controller"] for node in up["nodes"]) == 1, "status over HTTPS"
    assert properties_path == data_dir / "client.properties"
    assert _mode(properties_path) == 0o600
    assert _mode(data_dir / "tls" / "node.key") == 0o600
    assert _mode(data_dir / "tls" / "ca.key") == 0o600
    assert password and password not in output, "the password is never printed"
    assert properties == {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "admin",
        "sasl.password": password,
        "ssl.ca.location": str(data_dir / "tls" / "ca.pem"),
    }
    assert json.loads((data_dir / "cluster.json").read_text())["secure"] is True
    confluent = security["confluent_kafka"]["settings"]
    assert confluent == {k: v for k, v in properties.items() if k != "sasl.password"}

    # confluent-kafka with the properties file: create, produce, consume.
    admin = AdminClient({**properties, **QUIET})
    created = admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=3)])
    created[TOPIC].result(timeout=30)
    producer = Producer({**properties, **QUIET, "acks": "all"})
    for index in range(20):
        producer.produce(TOPIC, f"order-{index}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {**properties, **QUIET, "group.id": "secure-readers", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([TOPIC])
    values: set[str] = set()
    deadline = time.monotonic() + 30
    while len(values) < 20 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.add(message.value().decode())
    consumer.close()
    assert values == {f"order-{index}" for index in range(20)}

    # The printed settings of the other libraries.
    _check_kafka_python(security, password)
    _check_aiokafka(security, password)

    # No credentials (PLAINTEXT to the TLS port), or a wrong password: nothing.
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(timeout=3)
    assert _login_error({**properties, "sasl.password": password + "x"}) == (
        KafkaError._AUTHENTICATION
    )

    # fluxctl with the client config.
    listed = _fluxctl(
        "topic", "list", "--bootstrap", bootstrap, "--client-config", str(properties_path)
    )
    assert TOPIC in listed.stdout.split()
    refused = _fluxctl("topic", "list", "--bootstrap", bootstrap, "--timeout", "2", check=False)
    assert refused.returncode != 0

    # The HTTP API wants a login; with the admin's it answers.
    broker_http = up["nodes"][0]["broker_http"]
    context = ssl.create_default_context(cafile=security["ca_file"])
    assert _http_status(f"https://{broker_http}/topics", context) == 401
    basic = base64.b64encode(f"admin:{password}".encode()).decode()
    assert _http_status(f"https://{broker_http}/topics", context, f"Basic {basic}") == 200

    # Node faults and the status page work as on a plain cluster.
    _fluxctl("cluster", "kill", "2", "--data-dir", str(data_dir))
    restarted = json.loads(
        _fluxctl("cluster", "restart", "2", "--data-dir", str(data_dir), "--json").stdout
    )
    assert all(node["healthy"] for node in restarted["nodes"])
    status = json.loads(_fluxctl("cluster", "status", "--data-dir", str(data_dir), "--json").stdout)
    assert status["secure"] is True and password not in json.dumps(status)
    down = _fluxctl("cluster", "down", "--data-dir", str(data_dir))
    assert json.loads(down.stdout) == {"stopped": [1, 2, 3]}


def _check_kafka_python(security: dict[str, Any], password: str) -> None:
    from kafka import KafkaConsumer

    settings = security["kafka_python"]["settings"]
    consumer = KafkaConsumer(**settings, **{security["kafka_python"]["password_setting"]: password})
    try:
        assert TOPIC in consumer.topics()
    finally:
        consumer.close()


def _check_aiokafka(security: dict[str, Any], password: str) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    async def send() -> None:
        producer = AIOKafkaProducer(
            **security["aiokafka"]["settings"],
            **{security["aiokafka"]["password_setting"]: password},
            ssl_context=create_ssl_context(cafile=security["ca_file"]),
        )
        await producer.start()
        try:
            await producer.send_and_wait(TOPIC, b"from-aiokafka")
        finally:
            await producer.stop()

    asyncio.run(send())


def _login_error(config: dict[str, str]) -> int | None:
    """The error code librdkafka reports for a producer with ``config`` (None if none)."""
    errors: list[KafkaError] = []
    producer = Producer({**config, **QUIET, "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    return errors[0].code() if errors else None


def _http_status(url: str, context: ssl.SSLContext, authorization: str | None = None) -> int:
    request = urllib.request.Request(url)
    if authorization:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return error.code
