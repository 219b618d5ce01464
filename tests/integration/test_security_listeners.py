"""Secured Kafka listeners with unmodified clients: SSL (with client certificates), SASL over
plaintext and TLS with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, SCRAM credentials managed through
AlterUserScramCredentials / DescribeUserScramCredentials, and KIP-368 re-authentication."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from flux.auth.certificates import CertificateAuthority
from flux.auth.scram import ScramClient
from flux.cluster.launcher import NodeProcess
from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode
from flux.sdk.wire import KafkaConnection

from tests.integration.helpers import list_offset, wait_until
from tests.integration.security_helpers import Secured, start_secured_node

pytestmark = pytest.mark.integration

PASSWORD = "alice-s3cret-Passw0rd"


def _start_secured(
    node_factory: Callable[..., NodeProcess], directory: Path, **security: Any
) -> Secured:
    secured = start_secured_node(node_factory, directory, **security)
    admin = AdminClient({"bootstrap.servers": secured.listeners["PLAINTEXT"]})
    futures = admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(
                "alice", ScramCredentialInfo(mechanism, 4096), PASSWORD.encode()
            )
            for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
        ]
    )
    for future in futures.values():
        future.result(timeout=30)
    return secured


@pytest.fixture
def secured(node_factory: Callable[..., NodeProcess], tmp_path: Path) -> Iterator[Secured]:
    yield _start_secured(node_factory, tmp_path)


def _sasl(secured: Secured, listener: str, mechanism: str, **overrides: str) -> dict[str, str]:
    config = {
        "bootstrap.servers": secured.listeners[listener],
        "security.protocol": listener,
        "sasl.mechanism": mechanism,
        "sasl.username": "alice",
        "sasl.password": PASSWORD,
    }
    if listener == "SASL_SSL":
        config["ssl.ca.location"] = secured.ca
    config.update(overrides)
    return config


def _produce_all(config: dict[str, Any], topic: str, count: int) -> None:
    errors: list[Any] = []
    producer = Producer({**config, "acks": "all", "message.timeout.ms": 20000})
    for index in range(count):
        producer.produce(
            topic, f"{topic}-{index}".encode(), on_delivery=lambda e, _m: errors.append(e)
        )
    assert producer.flush(30) == 0
    assert [error for error in errors if error is not None] == []
    assert len(errors) == count


def _end_offset(secured: Secured, topic: str) -> int:
    """The topic's partition 0 log end (-1 if the topic does not exist)."""
    with KafkaConnection(*secured.address("PLAINTEXT")) as conn:
        answer = list_offset(conn, topic, -1)
    return answer["offset"] if answer["error_code"] == ErrorCode.NONE else -1


def test_unmodified_clients_on_every_security_protocol(secured: Secured) -> None:
    # confluent-kafka over SASL_SSL with SCRAM-SHA-512.
    _produce_all(_sasl(secured, "SASL_SSL", "SCRAM-SHA-512"), "sasl-ssl", 20)
    # confluent-kafka over SASL_PLAINTEXT with SCRAM-SHA-256 and PLAIN.
    _produce_all(_sasl(secured, "SASL_PLAINTEXT", "SCRAM-SHA-256"), "sasl-plain-256", 5)
    _produce_all(_sasl(secured, "SASL_PLAINTEXT", "PLAIN"), "sasl-plain-plain", 5)

    # kafka-python over SASL_PLAINTEXT with PLAIN.
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=secured.listeners["SASL_PLAINTEXT"],
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice",
        sasl_plain_password=PASSWORD,
        acks="all",
    )
    try:
        for index in range(10):
            producer.send("kafka-python", f"kp-{index}".encode()).get(timeout=30)
    finally:
        producer.close()

    # aiokafka over SSL with a client certificate, reading back what kafka-python wrote.
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    async def over_ssl() -> list[bytes]:
        context = create_ssl_context(
            cafile=secured.ca,
            certfile=secured.file("client.pem"),
            keyfile=secured.file("client.key"),
        )
        producer = AIOKafkaProducer(
            bootstrap_servers=secured.listeners["SSL"],
            security_protocol="SSL",
            ssl_context=context,
            acks="all",
        )
        await producer.start()
        try:
            for index in range(10):
                await producer.send_and_wait("aiokafka", f"ak-{index}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            "kafka-python",
            bootstrap_servers=secured.listeners["SSL"],
            security_protocol="SSL",
            ssl_context=context,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        values: list[bytes] = []
        try:
            deadline = time.monotonic() + 30
            while len(values) < 10 and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=1000)
                values += [record.value for records in batches.values() for record in records]
        finally:
            await consumer.stop()
        return values

    assert asyncio.run(over_ssl()) == [f"kp-{index}".encode() for index in range(10)]

    # kafka-python reads what confluent-kafka wrote over SASL_SSL, over SASL_SSL with SCRAM.
    consumer = KafkaConsumer(
        "sasl-ssl",
        bootstrap_servers=secured.listeners["SASL_SSL"],
        security_protocol="SASL_SSL",
        ssl_cafile=secured.ca,
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password=PASSWORD,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10000,
    )
    try:
        values = [message.value for _, message in zip(range(20), consumer, strict=False)]
    finally:
        consumer.close()
    assert values == [f"sasl-ssl-{index}".encode() for index in range(20)]
    for topic, count in (("sasl-ssl", 20), ("sasl-plain-256", 5), ("aiokafka", 10)):
        assert _end_offset(secured, topic) == count

    # No secret reached the node's log.
    assert PASSWORD not in secured.node.log_path.read_text()


