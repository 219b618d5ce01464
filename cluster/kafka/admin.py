"""Admin APIs: CreateTopics, DeleteTopics and CreatePartitions, forwarded to the active
controller and answered once this broker's metadata shows them; DescribeConfigs of topics and
of this broker, from the metadata image and the node configuration; AlterConfigs and
IncrementalAlterConfigs, turned into one change set against the resource's current overrides
(``config_changes``) and forwarded to the controller's ``alter_configs``."""

from __future__ import annotations

import urllib.parse
import uuid
from collections import Counter
from typing import Any

from flux.protocol.api import RequestHeader
from flux.protocol.errors import ErrorCode

from .common import _ZERO_UUID, KafkaApisBase, log
from .config_changes import (
    LIST_TOPIC_CONFIG_KEYS,
    Changes,
    ConfigChangeRefused,
    check_storage_unchanged,
    incremental_changes,
    replacement_changes,
)

__all__ = ["AdminApis"]

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
CONFIG_SOURCE_TOPIC = 1
CONFIG_SOURCE_DYNAMIC_BROKER = 2
CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER = 3
CONFIG_SOURCE_STATIC_BROKER = 4
CONFIG_SOURCE_DEFAULT = 5
CONFIG_TYPE_BOOLEAN = 1
CONFIG_TYPE_STRING = 2
CONFIG_TYPE_LONG = 5
# The controller's names of the config resources AlterConfigs / IncrementalAlterConfigs change.
_CONFIG_RESOURCE_KINDS = {RESOURCE_TOPIC: "topic", RESOURCE_BROKER: "broker"}
#: Resources one AlterConfigs / IncrementalAlterConfigs request may name (each is one
#: controller write).
MAX_CONFIG_RESOURCES = 1_000


