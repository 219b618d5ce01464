"""Rules for topic metadata shared by the controller and the brokers: legal topic names and
the Kafka-named topic configs Flux implements, with their value parsers.

Pure; imports nothing of Flux.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = [
    "MAX_TOPIC_NAME_LENGTH",
    "TOPIC_CONFIG_KEYS",
    "InvalidConfigError",
    "InvalidTopicError",
    "validate_topic_config",
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
    "unclean.leader.election.enable": _choice("true", "false"),
    # Memory topics (storage=memory): per-message TTL (-1 = none) and the bytes one partition
    # may hold before produces are refused.
    "message.ttl.ms": _long(-1),
    "memory.bytes.max": _long(1024),
}


def validate_topic_config(key: str, value: str) -> Any:
    """Return the parsed value, or raise ``InvalidConfigError`` naming the key."""
    if key not in TOPIC_CONFIG_KEYS:
        raise InvalidConfigError(
            f"unknown topic config {key!r} (supported: {', '.join(TOPIC_CONFIG_KEYS)})"
        )
    try:
        return TOPIC_CONFIG_KEYS[key](value)
    except ValueError as error:
        raise InvalidConfigError(f"topic config {key}: {error}") from None
