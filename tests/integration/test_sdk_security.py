"""The SDK on secured listeners of a real node: SASL_SSL with SCRAM-SHA-512, SASL_PLAINTEXT with
PLAIN, SSL with a client certificate, refused logins (``FluxAuthenticationError``, fast and
without the password), KIP-368 re-authentication keeping connections across several session
lifetimes, and SCRAM users managed with the SDK's Admin.

The node has all four listeners and certificates from a throwaway ``CertificateAuthority``
(the pattern of ``test_security_listeners.py``); its SCRAM user is created with the SDK's
``Admin`` over PLAINTEXT and checked with confluent-kafka's AdminClient.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ScramMechanism
from flux.auth.certificates import CertificateAuthority
from flux.cluster.launcher import NodeProcess
from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode
from flux.sdk import (
    Admin,
    ClientSecurity,
    Consumer,
    FluxAuthenticationError,
    FluxConnectionError,
    Producer,
    ResourceNotFoundError,
    ScramCredentialDeletion,
    ScramCredentialInfo,
    ScramCredentialUpsertion,
    TopicPartition,
)

from tests.integration.security_helpers import Secured, start_secured_node

pytestmark = pytest.mark.integration

PASSWORD = "alice-s3cret-Passw0rd"


def start_secured(
    node_factory: Callable[..., NodeProcess], directory: Path, **security: Any
) -> Secured:
    """A node with every listener and the SCRAM user alice (both mechanisms); the
    certificate of a CA the node does not trust in ``stranger-ca.pem``."""
    secured = start_secured_node(node_factory, directory, **security)
    stranger_ca = CertificateAuthority.create("someone else")
    (directory / "stranger-ca.pem").write_bytes(stranger_ca.certificate_pem)
    with Admin(secured.listeners["PLAINTEXT"], timeout_s=30) as admin:
        admin.alter_user_scram_credentials(
            [
                ScramCredentialUpsertion("alice", "SCRAM-SHA-256", PASSWORD),
                ScramCredentialUpsertion("alice", "SCRAM-SHA-512", PASSWORD, iterations=8192),
            ]
        )
    return secured


@pytest.fixture
def secured(node_factory: Callable[..., NodeProcess], tmp_path: Path) -> Secured:
    return start_secured(node_factory, tmp_path)


def _sasl(secured: Secured, listener: str, mechanism: str, **overrides: Any) -> ClientSecurity:
    settings: dict[str, Any] = {
        "security_protocol": listener,
        "sasl_mechanism": mechanism,
        "sasl_username": "alice",
        "sasl_password": PASSWORD,
    }
    if listener == "SASL_SSL":
        settings["ssl_cafile"] = secured.ca
    settings.update(overrides)
    return ClientSecurity(**settings)


def _round_trip(bootstrap: str, security: Any, topic: str, count: int) -> list[bytes]:
    """Produce ``count`` records and read them back, both over ``security``."""
    values = [f"{topic}-{index}".encode() for index in range(count)]
    with Producer(bootstrap, security=security, acks="all", delivery_timeout_ms=30_000) as p:
        sent = p.send(topic, values)
    assert [record.offset for record in sent] == list(range(count))
    read: list[bytes] = []
    with Consumer(bootstrap, security=security, read_old=True, fetch_max_wait_ms=200) as c:
        c.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 30
        while len(read) < count and time.monotonic() < deadline:
            read += [record.value for record in c.poll(timeout_s=0.5)]
    return read


def _connected_ports(client: Any) -> set[int]:
    return {connection.address[1] for connection in client.connections.values()}


def test_sdk_over_sasl_ssl_with_scram_sha_512(secured: Secured) -> None:
    bootstrap = secured.listeners["SASL_SSL"]
    security = _sasl(secured, "SASL_SSL", "SCRAM-SHA-512")
    assert _round_trip(bootstrap, security, "sasl-ssl", 20) == [
        f"sasl-ssl-{index}".encode() for index in range(20)
    ]
    # Metadata names the listener the client came in on, so every connection is a SASL_SSL one.
    with Admin(bootstrap, security=security) as admin:
        assert admin.list_topics() == ["sasl-ssl"]
        port = int(bootstrap.rpartition(":")[2])
        assert _connected_ports(admin.client) == {port}
        (connection,) = admin.client.connections.values()
        assert connection.authentications == 1
    # confluent-kafka reads the credentials the SDK's Admin created.
    confluent_admin = AdminClient({"bootstrap.servers": secured.listeners["PLAINTEXT"]})
    futures = confluent_admin.describe_user_scram_credentials(["alice"])
    described = futures["alice"].result(timeout=30)
    assert sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 4096),
        (ScramMechanism.SCRAM_SHA_512, 8192),
    ]
    assert PASSWORD not in secured.node.log_path.read_text()


def test_sdk_over_sasl_plaintext_with_plain_from_kafka_settings(secured: Secured) -> None:
    security = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": PASSWORD,
    }
    read = _round_trip(secured.listeners["SASL_PLAINTEXT"], security, "sasl-plain", 10)
    assert read == [f"sasl-plain-{index}".encode() for index in range(10)]
    # SCRAM-SHA-256 on the same listener, reading what PLAIN wrote.
    with Consumer(
        secured.listeners["SASL_PLAINTEXT"],
        security=_sasl(secured, "SASL_PLAINTEXT", "SCRAM-SHA-256"),
        read_old=True,
    ) as consumer:
        consumer.assign([TopicPartition("sasl-plain", 0)])
        assert consumer.end_offsets("sasl-plain") == {0: 10}


def test_sdk_over_ssl_with_a_client_certificate(
    node_factory: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    secured = start_secured(node_factory, tmp_path, ssl_client_auth="required")
    bootstrap = secured.listeners["SSL"]
    security = ClientSecurity(
        security_protocol="SSL",
        ssl_cafile=secured.ca,
        ssl_certfile=secured.file("client.pem"),
        ssl_keyfile=secured.file("client.key"),
    )
    assert _round_trip(bootstrap, security, "mutual-tls", 5) == [
        f"mutual-tls-{index}".encode() for index in range(5)
    ]
    # With a CA that did not sign the node's certificate the client refuses the node, at once.
    started = time.monotonic()
    stranger = security.with_overrides(ssl_cafile=secured.file("stranger-ca.pem"))
    with pytest.raises(FluxAuthenticationError, match="certificate verify failed"):
        with Admin(bootstrap, security=stranger, timeout_s=20) as admin:
            admin.list_topics()
    assert time.monotonic() - started < 10
    # Without a client certificate the node closes the connection after the TLS handshake,
    # which a client cannot tell from a broker going away: retried, then reported with a hint.
    anonymous = ClientSecurity(security_protocol="SSL", ssl_cafile=secured.ca)
    with pytest.raises(FluxConnectionError, match="client certificate"):
        with Admin(bootstrap, security=anonymous, timeout_s=2) as admin:
            admin.list_topics()


def test_a_wrong_password_raises_an_authentication_error(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="flux")
    wrong = "not-" + PASSWORD
    cases = [
        ("SASL_SSL", "SCRAM-SHA-512", {"sasl_password": wrong}, "invalid credentials"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256", {"sasl_username": "mallory"}, "invalid credentials"),
        ("SASL_PLAINTEXT", "PLAIN", {"sasl_password": wrong}, "Invalid username or password"),
    ]
    for listener, mechanism, overrides, message in cases:
        security = _sasl(secured, listener, mechanism, **overrides)
        started = time.monotonic()
        with pytest.raises(FluxAuthenticationError) as refused:
            with Producer(secured.listeners[listener], security=security) as producer:
                producer.send("refused", b"never")
        # Not retried until the delivery timeout: the same credentials would fail again.
        assert time.monotonic() - started < 10
        error = refused.value
        assert error.code is ErrorCode.SASL_AUTHENTICATION_FAILED
        assert message in str(error)
        assert mechanism in str(error)
        for text in (str(error), repr(error)):
            assert PASSWORD not in text and wrong not in text
    assert PASSWORD not in caplog.text and wrong not in caplog.text
    # Nothing was written; alice still gets in.
    with Admin(
        secured.listeners["SASL_PLAINTEXT"],
        security=_sasl(secured, "SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ) as admin:
        assert "refused" not in admin.list_topics()


def test_reauthentication_keeps_connections_across_session_lifetimes(
    node_factory: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    secured = start_secured(node_factory, tmp_path, connections_max_reauth_ms=1500)
    bootstrap = secured.listeners["SASL_SSL"]
    security = _sasl(secured, "SASL_SSL", "SCRAM-SHA-256")
    with (
        Producer(bootstrap, security=security, acks="all") as producer,
        Consumer(bootstrap, security=security, read_old=True, fetch_max_wait_ms=100) as consumer,
        Admin(bootstrap, security=security) as admin,
    ):
        producer.send("reauth", b"first")
        consumer.assign([TopicPartition("reauth", 0)])
        read = [record.value for record in consumer.poll(timeout_s=1.0)]
        assert admin.list_topics() == ["reauth"]
        connections = {
            "producer": dict(producer.client.connections),
            "consumer": dict(consumer.client.connections),
            "admin": dict(admin.client.connections),
        }
        assert all(connections.values()), connections
        sent = 1
        started = time.monotonic()
        while time.monotonic() - started < 4.5:
            producer.send("reauth", f"r-{sent}".encode())
            sent += 1
            read += [record.value for record in consumer.poll(timeout_s=0.1)]
            assert admin.list_topics() == ["reauth"]
        deadline = time.monotonic() + 10
        while len(read) < sent and time.monotonic() < deadline:
            read += [record.value for record in consumer.poll(timeout_s=0.2)]
        assert read == [b"first"] + [f"r-{index}".encode() for index in range(1, sent)]
        # The same connections all along, each re-authenticated about every 1.3 s.
        for name, client in (
            ("producer", producer.client),
            ("consumer", consumer.client),
            ("admin", admin.client),
        ):
            now = dict(client.connections)
            assert now == connections[name], name
            for connection in now.values():
                assert connection.authentications >= 3, (name, connection.authentications)


def test_scram_users_with_the_sdk_admin(secured: Secured) -> None:
    plaintext = secured.listeners["PLAINTEXT"]
    with Admin(plaintext) as admin:
        described = admin.describe_user_scram_credentials()
        assert list(described) == ["alice"]
        assert described["alice"].credentials == [
            ScramCredentialInfo("SCRAM-SHA-256", 4096),
            ScramCredentialInfo("SCRAM-SHA-512", 8192),
        ]
        admin.alter_user_scram_credentials(
            [ScramCredentialUpsertion("bob", "SCRAM-SHA-512", "bob-password")]
        )
        assert admin.describe_user_scram_credentials(["bob"])["bob"].credentials == [
            ScramCredentialInfo("SCRAM-SHA-512", 4096)
        ]
        with pytest.raises(ResourceNotFoundError, match="carol"):
            admin.describe_user_scram_credentials(["bob", "carol"])
        # A new password together with deleting a credential bob does not have: all or
        # nothing for bob, so his password stays the old one.
        with pytest.raises(ResourceNotFoundError, match="bob"):
            admin.alter_user_scram_credentials(
                [ScramCredentialUpsertion("bob", "SCRAM-SHA-512", "new-password")],
                [ScramCredentialDeletion("bob", "SCRAM-SHA-256")],
            )
    bob = _sasl(
        secured,
        "SASL_PLAINTEXT",
        "SCRAM-SHA-512",
        sasl_username="bob",
        sasl_password="bob-password",
    )
    with Admin(secured.listeners["SASL_PLAINTEXT"], security=bob) as admin:
        assert admin.list_topics() == []
    with Admin(plaintext) as admin:
        admin.alter_user_scram_credentials(
            deletions=[ScramCredentialDeletion("bob", "SCRAM-SHA-512")]
        )
        assert list(admin.describe_user_scram_credentials()) == ["alice"]
    with pytest.raises(FluxAuthenticationError, match="invalid credentials"):
        with Admin(secured.listeners["SASL_PLAINTEXT"], security=bob) as admin:
            admin.list_topics()


def test_a_refused_reauthentication_closes_the_connection(
    node_factory: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    secured = start_secured(node_factory, tmp_path, connections_max_reauth_ms=1500)
    with Admin(secured.listeners["PLAINTEXT"]) as admin:
        admin.alter_user_scram_credentials(
            [ScramCredentialUpsertion("temp", "SCRAM-SHA-512", "temp-password")]
        )
    temp = _sasl(
        secured,
        "SASL_PLAINTEXT",
        "SCRAM-SHA-512",
        sasl_username="temp",
        sasl_password="temp-password",
    )
    with Admin(secured.listeners["SASL_PLAINTEXT"], security=temp) as admin:
        assert admin.list_topics() == []
        (connection,) = admin.client.connections.values()
        with Admin(secured.listeners["PLAINTEXT"]) as root:
            root.alter_user_scram_credentials(
                deletions=[ScramCredentialDeletion("temp", "SCRAM-SHA-512")]
            )
        # The next re-authentication (at most ~1.3 s away) is refused and closes the
        # connection; what was waiting on it raises the refusal.
        deadline = time.monotonic() + 10
        while not connection.closed and time.monotonic() < deadline:
            time.sleep(0.1)
        assert connection.closed
        with pytest.raises(FluxAuthenticationError, match="re-authentication failed.*temp"):
            admin.run_async(connection.request(ApiKey.METADATA, {"topics": None}))
        # A new connection is refused as well.
        with pytest.raises(FluxAuthenticationError, match="invalid credentials"):
            admin.list_topics()
