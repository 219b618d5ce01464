"""Topic names and Kafka-named topic configs."""

from __future__ import annotations

import pytest
from flux.cluster.config import parse_config
from flux.cluster.topics import (
    InvalidConfigError,
    InvalidTopicError,
    TopicConfig,
    validate_topic_name,
)


@pytest.mark.parametrize("name", ["a", "orders.v1", "A_b-9", "x" * 249])
def test_legal_names(name: str) -> None:
    assert validate_topic_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a/b", "a b", "ü", None])
def test_illegal_names(name) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def _config(**overrides: str) -> TopicConfig:
    defaults = parse_config({"controller": {"secret": "s"}}, environ={})["topic"]
    return TopicConfig.from_defaults(
        defaults, {k.replace("_", "."): v for k, v in overrides.items()}, message_max_bytes=1000
    )


def test_overrides_map_onto_log_config() -> None:
    config = _config(retention_ms="1000", segment_bytes="4096", flush_messages="1")
    log_config = config.log_config()
    assert (log_config.retention_ms, log_config.segment_bytes) == (1000, 4096)
    assert log_config.flush_messages == 1 and log_config.flush_ms is None
    assert config.overrides == {"retention.ms", "segment.bytes", "flush.messages"}
    assert config.values["max.message.bytes"] == "1000"


def test_log_append_time() -> None:
    assert _config(message_timestamp_type="LogAppendTime").log_config().log_append_time


@pytest.mark.parametrize(
    "overrides",
    [{"retention.mss": "1"}, {"retention.ms": "x"}, {"segment.bytes": "12"}, {"storage": "tape"}],
)
def test_bad_topic_configs(overrides: dict[str, str]) -> None:
    defaults = parse_config({"controller": {"secret": "s"}}, environ={})["topic"]
    with pytest.raises(InvalidConfigError):
        TopicConfig.from_defaults(defaults, overrides, message_max_bytes=1000)
