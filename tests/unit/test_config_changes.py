"""The change sets AlterConfigs (replace) and IncrementalAlterConfigs (edit) send to the
controller, computed from literal current overrides."""

from __future__ import annotations

import pytest
from flux.cluster.kafka.config_changes import (
    LIST_TOPIC_CONFIG_KEYS,
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    ConfigChangeRefused,
    check_storage_unchanged,
    incremental_changes,
    replacement_changes,
)
from flux.controller.handlers import MAX_CONFIG_CHANGES
from flux.protocol.errors import ErrorCode

CURRENT = {"retention.ms": "1000", "segment.bytes": "4096"}
DEFAULTS = {"cleanup.policy": "delete", "storage": "disk"}


def _set(name: str, value: str | None) -> dict[str, str | None]:
    return {"name": name, "value": value}


def _op(name: str, operation: int, value: str | None = None) -> dict[str, object]:
    return {"name": name, "config_operation": operation, "value": value}


def _incremental(*configs: dict[str, object], current: dict[str, str] = CURRENT) -> dict:
    return incremental_changes(
        current, list(configs), defaults=DEFAULTS, list_keys=LIST_TOPIC_CONFIG_KEYS
    )


def test_replacement_deletes_every_override_not_named() -> None:
    changes = replacement_changes(CURRENT, [_set("retention.ms", "5"), _set("flush.ms", "7")])
    assert changes == {"retention.ms": "5", "flush.ms": "7", "segment.bytes": None}


def test_replacement_with_a_null_value_deletes_and_an_empty_request_clears() -> None:
    assert replacement_changes(CURRENT, [_set("retention.ms", None)]) == {
        "retention.ms": None,
        "segment.bytes": None,
    }
    assert replacement_changes(CURRENT, []) == {"retention.ms": None, "segment.bytes": None}
    assert replacement_changes({}, []) == {}


def test_incremental_sets_and_deletes_only_what_it_names() -> None:
    changes = _incremental(_op("retention.ms", OP_SET, "5"), _op("segment.bytes", OP_DELETE))
    assert changes == {"retention.ms": "5", "segment.bytes": None}


def test_append_and_subtract_start_from_the_override_else_the_default() -> None:
    assert _incremental(_op("cleanup.policy", OP_APPEND, "compact")) == {
        "cleanup.policy": "delete,compact"
    }
    assert _incremental(_op("cleanup.policy", OP_APPEND, "delete")) == {"cleanup.policy": "delete"}
    compacted = {"cleanup.policy": "compact,delete"}
    assert _incremental(_op("cleanup.policy", OP_SUBTRACT, "delete"), current=compacted) == {
        "cleanup.policy": "compact"
    }
    # Subtracting everything leaves an empty list, which the controller refuses by name.
    assert _incremental(_op("cleanup.policy", OP_SUBTRACT, "delete")) == {"cleanup.policy": ""}


@pytest.mark.parametrize(
    ("configs", "code", "message"),
    [
        ([_op("retention.ms", OP_APPEND, "5")], ErrorCode.INVALID_CONFIG, "'retention.ms'"),
        ([_op("retention.ms", OP_SET, None)], ErrorCode.INVALID_CONFIG, "'retention.ms'"),
        ([_op("retention.ms", 9, "5")], ErrorCode.INVALID_REQUEST, "unknown operation 9"),
        (
            [_op("flush.ms", OP_SET, "1"), _op("flush.ms", OP_DELETE)],
            ErrorCode.INVALID_REQUEST,
            "'flush.ms' named twice",
        ),
    ],
)
def test_incremental_refusals_name_the_key(configs, code: ErrorCode, message: str) -> None:
    with pytest.raises(ConfigChangeRefused, match=message) as refused:
        _incremental(*configs)
    assert refused.value.error_code == code


def test_a_key_named_twice_or_too_many_configs_are_refused() -> None:
    with pytest.raises(ConfigChangeRefused, match="named twice") as refused:
        replacement_changes({}, [_set("flush.ms", "1"), _set("flush.ms", "2")])
    assert refused.value.error_code == ErrorCode.INVALID_REQUEST
    many = [_set(f"k{index}", "1") for index in range(MAX_CONFIG_CHANGES + 1)]
    with pytest.raises(ConfigChangeRefused, match=f"at most {MAX_CONFIG_CHANGES}"):
        replacement_changes({}, many)


def test_list_operations_on_broker_configs_are_refused() -> None:
    with pytest.raises(ConfigChangeRefused, match="not a list"):
        incremental_changes(
            {}, [_op("cleanup.policy", OP_APPEND, "x")], defaults={}, list_keys=frozenset()
        )


def test_storage_may_be_restated_but_not_changed() -> None:
    memory = {"storage": "memory"}
    check_storage_unchanged(memory, {"storage": "memory"}, default_storage="disk")
    check_storage_unchanged({}, {"storage": "disk"}, default_storage="disk")
    check_storage_unchanged(memory, {"retention.ms": "5"}, default_storage="disk")
    # An invalid value is the controller's to refuse (it names the key and the choices).
    check_storage_unchanged(memory, {"storage": "tape"}, default_storage="disk")
    with pytest.raises(ConfigChangeRefused, match="'disk' and cannot become 'memory'") as refused:
        check_storage_unchanged({}, {"storage": "memory"}, default_storage="disk")
    assert refused.value.error_code == ErrorCode.INVALID_CONFIG
    # AlterConfigs that leaves storage out would delete the override: refused, saying how to
    # keep it.
    with pytest.raises(ConfigChangeRefused, match="name storage=memory to keep it"):
        check_storage_unchanged(memory, {"storage": None}, default_storage="disk")
