"""How AlterConfigs (API 33) and IncrementalAlterConfigs (API 44) become one change set for the
controller's ``alter_configs``: ``{key: new value, or None to delete the override}``, computed
against a resource's current overrides.

* AlterConfigs **replaces**: every override the request does not name is deleted and the named
  ones are set (a null value deletes), as Kafka's legacy API does.
* IncrementalAlterConfigs **edits**: SET, DELETE, and APPEND / SUBTRACT on list-valued configs
  (``cleanup.policy``), which start from the current value, else the default.

The controller validates keys and values (INVALID_CONFIG naming the key) and writes only real
changes. What is refused here is what cannot be put to it: a key named twice, an unknown
operation, a list operation on a scalar config, too many configs, and moving a topic between
disk and memory storage (its partitions' logs are opened as one or the other when they are
created, and a config change does not reopen them).

Pure: no I/O, no broker state; refusals raise ``ConfigChangeRefused`` with the resource's
Kafka error code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flux.controller.handlers import MAX_CONFIG_CHANGES
from flux.controller.topic_rules import InvalidConfigError, validate_topic_config
from flux.protocol.errors import ErrorCode

__all__ = [
    "LIST_TOPIC_CONFIG_KEYS",
    "OP_APPEND",
    "OP_DELETE",
    "OP_SET",
    "OP_SUBTRACT",
    "ConfigChangeRefused",
    "Changes",
    "check_storage_unchanged",
    "incremental_changes",
    "replacement_changes",
]

#: IncrementalAlterConfigs operations (Kafka's ``AlterConfigOp.OpType``).
OP_SET = 0
OP_DELETE = 1
OP_APPEND = 2
OP_SUBTRACT = 3
_LIST_OPERATIONS = {OP_APPEND: "append to", OP_SUBTRACT: "subtract from"}

#: Topic configs whose value is a comma-separated list (APPEND / SUBTRACT apply to them).
LIST_TOPIC_CONFIG_KEYS = frozenset({"cleanup.policy"})

Changes = dict[str, str | None]


class ConfigChangeRefused(Exception):
    """A resource's requested change that is answered with ``error_code`` without asking the
    controller."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def replacement_changes(
    current: Mapping[str, str], configs: Sequence[Mapping[str, Any]]
) -> Changes:
    """AlterConfigs: the named configs (``{"name", "value"}``, value None deletes) become the
    resource's whole set of overrides; every current override not named is deleted."""
    wanted = _by_name(configs)
    changes: Changes = {key: None for key in current if key not in wanted}
    changes.update((key, item["value"]) for key, item in wanted.items())
    return changes


def incremental_changes(
    current: Mapping[str, str],
    configs: Sequence[Mapping[str, Any]],
    *,
    defaults: Mapping[str, str],
    list_keys: frozenset[str],
) -> Changes:
    """IncrementalAlterConfigs: each named config (``{"name", "config_operation", "value"}``)
    is set, deleted, or has list items appended / subtracted; other overrides stay.

    APPEND / SUBTRACT apply to ``list_keys`` only and start from the current override, else
    ``defaults[key]``."""
    changes: Changes = {}
    for key, item in _by_name(configs).items():
        operation = item["config_operation"]
        value = item["value"]
        if operation == OP_SET:
            if value is None:
                raise ConfigChangeRefused(
                    ErrorCode.INVALID_CONFIG,
                    f"config {key!r}: SET needs a value (DELETE removes an override)",
                )
            changes[key] = value
        elif operation == OP_DELETE:
            changes[key] = None
        elif operation in _LIST_OPERATIONS:
            if key not in list_keys:
                raise ConfigChangeRefused(
                    ErrorCode.INVALID_CONFIG,
                    f"cannot {_LIST_OPERATIONS[operation]} config {key!r}: it is not a list",
                )
            base = current.get(key, defaults.get(key, ""))
            changes[key] = _edit_list(base, value or "", append=operation == OP_APPEND)
        else:
            raise ConfigChangeRefused(
                ErrorCode.INVALID_REQUEST, f"config {key!r}: unknown operation {operation}"
            )
    return changes


def check_storage_unchanged(
    current: Mapping[str, str], changes: Changes, *, default_storage: str
) -> None:
    """Refuse changes that would move a topic between disk and memory storage (a valid new
    value only: an invalid one is left to the controller, which names it)."""
    if "storage" not in changes:
        return
    requested = changes["storage"]
    before = current.get("storage", default_storage)
    after = default_storage if requested is None else requested
    try:
        validate_topic_config("storage", after)
    except InvalidConfigError:
        return
    if after == before:
        return
    if requested is None:
        problem = f"deleting its override would change it from {before!r} to the default {after!r}"
    else:
        problem = f"it is {before!r} and cannot become {after!r}"
    raise ConfigChangeRefused(
        ErrorCode.INVALID_CONFIG,
        f"topic config storage is fixed when the topic is created: {problem} "
        f"(name storage={before} to keep it)",
    )


def _by_name(configs: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    if len(configs) > MAX_CONFIG_CHANGES:
        raise ConfigChangeRefused(
            ErrorCode.INVALID_REQUEST,
            f"{len(configs)} configs in one resource; at most {MAX_CONFIG_CHANGES}",
        )
    named: dict[str, Mapping[str, Any]] = {}
    for item in configs:
        key = item["name"]
        if key in named:
            raise ConfigChangeRefused(ErrorCode.INVALID_REQUEST, f"config {key!r} named twice")
        named[key] = item
    return named


def _edit_list(base: str, items: str, *, append: bool) -> str:
    parts = [part.strip() for part in base.split(",") if part.strip()]
    for item in (part.strip() for part in items.split(",")):
        if not item:
            continue
        if append and item not in parts:
            parts.append(item)
        elif not append and item in parts:
            parts.remove(item)
    return ",".join(parts)
