"""Adding and removing brokers, the pure parts: the ``UnregisterBroker`` record and its replay,
the ``unregister_broker`` handler's refusals, the drain planner, and the config of an added
broker-only node (``flux.cli.nodes.broker_node_sections``)."""

from __future__ import annotations

import itertools
import json
import pickle
import tomllib
from collections import Counter
from pathlib import Path

import pytest
from flux.cli.nodes import broker_node_sections
from flux.cluster.config import load_config
from flux.cluster.launcher import local_cluster_configs, write_node_config
from flux.controller import handlers
from flux.controller.image import MetadataDelta, MetadataImage
from flux.controller.rebalance import drain_refusals, plan_drain
from flux.controller.records import UnregisterBroker, record_from_dict, record_to_dict
from flux.protocol.errors import ErrorCode
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_controller_handlers import _apply, _cluster, _create
from tests.unit.test_controller_image import BROKERS, record_strategy


def _fenced(image: MetadataImage, broker_id: int) -> MetadataImage:
    return _apply(image, handlers.fence_broker(image, broker_id))


def _unregister(image: MetadataImage, broker_id: int, voters: tuple[int, ...] = ()):
    return handlers.unregister_broker(image, broker_id=broker_id, voter_ids=voters)


def test_unregister_record_round_trips_and_replay_removes_only_that_incarnation() -> None:
    record = UnregisterBroker(broker_id=4, incarnation_id="a")
    assert record_from_dict(json.loads(json.dumps(record_to_dict(record)))) == record
    image = _cluster(4)
    assert image.replay(UnregisterBroker(4, "other")) is image  # another incarnation: ignored
    after = image.replay(record)
    assert sorted(after.brokers) == [1, 2, 3]
    assert after.replay(record) is after  # idempotent
    assert MetadataDelta.between(image, after).deleted_brokers == (4,)


def test_unregister_refusals_in_order() -> None:
    image = _cluster(4)
    image = _apply(image, _create(image, assignments={0: [1, 2, 4]}).records)
    # A voter is refused before anything else, even while it holds replicas and runs.
    voter = _unregister(image, 1, voters=(1, 2, 3))
    assert voter.response["error_code"] == ErrorCode.POLICY_VIOLATION
    assert "fluxctl controller remove 1" in voter.response["error_message"]
    assert voter.records == []
    unknown = _unregister(image, 9)
    assert unknown.response["error_code"] == ErrorCode.BROKER_ID_NOT_REGISTERED
    holding = _unregister(_fenced(image, 4), 4, voters=(1, 2, 3))
    assert holding.response["error_code"] == ErrorCode.INVALID_REQUEST
    assert "still holds replicas of 1 partition(s) (t-0)" in holding.response["error_message"]
    running = _unregister(image, 3)  # holds nothing, but unfenced
    assert running.response["error_code"] == ErrorCode.INVALID_REQUEST
    assert "running" in running.response["error_message"]
    assert holding.records == running.records == []
    done = _unregister(_fenced(image, 3), 3, voters=(1, 2))
    assert done.ok and done.records == [UnregisterBroker(3, "a")]
    assert 3 not in _apply(image, done.records).brokers


def test_a_broker_in_a_running_reassignment_still_holds_replicas() -> None:
    image = _cluster(4)
    image = _apply(image, _create(image, assignments={0: [1, 2, 3]}).records)
    moving = handlers.alter_partition_reassignments(image, requests=[("t", 0, [1, 2, 4])])
    image = _fenced(_apply(image, moving.records), 4)
    # Broker 4 is only "adding" (not in the ISR): it still may not go.
    refused = _unregister(image, 4)
    assert refused.response["error_code"] == ErrorCode.INVALID_REQUEST


def _layout(assignments: dict[int, list[int]]) -> dict[tuple[str, int], tuple[int, ...]]:
    return {("t", p): tuple(replicas) for p, replicas in assignments.items()}


def test_drain_moves_only_the_drained_brokers_replicas_evenly() -> None:
    # 8 partitions, RF 3 over brokers 1-4 (each broker on 6 of them).
    current = _layout({p: [1 + (p + i) % 4 for i in range(3)] for p in range(8)})
    moves = plan_drain(current, [1, 2, 3, 4, 5, 6], 4)
    assert {(m.topic, m.partition) for m in moves} == {k for k, r in current.items() if 4 in r}
    after = dict(current)
    for move in moves:
        assert 4 in move.replicas and 4 not in move.target
        # Only broker 4's slot changes; the others keep their positions.
        changed = [
            i for i, (a, b) in enumerate(zip(move.replicas, move.target, strict=True)) if a != b
        ]
        assert changed == [move.replicas.index(4)]
        after[(move.topic, move.partition)] = move.target
    load = Counter(itertools.chain.from_iterable(after.values()))
    assert 4 not in load
    assert load[5] == load[6] == 3  # broker 4's six replicas split between the new brokers
    assert plan_drain(after, [1, 2, 3, 5, 6], 4) == []  # nothing left to do


def test_drain_leaves_replicas_on_other_down_brokers_alone() -> None:
    current = _layout({0: [4, 2, 3], 1: [5, 1, 2]})  # broker 5 is down (not live)
    moves = plan_drain(current, [1, 2, 3, 4], 4)
    assert [(m.partition, m.target) for m in moves] == [(0, (1, 2, 3))]


