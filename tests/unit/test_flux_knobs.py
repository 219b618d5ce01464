"""The original Flux configuration knobs (seconds), the memory-topic cleanup rule, and the
push-subscription metadata records and handlers."""

from __future__ import annotations

import pytest
from flux.cluster.config import ConfigError, parse_config
from flux.cluster.http.memory_topics import cutoff
from flux.controller import handlers
from flux.controller.errors import InvalidRecordError
from flux.controller.image import MetadataImage, SubscriptionImage
from flux.controller.records import (
    DeleteSubscription,
    RegisterSubscription,
    SubscriptionStateChange,
    SubscriptionWindowChange,
    record_from_dict,
    record_to_dict,
)
from flux.protocol.errors import ErrorCode

from tests.unit.test_config import SECRET


def _config(**sections: dict) -> object:
    return parse_config({**SECRET, **sections}, environ={})


def test_original_flux_knobs_in_seconds_set_the_millisecond_keys() -> None:
    config = _config(
        api={"port": 8080},
        message={"ttl": 30, "cleanup_time": 0.5},
        subscriber={
            "retry_count": 3,
            "retry_interval": 2,
            "cleanup_time": 10,
            "timeout": 1.5,
            "inactive_time": 60,
        },
        topic={"buffer": 50},
    )
    assert config.broker.http_port == 8080
    assert (config.message.ttl_ms, config.message.cleanup_interval_ms) == (30000, 500)
    subscriber = config.subscriber
    assert subscriber.retry_count == 3
    assert (subscriber.retry_interval_ms, subscriber.timeout_ms) == (2000, 1500)
    assert (subscriber.cleanup_interval_ms, subscriber.inactive_time_ms) == (10000, 60000)
    assert config.topic.buffer == 50
    assert _config(message={"ttl": -1}).message.ttl_ms == -1


