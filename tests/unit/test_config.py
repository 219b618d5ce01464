"""Node configuration: defaults, strict validation naming the key, environment overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
from flux.cluster.config import ConfigError, NodeConfig, load_config, parse_config

SECRET = {"controller": {"secret": "s3cret"}}


def node_config(node_id: int, data_dir: Path) -> NodeConfig:
    """A node's configuration with defaults, its id and data directory (for unit tests that
    build a broker's parts without a process)."""
    return parse_config({"node": {"id": node_id, "data_dir": str(data_dir)}, **SECRET}, environ={})


def test_defaults_fill_every_section() -> None:
    config = parse_config(SECRET, environ={})
    assert config.broker.kafka_port == 9092
    assert config.node.roles == ("broker", "controller")
    assert config.topic.partitions == 1
    assert config.advertised_host == "127.0.0.1"
    # A lone controller with no voters list forms a quorum of one on its own ports.
    assert [str(voter) for voter in config.controller.voters] == ["1@127.0.0.1:9093:9094"]


def test_voters_must_include_this_controller_on_its_ports() -> None:
    voters = ["1@127.0.0.1:9093:9094", "2@127.0.0.1:9193:9194"]
    config = parse_config({"controller": {"secret": "s", "voters": voters}}, environ={})
    assert [voter.node_id for voter in config.controller.voters] == [1, 2]
    with pytest.raises(ConfigError, match="not among the voters"):
        parse_config(
            {"node": {"id": 3}, "controller": {"secret": "s", "voters": voters}}, environ={}
        )
    with pytest.raises(ConfigError, match="does not match"):
        parse_config({"controller": {"secret": "s", "voters": voters, "raft_port": 1}}, environ={})
    with pytest.raises(ConfigError, match="controller.voters"):
        parse_config({"controller": {"secret": "s", "voters": ["1@h"]}}, environ={})
    with pytest.raises(ConfigError, match="controller.secret"):
        parse_config({}, environ={})
    broker_only = parse_config(
        {"node": {"roles": ["broker"]}, "controller": {"voters": voters}}, environ={}
    )
    assert broker_only.node.roles == ("broker",)
    with pytest.raises(ConfigError, match="broker-only"):
        parse_config({"node": {"roles": ["broker"]}}, environ={})


def test_file_values_and_flag_overrides(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(
        '[node]\nid = 4\ndata_dir = "/tmp/x"\n[broker]\nkafka_port = 19092\n'
        '[controller]\nsecret = "s"\n'
    )
    config = load_config(path, overrides={"broker": {"kafka_port": 29092}}, environ={})
    assert config.node.id == 4
    assert config.broker.kafka_port == 29092


def test_environment_overrides_file(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('[topic]\npartitions = 2\n[controller]\nsecret = "s"\n')
    environ = {"FLUX_TOPIC__PARTITIONS": "6", "FLUX_NODE__ROLES": '["broker", "controller"]'}
    config = load_config(path, environ=environ)
    assert config.topic.partitions == 6
    assert config.node.roles == ("broker", "controller")


@pytest.mark.parametrize(
    ("raw", "environ", "named"),
    [
        ({"brokr": {}}, {}, "[brokr]"),
        ({"broker": {"kafka_prt": 1}}, {}, "broker.kafka_prt"),
        ({"broker": {"kafka_port": "x"}}, {}, "broker.kafka_port"),
        ({"broker": {"kafka_port": 70000}}, {}, "broker.kafka_port"),
        ({"node": {"roles": ["janitor"]}}, {}, "node.roles"),
        ({"topic": {"storage": "tape"}}, {}, "topic.storage"),
        ({"broker": {"auto_create_topics": 1}}, {}, "broker.auto_create_topics"),
        ({}, {"FLUX_BROKER__NOPE": "1"}, "FLUX_BROKER__NOPE"),
        ({}, {"FLUX_TOPIC__PARTITIONS": "zero"}, "topic.partitions"),
        ({"broker": {"listeners": ["INTERNAL:9092"]}}, {}, "broker.listeners"),
        ({"broker": {"listeners": ["A://h:1", "A://h:2"]}}, {}, "broker.listeners"),
        ({"broker": {"listeners": ["A://h:99999"]}}, {}, "broker.listeners"),
        (
            {"broker": {"listeners": ["A://h:1"], "advertised_listeners": ["B://h:1"]}},
            {},
            "broker.advertised_listeners",
        ),
        ({"broker": {"listeners": ["A://0.0.0.0:1"]}}, {}, "broker.listeners"),
        ({"broker": {"host": "0.0.0.0"}}, {}, "broker.advertised_host"),
        (
            {"broker": {"group_min_session_timeout_ms": 20000}},
            {"FLUX_BROKER__GROUP_MAX_SESSION_TIMEOUT_MS": "10000"},
            "broker.group_min_session_timeout_ms",
        ),
        ({"broker": {"group_max_session_timeout_ms": 0}}, {}, "group_max_session_timeout_ms"),
    ],
)
def test_invalid_configuration_names_the_key(raw, environ, named) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({**SECRET, **raw}, environ=environ)
    assert named in str(caught.value)


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[node\nid = 1")
    with pytest.raises(ConfigError, match="broken.toml"):
        load_config(path, environ={})


def test_listeners_default_to_one_plaintext_listener() -> None:
    config = parse_config({**SECRET, "broker": {"kafka_port": 9100, "advertised_host": "h1"}})
    (listener,) = config.listeners
    assert (listener.name, listener.host, listener.port) == ("PLAINTEXT", "127.0.0.1", 9100)
    assert (listener.advertised_host, listener.advertised_port) == ("h1", 0)


def test_listeners_from_the_environment_like_the_compose_file() -> None:
    config = parse_config(
        SECRET,
        environ={
            "FLUX_BROKER__LISTENERS": "INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:19092",
            "FLUX_BROKER__ADVERTISED_LISTENERS": "INTERNAL://flux1:9092,EXTERNAL://127.0.0.1:29092",
        },
    )
    assert [
        (x.name, x.host, x.port, x.advertised_host, x.advertised_port) for x in config.listeners
    ] == [
        ("INTERNAL", "0.0.0.0", 9092, "flux1", 9092),
        ("EXTERNAL", "0.0.0.0", 19092, "127.0.0.1", 29092),
    ]
