"""Topic configurations on a broker: node ``[topic]`` defaults overlaid with a topic's own
values, mapped onto the storage layer's ``LogConfig``.

Names and config keys are validated by ``flux.controller.topic_rules`` (shared with the
controller, which owns topic metadata).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
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
    "cleanup.policy": "cleanup_policy",
    "delete.retention.ms": "delete_retention_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
}

#: Kafka's topic defaults for the compaction keys, for callers whose ``[topic]`` section
#: predates them.
_COMPACTION_DEFAULTS = {
    "cleanup_policy": "delete",
    "delete_retention_ms": 86_400_000,
    "min_cleanable_dirty_ratio": 0.5,
    "min_compaction_lag_ms": 0,
    "max_compaction_lag_ms": 2**63 - 1,
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
        defaults = {"message_ttl_ms": -1, **_COMPACTION_DEFAULTS, **topic_defaults}
        values = {key: _config_text(defaults[name]) for key, name in _DEFAULT_KEYS.items()}
        values["max.message.bytes"] = str(message_max_bytes)
        values["confluent.value.schema.validation"] = "false"
        values["confluent.key.schema.validation"] = "false"
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
        """``key``'s parsed value (parsed once: the replication and produce paths ask for
        ``min.insync.replicas`` several times per append; every parsed value is immutable)."""
        parsed = self._parsed
        if key not in parsed:
            parsed[key] = TOPIC_CONFIG_KEYS[key](self.values[key])
        return parsed[key]

    @cached_property
    def _parsed(self) -> dict[str, Any]:
        return {}

    def log_config(self) -> LogConfig:
        flush_messages = self.get("flush.messages")
        flush_ms = self.get("flush.ms")
        policy = self.get("cleanup.policy")
        max_lag = self.get("max.compaction.lag.ms")
        return LogConfig(
            segment_bytes=self.get("segment.bytes"),
            segment_ms=self.get("segment.ms"),
            retention_ms=self.get("retention.ms"),
            retention_bytes=self.get("retention.bytes"),
            flush_messages=flush_messages if flush_messages > 0 else None,
            flush_ms=flush_ms if flush_ms >= 0 else None,
            log_append_time=self.get("message.timestamp.type") == "LogAppendTime",
            cleanup_delete="delete" in policy,
            cleanup_compact="compact" in policy,
            delete_retention_ms=self.get("delete.retention.ms"),
            min_cleanable_dirty_ratio=self.get("min.cleanable.dirty.ratio"),
            min_compaction_lag_ms=min(self.get("min.compaction.lag.ms"), max_lag),
            max_compaction_lag_ms=max_lag,
        )

    @cached_property
    def compacted(self) -> bool:
        return "compact" in self.get("cleanup.policy")

    @cached_property
    def schema_validated(self) -> bool:
        """Produced values or keys must carry a registered schema id (flux.registry)."""
        return "true" in (
            self.values.get("confluent.value.schema.validation"),
            self.values.get("confluent.key.schema.validation"),
        )


def _config_text(value: Any) -> str:
    """Kafka spells config values as strings; booleans are lower case."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