class AdminApis(KafkaApisBase):
    """CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs and
    IncrementalAlterConfigs."""

    # -- CreateTopics, DeleteTopics, CreatePartitions -----------------------------------------

    async def _create_topics(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        seen: dict[str, int] = {}
        for topic in body["topics"]:
            seen[topic["name"]] = seen.get(topic["name"], 0) + 1
        results = []
        for topic in body["topics"]:
            if seen[topic["name"]] > 1:
                results.append(
                    _create_result(topic["name"], ErrorCode.INVALID_REQUEST, "topic named twice")
                )
                continue
            validate_only = body.get("validate_only", False)
            results.append(await self._create_topic(topic, validate_only=validate_only))
        return {"throttle_time_ms": 0, "topics": results}

    async def _create_topic(self, topic: dict[str, Any], *, validate_only: bool) -> dict[str, Any]:
        name = topic["name"]
        configs = {item["name"]: item["value"] for item in topic.get("configs") or []}
        assignments = {
            str(item["partition_index"]): list(item["broker_ids"])
            for item in topic.get("assignments") or []
        }
        answer = await self._forward(
            "POST",
            "/controller/topics",
            {
                "name": name,
                "num_partitions": topic["num_partitions"],
                "replication_factor": topic["replication_factor"],
                "assignments": assignments or None,
                "configs": configs,
                "validate_only": validate_only,
            },
        )
        result = _create_result(name, ErrorCode(answer["error_code"]), answer["error_message"])
        if answer["error_code"] != ErrorCode.NONE:
            return result
        config = self._replicas.topic_config(configs)
        topic_id = answer.get("topic_id")
        result.update(
            topic_id=uuid.UUID(topic_id) if topic_id and not validate_only else _ZERO_UUID,
            num_partitions=answer.get("num_partitions", -1),
            replication_factor=answer.get("replication_factor", -1),
            configs=[
                {
                    "name": key,
                    "value": value,
                    "read_only": False,
                    "config_source": (
                        CONFIG_SOURCE_TOPIC if key in config.overrides else CONFIG_SOURCE_DEFAULT
                    ),
                    "is_sensitive": False,
                }
                for key, value in sorted(config.values.items())
            ],
        )
        return result

    async def _delete_topics(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        if header.api_version >= 6:
            wanted = [(item.get("name"), item.get("topic_id")) for item in body["topics"]]
        else:
            wanted = [(name, None) for name in body["topic_names"]]
        responses = []
        for name, topic_id in wanted:
            response: dict[str, Any] = {
                "name": name,
                "topic_id": topic_id or _ZERO_UUID,
                "error_code": ErrorCode.NONE,
                "error_message": None,
            }
            responses.append(response)
            if not name and topic_id not in (None, _ZERO_UUID):
                by_id = self._image.topic_by_id(str(topic_id))
                if by_id is None:
                    response["error_code"] = ErrorCode.UNKNOWN_TOPIC_ID
                    continue
                name = response["name"] = by_id.name
            existing = self._image.topics.get(name) if name else None
            if existing is not None:
                response["topic_id"] = uuid.UUID(existing.topic_id)
            answer = await self._forward("DELETE", f"/controller/topics/{_quote(name or '')}", None)
            response["error_code"] = answer["error_code"]
            response["error_message"] = answer["error_message"]
            if answer["error_code"] == ErrorCode.NONE:
                log.info("deleted topic %s", name)
        return {"throttle_time_ms": 0, "responses": responses}

    async def _create_partitions(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        results = []
        for topic in body["topics"]:
            assignments = topic.get("assignments")
            answer = await self._forward(
                "POST",
                f"/controller/topics/{_quote(topic['name'])}/partitions",
                {
                    "count": topic["count"],
                    "assignments": (
                        [list(item["broker_ids"]) for item in assignments] if assignments else None
                    ),
                    "validate_only": body.get("validate_only", False),
                },
            )
            results.append(
                {
                    "name": topic["name"],
                    "error_code": answer["error_code"],
                    "error_message": answer["error_message"],
                }
            )
        return {"throttle_time_ms": 0, "results": results}

    # -- DescribeConfigs ----------------------------------------------------------------------

    async def _describe_configs(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        results = []
        for resource in body["resources"]:
            results.append(self._describe_resource(resource, header.api_version))
        return {"throttle_time_ms": 0, "results": results}

    def _describe_resource(self, resource: dict[str, Any], version: int) -> dict[str, Any]:
        kind = resource["resource_type"]
        name = resource["resource_name"]
        result: dict[str, Any] = {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "resource_type": kind,
            "resource_name": name,
            "configs": [],
        }
        if kind == RESOURCE_TOPIC:
            topic = self._image.topics.get(name)
            if topic is None:
                result["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result["error_message"] = f"topic {name!r} does not exist"
                return result
            config = self._replicas.topic_config(dict(topic.config_dict()))
            entries = [
                (
                    key,
                    value,
                    CONFIG_SOURCE_TOPIC if key in config.overrides else CONFIG_SOURCE_DEFAULT,
                    False,
                )
                for key, value in sorted(config.values.items())
            ]
        elif kind == RESOURCE_BROKER:
            if name not in ("", str(self._node_id)):
                result["error_code"] = ErrorCode.INVALID_REQUEST
                result["error_message"] = f"broker {name!r} is not this broker ({self._node_id})"
                return result
            entries = self._broker_entries(name)
        else:
            result["error_code"] = ErrorCode.INVALID_REQUEST
            result["error_message"] = f"resource type {kind} is not supported"
            return result
        keys = resource.get("configuration_keys")
        if keys is not None:
            entries = [entry for entry in entries if entry[0] in set(keys)]
        result["configs"] = [
            {
                "name": key,
                "value": value,
                "read_only": read_only,
                "is_default": source == CONFIG_SOURCE_DEFAULT,
                "config_source": source,
                "is_sensitive": False,
                "synonyms": [],
                "config_type": _config_type(value),
                "documentation": None,
            }
            for key, value, source, read_only in entries
        ]
        return result

    # -- AlterConfigs, IncrementalAlterConfigs -----------------------------------------------

    async def _alter_configs(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        """Kafka's legacy AlterConfigs: each resource's configs replace all of its overrides.

        The change set is computed against this broker's image, which shows at least every
        change made through this broker; a change made through another broker a moment ago
        may not be in it yet, and an override it set would then survive the replacement."""
        return await self._alter_config_resources(body, incremental=False)

    async def _incremental_alter_configs(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        return await self._alter_config_resources(body, incremental=True)

    async def _alter_config_resources(
        self, body: dict[str, Any], *, incremental: bool
    ) -> dict[str, Any]:
        resources = body["resources"]
        named = Counter((item["resource_type"], item["resource_name"]) for item in resources)
        validate_only = body.get("validate_only", False)
        responses = []
        for resource in resources:
            kind = resource["resource_type"]
            name = resource["resource_name"]
            try:
                if len(resources) > MAX_CONFIG_RESOURCES:
                    raise ConfigChangeRefused(
                        ErrorCode.INVALID_REQUEST,
                        f"{len(resources)} resources in one request; at most "
                        f"{MAX_CONFIG_RESOURCES}",
                    )
                if named[(kind, name)] > 1:
                    raise ConfigChangeRefused(ErrorCode.INVALID_REQUEST, "resource named twice")
                changes = self._config_changes(resource, incremental=incremental)
            except ConfigChangeRefused as refused:
                responses.append(_alter_result(kind, name, refused.error_code, refused.message))
                continue
            answer = await self._forward(
                "POST",
                "/controller/configs",
                {
                    "resource_type": _CONFIG_RESOURCE_KINDS[kind],
                    "resource_name": name,
                    "changes": changes,
                    "validate_only": validate_only,
                },
            )
            if answer["error_code"] == ErrorCode.NONE and not validate_only:
                log.info(
                    "altered configs of %s %r: %s", _CONFIG_RESOURCE_KINDS[kind], name, changes
                )
            responses.append(
                _alter_result(kind, name, answer["error_code"], answer["error_message"])
            )
        return {"throttle_time_ms": 0, "responses": responses}

    def _config_changes(self, resource: dict[str, Any], *, incremental: bool) -> Changes:
        """The resource's change set against its current overrides in this broker's image."""
        kind = resource["resource_type"]
        name = resource["resource_name"]
        if kind == RESOURCE_TOPIC:
            topic = self._image.topics.get(name)
            if topic is None:
                raise ConfigChangeRefused(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
                )
            current = topic.config_dict()
            defaults = self._replicas.topic_config({}).values
            list_keys = LIST_TOPIC_CONFIG_KEYS
        elif kind == RESOURCE_BROKER:
            current = dict(self._image.broker_configs.get(name, ()))
            defaults = {}
            list_keys = frozenset()
        else:
            raise ConfigChangeRefused(
                ErrorCode.INVALID_REQUEST,
                f"resource type {kind} is not supported (topic {RESOURCE_TOPIC} and broker "
                f"{RESOURCE_BROKER} are)",
            )
        if incremental:
            changes = incremental_changes(
                current, resource["configs"], defaults=defaults, list_keys=list_keys
            )
        else:
            changes = replacement_changes(current, resource["configs"])
        if kind == RESOURCE_TOPIC:
            check_storage_unchanged(current, changes, default_storage=defaults["storage"])
        return changes

    def _broker_entries(self, name: str) -> list[tuple[str, str, int, bool]]:
        """A broker resource's configs as Kafka describes them: for the cluster-wide default
        (``""``) its dynamic overrides only; for this broker every setting with the value in
        force, a per-broker dynamic override before a cluster-wide one before the static
        setting (each with its source; only static ones are read-only)."""
        defaults = dict(self._image.broker_configs.get("", ()))
        if name == "":
            return [
                (key, value, CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER, False)
                for key, value in sorted(defaults.items())
            ]
        own = dict(self._image.broker_configs.get(name, ()))
        static = dict(self._broker_configs())
        entries = []
        for key in sorted(static.keys() | defaults.keys() | own.keys()):
            if key in own:
                entries.append((key, own[key], CONFIG_SOURCE_DYNAMIC_BROKER, False))
            elif key in defaults:
                entries.append((key, defaults[key], CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER, False))
            else:
                entries.append((key, static[key], CONFIG_SOURCE_STATIC_BROKER, True))
        return entries

    def _broker_configs(self) -> list[tuple[str, str]]:
        config = self._config
        pairs = {
            "broker.id": config.node.id,
            "log.dirs": str(config.data_dir),
            "auto.create.topics.enable": config.broker.auto_create_topics,
            "message.max.bytes": config.broker.message_max_bytes,
            "socket.request.max.bytes": config.broker.socket_request_max_bytes,
            "num.partitions": config.topic.partitions,
            "default.replication.factor": config.topic.replication_factor,
            "min.insync.replicas": config.topic.min_insync_replicas,
            "log.retention.ms": config.topic.retention_ms,
            "log.retention.bytes": config.topic.retention_bytes,
            "log.segment.bytes": config.topic.segment_bytes,
            "log.roll.ms": config.topic.segment_ms,
            "log.flush.interval.messages": config.topic.flush_messages,
            "log.flush.interval.ms": config.topic.flush_ms,
            "log.retention.check.interval.ms": config.broker.retention_check_interval_ms,
        }
        return [
            (key, str(value).lower() if isinstance(value, bool) else str(value))
            for key, value in sorted(pairs.items())
        ]


def _config_type(value: str) -> int:
    if value in ("true", "false"):
        return CONFIG_TYPE_BOOLEAN
    try:
        int(value)
    except ValueError:
        return CONFIG_TYPE_STRING
    return CONFIG_TYPE_LONG


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _create_result(name: str, error: ErrorCode, message: str | None) -> dict[str, Any]:
    return {
        "name": name,
        "topic_id": _ZERO_UUID,
        "error_code": error,
        "error_message": message,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": None,
    }


def _alter_result(kind: int, name: str, error: int, message: str | None) -> dict[str, Any]:
    return {
        "error_code": error,
        "error_message": message,
        "resource_type": kind,
        "resource_name": name,
    }