def _authentication_error(config: dict[str, Any]) -> KafkaError:
    errors: list[KafkaError] = []
    producer = Producer(
        {**config, "error_cb": errors.append, "reconnect.backoff.ms": 200, "acks": "all"}
    )
    producer.produce("refused", b"never")

    def refused() -> bool:
        producer.poll(0.1)
        return any(e.code() == KafkaError._AUTHENTICATION for e in errors)

    wait_until(refused, timeout_s=30)
    producer.purge()
    producer.flush(5)
    return next(e for e in errors if e.code() == KafkaError._AUTHENTICATION)


def test_wrong_credentials_and_plaintext_clients_are_refused(secured: Secured) -> None:
    wrong = _authentication_error(
        _sasl(secured, "SASL_PLAINTEXT", "SCRAM-SHA-512", **{"sasl.password": "wrong"})
    )
    assert "invalid credentials" in wrong.str()
    unknown = _authentication_error(
        _sasl(secured, "SASL_SSL", "SCRAM-SHA-256", **{"sasl.username": "mallory"})
    )
    # An unknown user is answered like a wrong password: nothing tells which.
    assert "invalid credentials" in unknown.str()
    plain = _authentication_error(
        _sasl(secured, "SASL_PLAINTEXT", "PLAIN", **{"sasl.password": "wrong"})
    )
    assert "Invalid username or password" in plain.str()

    # A request before the SASL exchange closes the connection, answered with nothing.
    with KafkaConnection(*secured.address("SASL_PLAINTEXT")) as conn:
        with pytest.raises((ConnectionError, EOFError, OSError)):
            conn.request(ApiKey.METADATA, 12, {"topics": None})
    # A plaintext Kafka client on the TLS port gets no Kafka answer.
    with KafkaConnection(*secured.address("SSL"), timeout_s=5) as conn:
        with pytest.raises((ConnectionError, EOFError, OSError)):
            conn.request(ApiKey.API_VERSIONS, 0, {})
    # An unsupported mechanism is answered with the enabled ones, then the connection closes.
    with KafkaConnection(*secured.address("SASL_PLAINTEXT")) as conn:
        answer = conn.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert answer["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert answer["mechanisms"] == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    # Nothing was written by any refused client; the node serves others as before.
    assert _end_offset(secured, "refused") in (-1, 0)
    _produce_all(_sasl(secured, "SASL_PLAINTEXT", "SCRAM-SHA-512"), "after-refusals", 3)
    log_text = secured.node.log_path.read_text()
    assert "wrong" not in log_text.replace("wrong credentials", "")
    assert PASSWORD not in log_text


def _scram_login(conn: KafkaConnection, mechanism: str, password: str) -> dict[str, Any]:
    handshake = conn.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    assert handshake["error_code"] == ErrorCode.NONE
    client = ScramClient(mechanism, "alice", password)
    first = conn.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.first()})
    assert first["error_code"] == ErrorCode.NONE, first
    final = conn.request(
        ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.final(first["auth_bytes"])}
    )
    if final["error_code"] == ErrorCode.NONE:
        client.verify(final["auth_bytes"])
    return final