def test_drain_refusals_name_topics_with_a_larger_replication_factor() -> None:
    current = {("wide", 0): (1, 2, 3, 4), ("narrow", 0): (1, 2), ("wide", 1): (1, 2, 3)}
    refusals = drain_refusals(current, [1, 2, 3, 4], 4)
    assert refusals == [
        "topic 'wide' has replication factor 4, but only 3 live broker(s) would be left (1, 2, 3)"
    ]
    # A broker already down does not count among those left.
    assert len(drain_refusals(current, [1, 2, 4], 3)) == 1
    assert drain_refusals({("narrow", 0): (1, 2)}, [1, 2, 3], 2) == []


def test_an_added_node_copies_the_cluster_settings_with_its_own_identity(tmp_path: Path) -> None:
    template = {
        "node": {"id": 1, "roles": ["broker", "controller"], "data_dir": "/x/node-1/data"},
        "broker": {
            "host": "127.0.0.1",
            "kafka_port": 9092,
            "http_port": 9292,
            "listeners": ["SASL_SSL://127.0.0.1:9092"],
            "heartbeat_interval_ms": 200,
        },
        "controller": {
            "host": "127.0.0.1",
            "raft_port": 9192,
            "http_port": 9193,
            "voters": ["1@127.0.0.1:9192:9193"],
            "secret": "s3cret",
        },
        "security": {"authorizer_enable": True, "super_users": ["User:admin"]},
        "topic": {"replication_factor": 3},
    }
    spare_ports = iter([9999])
    sections = broker_node_sections(
        template,
        node_id=4,
        data_dir=tmp_path / "node-4" / "data",
        kafka_port=9095,
        http_port=9295,
        pick_port=lambda: next(spare_ports),
    )
    assert sections["node"] == {
        "id": 4,
        "roles": ["broker"],
        "data_dir": str(tmp_path / "node-4" / "data"),
    }
    assert sections["broker"]["listeners"] == ["SASL_SSL://127.0.0.1:9095"]
    assert (sections["broker"]["kafka_port"], sections["broker"]["http_port"]) == (9095, 9295)
    assert sections["controller"] == template["controller"]
    assert sections["security"] == template["security"]
    assert sections["topic"] == {"replication_factor": 3}
    assert template["node"]["id"] == 1  # the template is not changed


def test_an_added_node_config_is_valid_for_a_real_cluster_config(tmp_path: Path) -> None:
    local_cluster_configs(tmp_path, 3)
    with open(tmp_path / "node-2" / "node.toml", "rb") as file:
        template = tomllib.load(file)
    sections = broker_node_sections(
        template,
        node_id=4,
        data_dir=tmp_path / "node-4" / "data",
        kafka_port=20004,
        http_port=20204,
        pick_port=lambda: 1 / 0,  # one listener: no other port is needed
    )
    path = tmp_path / "node-4.toml"
    write_node_config(path, sections)
    config = load_config(path, environ={})
    assert config.node.id == 4 and config.node.roles == ("broker",)
    assert [v.node_id for v in config.controller.voters] == [1, 2, 3]
    assert config.controller.secret == template["controller"]["secret"]
    assert config.broker.kafka_port == 20004


def test_an_added_node_gets_a_port_per_listener() -> None:
    template = {
        "broker": {
            "kafka_port": 9092,
            "listeners": ["INTERNAL://0.0.0.0:19092", "EXTERNAL://0.0.0.0:9092"],
            "advertised_listeners": ["INTERNAL://h:19092", "EXTERNAL://127.0.0.1:9092"],
        }
    }
    sections = broker_node_sections(
        template, node_id=5, data_dir=Path("d"), kafka_port=9096, http_port=0, pick_port=lambda: 7
    )
    assert sections["broker"]["listeners"] == ["INTERNAL://0.0.0.0:7", "EXTERNAL://0.0.0.0:9096"]
    assert sections["broker"]["advertised_listeners"] == [
        "INTERNAL://h:7",
        "EXTERNAL://127.0.0.1:9096",
    ]


@pytest.mark.parametrize("broker_id", ["4", None, True])
def test_unregister_wants_an_integer_id(broker_id: object) -> None:
    refused = handlers.unregister_broker(_cluster(1), broker_id=broker_id)
    assert refused.response["error_code"] == ErrorCode.INVALID_REQUEST


_with_unregistrations = st.one_of(
    record_strategy,
    st.builds(UnregisterBroker, st.sampled_from(BROKERS), st.sampled_from(["a", "b"])),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(_with_unregistrations, max_size=40))
def test_unregistrations_replay_deterministically_and_serialize(records: list) -> None:
    first = MetadataImage.EMPTY.replay_all(records, 1)
    assert first == MetadataImage.EMPTY.replay_all(list(records), 1)
    assert MetadataImage.from_dict(json.loads(json.dumps(first.to_dict()))) == first
    assert pickle.loads(pickle.dumps(first)) == first
    # A broker is registered exactly when its last register/unregister of the current
    # incarnation was a registration.
    for broker_id in BROKERS:
        last = None
        for record in records:
            if getattr(record, "broker_id", None) != broker_id:
                continue
            if type(record).__name__ == "RegisterBroker":
                last = record.incarnation_id
            elif isinstance(record, UnregisterBroker) and record.incarnation_id == last:
                last = None
        assert (broker_id in first.brokers) == (last is not None)
