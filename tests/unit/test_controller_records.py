"""Metadata records: dict round trips and strict reading of malformed input."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flux.controller.errors import InvalidRecordError
from flux.controller.records import (
    ConfigChange,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    FenceBroker,
    PartitionChange,
    PartitionSpec,
    Record,
    RegisterBroker,
    UnfenceBroker,
    record_from_dict,
    record_to_dict,
)
from hypothesis import given
from hypothesis import strategies as st

SPEC = PartitionSpec(replicas=(1, 2), isr=(1, 2), leader=1)
EXAMPLES: list[Record] = [
    RegisterBroker(1, "inc", "k", 9092, "h", 8080, rack="r1"),
    RegisterBroker(2, "inc", "k", 9092, "h", 8080),
    RegisterBroker(
        3, "inc", "k", 9092, "h", 8080, None, (("INTERNAL", "k", 9092), ("EXT", "x", 1))
    ),
    FenceBroker(1, "inc"),
    UnfenceBroker(1, "inc"),
    CreateTopic("t", "tid", (SPEC, SPEC), (("retention.ms", "1"),)),
    CreatePartitions("tid", (SPEC,)),
    DeleteTopic("tid"),
    PartitionChange("tid", 0, -1, 3, (2,), 4),
    ConfigChange("topic", "t", "retention.ms", None),
    ConfigChange("broker", "", "x", "y"),
]


@pytest.mark.parametrize("record", EXAMPLES, ids=lambda r: type(r).__name__)
def test_round_trip_through_json(record: Record) -> None:
    data = json.loads(json.dumps(record_to_dict(record)))
    assert data["type"] == type(record).__name__
    assert record_from_dict(data) == record


def test_records_are_frozen_and_hashable() -> None:
    record = FenceBroker(1, "inc")
    with pytest.raises(AttributeError):
        record.broker_id = 2  # type: ignore[misc]
    assert len({record, FenceBroker(1, "inc")}) == 1


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"type": "Nope"},
        {"type": "FenceBroker", "broker_id": 1},
        {"type": "FenceBroker", "broker_id": "1", "incarnation_id": "a"},
        {"type": "FenceBroker", "broker_id": True, "incarnation_id": "a"},
        {"type": "FenceBroker", "broker_id": 1, "incarnation_id": "a", "extra": 1},
        {"type": "FenceBroker", "broker_id": 1, "incarnation_id": "a", "v": 99},
        {"type": "DeleteTopic", "topic_id": None},
        {
            "type": "PartitionChange",
            "topic_id": "t",
            "partition": 0,
            "leader": 1,
            "leader_epoch": 0,
            "isr": "12",
            "partition_epoch": 1,
        },
        {
            "type": "CreateTopic",
            "name": "t",
            "topic_id": "i",
            "partitions": [{"replicas": [1]}],
            "config": [],
        },
        {"type": "CreateTopic", "name": "t", "topic_id": "i", "partitions": [], "config": [["a"]]},
        {
            "type": "ConfigChange",
            "resource_type": "topic",
            "resource_name": "t",
            "key": "k",
            "value": 5,
        },
    ],
)
def test_malformed_records_are_rejected(data: dict[str, Any]) -> None:
    with pytest.raises(InvalidRecordError):
        record_from_dict(data)


def test_non_mapping_is_rejected() -> None:
    with pytest.raises(InvalidRecordError):
        record_from_dict([1, 2])  # type: ignore[arg-type]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)


@given(
    st.sampled_from([type(r).__name__ for r in EXAMPLES] + ["x"]),
    st.dictionaries(
        st.sampled_from(
            [
                "broker_id",
                "incarnation_id",
                "topic_id",
                "partitions",
                "isr",
                "leader",
                "name",
                "config",
                "partition",
                "leader_epoch",
                "partition_epoch",
                "key",
                "value",
                "rack",
            ]
        ),
        _json,
    ),
)
def test_arbitrary_dicts_raise_only_invalid_record_error(type_name: str, body: dict) -> None:
    try:
        record = record_from_dict({"type": type_name, **body})
    except InvalidRecordError:
        return
    assert record_from_dict(record_to_dict(record)) == record
