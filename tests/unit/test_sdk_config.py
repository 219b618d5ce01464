"""Bad input to the SDK fails at construction or before any network call, naming what is wrong.

The bootstrap addresses point at a port nobody listens on: an error that needed the network
would be a ``FluxConnectionError``, so the typed errors asserted here prove nothing was sent.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from flux.sdk import (
    AsyncConsumer,
    AsyncProducer,
    ConfigurationError,
    Consumer,
    Message,
    MessageTooLargeError,
    Producer,
)
from flux.sdk.messages import MESSAGE_ID_HEADER, as_message, encode_headers
from flux.sdk.producer import parse_acks


@pytest.fixture(scope="module")
def nobody() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"linger_ms": -1}, "linger_ms"),
        ({"acks": 2}, "acks"),
        ({"acks": "most"}, "acks"),
        ({"acks": True}, "acks"),
        ({"batch_size": 0}, "batch_size"),
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"buffer_memory": -5}, "buffer_memory"),
        ({"max_request_size": 1 << 40}, "max_request_size"),
        ({"delivery_timeout_ms": 0}, "delivery_timeout_ms"),
        ({"compression": "brotli"}, "compression"),
        ({"acks": 1, "idempotent": True}, "idempotent"),
    ],
)
def test_invalid_producer_settings_raise_at_construction(nobody, options, named) -> None:
    with pytest.raises(ConfigurationError, match=named):
        AsyncProducer(nobody, **options)
    with pytest.raises(ConfigurationError, match=named):
        Producer(nobody, **options)


@pytest.mark.parametrize("bootstrap", ["", "   ", "no-port", "host:99999", ",,"])
def test_empty_or_malformed_bootstrap_raises(bootstrap: str) -> None:
    with pytest.raises(ConfigurationError, match="bootstrap"):
        AsyncProducer(bootstrap)
    with pytest.raises(ConfigurationError, match="bootstrap"):
        Consumer(bootstrap)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"topics": ["t"]}, "group_id"),
        ({"group_id": ""}, "group_id"),
        ({"group_id": "g", "topics": "orders"}, "topics"),
        ({"group_id": "g", "session_timeout_ms": 10}, "session_timeout_ms"),
        ({"group_id": "g", "heartbeat_interval_ms": 60_000}, "heartbeat_interval_ms"),
        ({"fetch_max_bytes": 0}, "fetch_max_bytes"),
        ({"max_poll_records": 0}, "max_poll_records"),
        ({"enable_auto_commit": True}, "enable_auto_commit"),
    ],
)
def test_invalid_consumer_settings_raise_at_construction(nobody, options, named) -> None:
    with pytest.raises(ConfigurationError, match=named):
        AsyncConsumer(nobody, **options)


def test_acks_spellings() -> None:
    assert [parse_acks(a) for a in ("all", "ALL", -1, "-1", 0, "0", 1, "1")] == [
        -1, -1, -1, -1, 0, 0, 1, 1,
    ]  # fmt: skip
    assert AsyncProducer("127.0.0.1:1").idempotent is True  # the default: acks=all, idempotent
    assert AsyncProducer("127.0.0.1:1", acks=1).idempotent is False


def test_oversize_message_raises_before_any_network_call(nobody) -> None:
    async def scenario() -> None:
        producer = AsyncProducer(nobody, max_request_size=10_000)
        started = time.monotonic()
        with pytest.raises(MessageTooLargeError, match="max_request_size"):
            await producer.produce("orders", b"x" * 20_000)
        with pytest.raises(MessageTooLargeError):
            await producer.send("orders", [b"small", Message(b"y" * 20_000)])
        with pytest.raises(MessageTooLargeError):  # headers count too
            await producer.produce("orders", b"", headers={"h": b"z" * 20_000})
        assert time.monotonic() - started < 1.0  # no connection attempts, no retries
        await producer.close()

    asyncio.run(scenario())
    with Producer(nobody, max_request_size=10_000) as producer:
        with pytest.raises(MessageTooLargeError):
            producer.send("orders", b"x" * 20_000)


def test_messages_and_headers() -> None:
    assert as_message(b"v") == Message(b"v")
    assert as_message("v") == Message("v")
    assert as_message(None) == Message(None)
    assert as_message({"value": b"v", "key": "k", "id": "m-1"}) == Message(b"v", key="k", id="m-1")
    with pytest.raises(ConfigurationError, match="unknown message fields"):
        as_message({"valeu": b"v"})
    with pytest.raises(ConfigurationError, match="a message is"):
        as_message(42)  # type: ignore[arg-type]
    assert encode_headers({"a": "x", "b": None}, "m-1") == (
        ("a", b"x"),
        ("b", None),
        (MESSAGE_ID_HEADER, b"m-1"),
    )
    with pytest.raises(ConfigurationError, match="header value"):
        encode_headers({"a": 3})  # type: ignore[dict-item]


def test_closed_clients_refuse_work(nobody) -> None:
    producer = Producer(nobody)
    producer.close()
    with pytest.raises(ConfigurationError, match="closed"):
        producer.produce("orders", b"x")