def test_reauthentication_keeps_a_connection_and_expiry_closes_it(
    node_factory: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    secured = _start_secured(node_factory, tmp_path, connections_max_reauth_ms=2000)
    address = secured.address("SASL_PLAINTEXT")
    # A client that re-authenticates (librdkafka implements KIP-368) keeps producing across
    # several session lifetimes without an error.
    config = _sasl(secured, "SASL_PLAINTEXT", "SCRAM-SHA-512")
    errors: list[Any] = []
    producer = Producer({**config, "acks": "all", "error_cb": errors.append})
    delivered: list[Any] = []
    started = time.monotonic()
    sent = 0
    while time.monotonic() - started < 5:
        producer.produce("reauth", b"x", on_delivery=lambda e, _m: delivered.append(e))
        sent += 1
        producer.poll(0.05)
    assert producer.flush(30) == 0
    assert errors == []
    assert delivered == [None] * sent

    with KafkaConnection(*address) as conn:
        login = _scram_login(conn, "SCRAM-SHA-256", PASSWORD)
        assert login["error_code"] == ErrorCode.NONE
        assert login["session_lifetime_ms"] == 2000
        logged_in = time.monotonic()
        assert conn.request(ApiKey.METADATA, 12, {"topics": None})["brokers"]
        # Re-authenticating as the same user renews the session on the same connection.
        time.sleep(max(0.0, logged_in + 1.2 - time.monotonic()))
        again = _scram_login(conn, "SCRAM-SHA-512", PASSWORD)
        assert again["error_code"] == ErrorCode.NONE
        renewed = time.monotonic()
        time.sleep(max(0.0, logged_in + 2.3 - time.monotonic()))
        assert renewed + 2.0 > time.monotonic()
        assert conn.request(ApiKey.METADATA, 12, {"topics": None})["brokers"]
        # Once the session has expired without a re-authentication, the connection closes.
        time.sleep(max(0.0, renewed + 2.2 - time.monotonic()))
        with pytest.raises((ConnectionError, EOFError, OSError)):
            conn.request(ApiKey.METADATA, 12, {"topics": None})


def test_scram_credentials_are_described_and_deleted(secured: Secured) -> None:
    admin = AdminClient({"bootstrap.servers": secured.listeners["PLAINTEXT"]})
    described = admin.describe_user_scram_credentials(["alice"])["alice"].result(timeout=30)
    assert sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 4096),
        (ScramMechanism.SCRAM_SHA_512, 4096),
    ]
    # Too few iterations is refused and changes nothing of that user.
    bad = admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(
                "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"bob-password"
            )
        ]
    )
    with pytest.raises(Exception, match="iterations"):
        bad["bob"].result(timeout=30)
    with pytest.raises(Exception, match="RESOURCE_NOT_FOUND|not found|no credentials"):
        admin.describe_user_scram_credentials(["bob"])["bob"].result(timeout=30)
    # Deleting alice's SHA-512 credential: SHA-512 logins fail, SHA-256 ones still work.
    deleted = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_512)]
    )
    deleted["alice"].result(timeout=30)
    with KafkaConnection(*secured.address("SASL_PLAINTEXT")) as conn:
        assert _scram_login(conn, "SCRAM-SHA-256", PASSWORD)["error_code"] == ErrorCode.NONE
    with KafkaConnection(*secured.address("SASL_PLAINTEXT")) as conn:
        failed = _scram_login(conn, "SCRAM-SHA-512", PASSWORD)
        assert failed["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    # Deleting a credential that is not there is Kafka's RESOURCE_NOT_FOUND.
    again = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_512)]
    )
    with pytest.raises(Exception, match="RESOURCE_NOT_FOUND|no SCRAM-SHA-512 credential"):
        again["alice"].result(timeout=30)


def test_tls_listener_rejects_a_client_with_an_untrusted_certificate(
    node_factory: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    secured = _start_secured(node_factory, tmp_path, ssl_client_auth="required")
    other = CertificateAuthority.create("someone else")
    stranger = other.issue_client("stranger")
    (tmp_path / "stranger.pem").write_bytes(stranger.certificate_pem)
    (tmp_path / "stranger.key").write_bytes(stranger.key_pem)
    host, port = secured.address("SSL")
    for certificate in (None, "stranger"):
        context = ssl.create_default_context(cafile=secured.ca)
        if certificate:
            context.load_cert_chain(
                tmp_path / f"{certificate}.pem", tmp_path / f"{certificate}.key"
            )
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            with socket.create_connection((host, port), timeout=10) as raw:
                with context.wrap_socket(raw, server_hostname="localhost") as tls:
                    # TLS 1.3 reports a refused client certificate on the first read.
                    tls.sendall(b"\x00\x00\x00\x00")
                    if not tls.recv(1):
                        raise ConnectionError("closed")
    # The trusted client certificate gets in.
    _produce_all(
        {
            "bootstrap.servers": secured.listeners["SSL"],
            "security.protocol": "SSL",
            "ssl.ca.location": secured.ca,
            "ssl.certificate.location": secured.file("client.pem"),
            "ssl.key.location": secured.file("client.key"),
        },
        "mutual-tls",
        5,
    )
    assert _end_offset(secured, "mutual-tls") == 5
