"""Topic configurations on a broker: node ``[topic]`` defaults overlaid with a topic's own
values, mapped onto the storage layer's ``LogConfig``.

Names and config keys are validated by ``flux.controller.topic_rules`` (shared with the
controller, which owns topic metadata).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flux.controller.topic_rules import (
    TOPIC_CONFIG_KEYS,
    InvalidConfigError,
    InvalidTopicError,
    validate_topic_config,
    validate_topic_name,
)
from flux.storage import LogConfig

__all__ = [
    "TOPIC_CONFIG_KEYS",
    "InvalidConfigError",
    "InvalidTopicError",
    "TopicConfig",
    "validate_topic_name",
]

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
    "unclean.leader.election.enable": "unclean_leader_election_enable",
    "memory.bytes.max": "memory_bytes_max",
    "message.ttl.ms": "message_ttl_ms",
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
        # ``message_ttl_ms`` comes from the node's [message] section; callers that pass only
        # [topic] get "no TTL".
        defaults = {"message_ttl_ms": -1, **topic_defaults}
        values = {key: _config_text(defaults[name]) for key, name in _DEFAULT_KEYS.items()}
        values["max.message.bytes"] = str(message_max_bytes)
        values["cleanup.policy"] = "delete"
        explicit = set()
        for key, value in overrides.items():
            if value is None:
                if key not in TOPIC_CONFIG_KEYS:
                    validate_topic_config(key, "")
                continue
            validate_topic_config(key, value)
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


def _config_text(value: Any) -> str:
    """Kafka spells config values as strings; booleans are lower case."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
