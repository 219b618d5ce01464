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
    "CLEANUP_POLICIES",
    "UNDELETABLE_TOPICS",
    "TOPIC_CONFIG_KEYS",
    "InvalidConfigError",
    "InvalidTopicError",
    "validate_topic_config",
    "validate_topic_configs",
    "validate_topic_name",
]

MAX_TOPIC_NAME_LENGTH = 249
#: The topics holding the cluster's own state: every group's committed offsets and every
#: transaction's state. Deleting one would lose all of it (and a recreated
#: ``__transaction_state`` would start its coordinators' epochs over, below the epochs the
#: partitions remember, which fence its markers), so it is refused, as Kafka's tools refuse
#: to delete internal topics.
UNDELETABLE_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
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


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"expected a number between 0 and 1, got {value}")
    return value


CLEANUP_POLICIES = ("compact", "delete")


def _cleanup_policy(text: str) -> frozenset[str]:
    """Kafka's list type: ``delete``, ``compact`` or both, comma separated, in any order."""
    if not isinstance(text, str):
        raise ValueError(f"expected delete, compact or compact,delete, got {text!r}")
    parts = [part.strip() for part in text.split(",")]
    if (
        not parts
        or any(part not in CLEANUP_POLICIES for part in parts)
        or len(set(parts)) != len(parts)
    ):
        raise ValueError(f"expected delete, compact or compact,delete, got {text!r}")
    return frozenset(parts)


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
    # Compaction (see docs/storage.md): which cleanups run, how long tombstones stay readable,
    # when a log is worth cleaning, and how long a record stays uncompacted (at least / at most).
    "cleanup.policy": _cleanup_policy,
    "delete.retention.ms": _long(0),
    "min.cleanable.dirty.ratio": _ratio,
    "min.compaction.lag.ms": _long(0),
    "max.compaction.lag.ms": _long(1),
    "storage": _choice("disk", "memory"),
    "unclean.leader.election.enable": _choice("true", "false"),
    # Memory topics (storage=memory): per-message TTL (-1 = none) and the bytes one partition
    # may hold before produces are refused.
    "message.ttl.ms": _long(-1),
    "memory.bytes.max": _long(1024),
    # Schema-validated topics (flux.registry.validation; Confluent Server's names): produced
    # values (keys) must carry a schema id registered under the topic's subject.
    "confluent.value.schema.validation": _choice("true", "false"),
    "confluent.key.schema.validation": _choice("true", "false"),
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


def validate_topic_configs(values: dict[str, str]) -> None:
    """Rules between keys of one topic's effective config (Kafka's): a record may not have to
    wait longer to be compactable than it may stay uncompacted."""
    low = values.get("min.compaction.lag.ms")
    high = values.get("max.compaction.lag.ms")
    if low is not None and high is not None and int(low) > int(high):
        raise InvalidConfigError(
            f"min.compaction.lag.ms ({low}) must not exceed max.compaction.lag.ms ({high})"
        )