@pytest.mark.parametrize(
    ("sections", "named"),
    [
        ({"subscriber": {"timeout": 0}}, "subscriber.timeout"),
        ({"subscriber": {"timeout": -2}}, "subscriber.timeout"),
        ({"subscriber": {"retry_interval": "soon"}}, "subscriber.retry_interval"),
        ({"subscriber": {"timeout_ms": 0}}, "subscriber.timeout_ms"),
        ({"subscriber": {"retry_count": -1}}, "subscriber.retry_count"),
        ({"message": {"cleanup_time": 0}}, "message.cleanup_time"),
        ({"message": {"ttl": 5, "ttl_ms": 7}}, "message.ttl"),
        ({"api": {"port": 8080}, "broker": {"http_port": 8081}}, "api.port"),
        ({"topic": {"buffer": 0}}, "topic.buffer"),
    ],
)
def test_bad_knobs_stop_the_node_naming_the_key(sections: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        _config(**sections)


def test_cleanup_cutoff_needs_ttl_and_every_position() -> None:
    # Everything expired, nobody holds anything: all of it up to the high watermark.
    assert (
        cutoff(log_start_offset=0, high_watermark=10, first_unexpired_offset=None, positions=[])
        == 10
    )
    # A group at 4 holds the rest even though it expired.
    assert (
        cutoff(log_start_offset=0, high_watermark=10, first_unexpired_offset=None, positions=[4, 9])
        == 4
    )
    # Acknowledged by everyone but within the TTL from offset 6 on.
    assert (
        cutoff(log_start_offset=0, high_watermark=10, first_unexpired_offset=6, positions=[10]) == 6
    )
    # Never before the log start, never past the high watermark.
    assert (
        cutoff(log_start_offset=5, high_watermark=10, first_unexpired_offset=None, positions=[2])
        == 5
    )
    assert (
        cutoff(log_start_offset=0, high_watermark=7, first_unexpired_offset=None, positions=[9])
        == 7
    )


def _apply(image: MetadataImage, result: handlers.ControllerResult) -> MetadataImage:
    return image.replay_all(result.records, image.version + 1)


def test_subscription_lifecycle_records() -> None:
    image = MetadataImage.EMPTY
    created = handlers.register_subscription(
        image,
        subscription_id="s-1",
        address="http://h:1",
        topics=["a", "a", "b"],
        read_old=True,
        now_ms=5,
    )
    assert created.response["created"] is True
    image = _apply(image, created)
    subscription = image.subscriptions["s-1"]
    assert (subscription.topics, subscription.active, subscription.read_old) == (
        ("a", "b"),
        True,
        True,
    )
    again = handlers.register_subscription(
        image,
        subscription_id="s-1",
        address="http://h:1",
        topics=["a", "b"],
        read_old=True,
        now_ms=6,
    )
    assert again.records == [] and again.response["created"] is False
    image = _apply(
        image, handlers.set_subscription_state(image, subscription_id="s-1", active=False, now_ms=9)
    )
    assert (image.subscriptions["s-1"].active, image.subscriptions["s-1"].changed_ms) == (False, 9)
    reactivated = handlers.register_subscription(
        image,
        subscription_id="s-1",
        address="http://h:1",
        topics=["a", "b"],
        read_old=True,
        now_ms=12,
    )
    assert reactivated.response["reactivated"] is True
    image = _apply(image, reactivated)
    assert image.subscriptions["s-1"].active is True
    assert MetadataImage.from_dict(image.to_dict()) == image
    image = _apply(image, handlers.delete_subscription(image, subscription_id="s-1"))
    assert "s-1" not in image.subscriptions
    missing = handlers.delete_subscription(image, subscription_id="s-1")
    assert missing.response["error_code"] == ErrorCode.RESOURCE_NOT_FOUND


@pytest.mark.parametrize("address", ["ftp://h/x", "h:1", ""])
def test_subscription_address_must_be_a_url(address: str) -> None:
    result = handlers.register_subscription(
        MetadataImage.EMPTY,
        subscription_id="s",
        address=address,
        topics=["a"],
        read_old=False,
        now_ms=0,
    )
    assert result.records == [] and result.response["error_code"] == ErrorCode.INVALID_REQUEST


def test_subscription_records_round_trip() -> None:
    for record in (
        RegisterSubscription("s", "ws://h:1/x", ("a",), False, 3),
        RegisterSubscription("s", "ws://h:1/x", ("a",), False, 3, max_in_flight=1000),
        SubscriptionStateChange("s", True, 4),
        SubscriptionWindowChange("s", max_in_flight=7),
        DeleteSubscription("s"),
    ):
        assert record_from_dict(record_to_dict(record)) == record


def test_subscription_records_and_snapshots_from_before_windows_mean_one_at_a_time() -> None:
    """Records and snapshots written before ``max_in_flight`` existed lack it: window 1."""
    old_record = {
        "type": "RegisterSubscription",
        "v": 1,
        "subscription_id": "s-old",
        "address": "http://h:1",
        "topics": ["a"],
        "read_old": True,
        "created_ms": 5,
    }
    record = record_from_dict(old_record)
    assert isinstance(record, RegisterSubscription) and record.max_in_flight == 1
    image = MetadataImage.EMPTY.replay_all([record], 1)
    assert image.subscriptions["s-old"].max_in_flight == 1
    old_snapshot = image.to_dict()
    for item in old_snapshot["subscriptions"]:
        del item["max_in_flight"]
    restored = MetadataImage.from_dict(old_snapshot)
    assert restored.subscriptions["s-old"] == SubscriptionImage(
        "s-old", "http://h:1", ("a",), read_old=True, active=True, changed_ms=5, max_in_flight=1
    )


@pytest.mark.parametrize("value", [0, -1, 1001, True, "10", 2.5, None])
def test_a_subscription_window_outside_1_to_1000_is_an_invalid_record(value: object) -> None:
    for data in (
        record_to_dict(RegisterSubscription("s", "http://h:1", ("a",), False, 3)),
        record_to_dict(SubscriptionWindowChange("s", 5)),
    ):
        with pytest.raises(InvalidRecordError, match="max_in_flight"):
            record_from_dict({**data, "max_in_flight": value})


def test_resubscribing_with_another_window_changes_it() -> None:
    def register(image: MetadataImage, max_in_flight: int) -> handlers.ControllerResult:
        return handlers.register_subscription(
            image,
            subscription_id="s-1",
            address="ws://h:1/ws",
            topics=["a"],
            read_old=False,
            now_ms=20,
            max_in_flight=max_in_flight,
        )

    created = register(MetadataImage.EMPTY, 10)
    image = _apply(MetadataImage.EMPTY, created)
    assert image.subscriptions["s-1"].max_in_flight == 10
    assert register(image, 10).records == []
    changed = register(image, 3)
    assert changed.records == [SubscriptionWindowChange("s-1", max_in_flight=3)]
    assert changed.response["reactivated"] is False
    image = _apply(image, changed)
    assert (image.subscriptions["s-1"].max_in_flight, image.subscriptions["s-1"].changed_ms) == (
        3,
        20,
    )
    image = _apply(
        image,
        handlers.set_subscription_state(image, subscription_id="s-1", active=False, now_ms=30),
    )
    both = register(image, 1)
    assert [type(r) for r in both.records] == [SubscriptionStateChange, SubscriptionWindowChange]
    image = _apply(image, both)
    assert (image.subscriptions["s-1"].active, image.subscriptions["s-1"].max_in_flight) == (
        True,
        1,
    )
    assert MetadataImage.from_dict(image.to_dict()) == image
    for bad in (0, 1001):
        result = register(image, bad)
        assert result.records == []
        assert result.response["error_code"] == ErrorCode.INVALID_REQUEST
