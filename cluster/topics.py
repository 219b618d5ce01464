"""Topic names and topic configurations (Kafka's names: ``retention.ms``, ``segment.bytes``...).

A topic's configuration is the node's ``[topic]`` defaults overlaid with the values given at
creation (CreateTopics ``configs``). ``TopicConfig`` validates every key and value and maps them
onto the storage layer's ``LogConfig``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flux.storage import LogConfig

__all__ = [
    "MAX_TOPIC_NAME_LENGTH",
    "TOPIC_CONFIG_KEYS",
    "InvalidConfigError",
    "InvalidTopicError",
    "TopicConfig",
    "validate_topic_name",
]

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")


class InvalidTopicError(ValueError):
    """A topic name Kafka would refuse (maps to INVALID_TOPIC_EXCEPTION)."""


class InvalidConfigError(ValueError):
    """An unknown topic config key or an invalid value (maps to INVALID_CONFIG)."""


def validate_topic_name(name: object) -> str:
    """Return ``name`` if it is a legal topic name, else raise ``InvalidTopicError``."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("topic name must be a non-empty string")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name is {len(name)} characters long, the limit is {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL_NAME.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'"
        )
    return name


def _long(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise ValueError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise ValueError(f"expected an integer >= {low}, got {value}")
        return value

    return parse


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {text!r}")
        return text

    return parse


# Kafka-named topic configs Flux implements, with their parser. ``-1`` means "unlimited"/"never".
TOPIC_CONFIG_KEYS: dict[str, Callable[[str], Any]] = {
    "retention.ms": _long(-1),
    "retention.bytes": _long(-1),
    "segment.bytes": _long(1024),
    "segment.ms": _long(1),
    "flush.messages": _long(-1),
    "flush.ms": _long(-1),
    "min.insync.replicas": _long(1),
    "max.message.bytes": _long(0),
    "message.timestamp.type": _choice("CreateTime", "LogAppendTime"),
    "cleanup.policy": _choice("delete"),
    "storage": _choice("disk", "memory"),
}

_DEFAULT_KEYS = {
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "min.insync.replicas": "min_insync_replicas",
    "message.timestamp.type": "message_timestamp_type",
    "storage": "storage",
}


@dataclass(frozen=True)
class TopicConfig:
    """A topic's effective configuration: ``values`` maps every Kafka key to its string value;
    ``overrides`` holds the keys set explicitly for this topic."""

    values: Mapping[str, str]
    overrides: frozenset[str]

    @classmethod
    def from_defaults(
        cls,
        topic_defaults: Mapping[str, Any],
        overrides: Mapping[str, str | None],
        *,
        message_max_bytes: int,
    ) -> TopicConfig:
        values = {key: str(topic_defaults[name]) for key, name in _DEFAULT_KEYS.items()}
        values["max.message.bytes"] = str(message_max_bytes)
        values["cleanup.policy"] = "delete"
        explicit = set()
        for key, value in overrides.items():
            if key not in TOPIC_CONFIG_KEYS:
                raise InvalidConfigError(
                    f"unknown topic config {key!r} (supported: {', '.join(TOPIC_CONFIG_KEYS)})"
                )
            if value is None:
                continue
            try:
                TOPIC_CONFIG_KEYS[key](value)
            except ValueError as error:
                raise InvalidConfigError(f"topic config {key}: {error}") from None
            values[key] = value
            explicit.add(key)
        return cls(values=values, overrides=frozenset(explicit))

    def get(self, key: str) -> Any:
        return TOPIC_CONFIG_KEYS[key](self.values[key])

    def log_config(self) -> LogConfig:
        flush_messages = self.get("flush.messages")
        flush_ms = self.get("flush.ms")
        return LogConfig(
            segment_bytes=self.get("segment.bytes"),
            segment_ms=self.get("segment.ms"),
            retention_ms=self.get("retention.ms"),
            retention_bytes=self.get("retention.bytes"),
            flush_messages=flush_messages if flush_messages > 0 else None,
            flush_ms=flush_ms if flush_ms >= 0 else None,
            log_append_time=self.get("message.timestamp.type") == "LogAppendTime",
        )
