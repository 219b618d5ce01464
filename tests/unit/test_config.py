"""Node configuration: defaults, strict validation naming the key, environment overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
from flux.cluster.config import ConfigError, load_config, parse_config


def test_defaults_fill_every_section() -> None:
    config = parse_config({}, environ={})
    assert config.broker.kafka_port == 9092
    assert config.node.roles == ("broker",)
    assert config.topic.partitions == 1
    assert config.advertised_host == "127.0.0.1"


def test_file_values_and_flag_overrides(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('[node]\nid = 4\ndata_dir = "/tmp/x"\n[broker]\nkafka_port = 19092\n')
    config = load_config(path, overrides={"broker": {"kafka_port": 29092}}, environ={})
    assert config.node.id == 4
    assert config.broker.kafka_port == 29092


def test_environment_overrides_file(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text("[topic]\npartitions = 2\n")
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
    ],
)
def test_invalid_configuration_names_the_key(raw, environ, named) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, environ=environ)
    assert named in str(caught.value)


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[node\nid = 1")
    with pytest.raises(ConfigError, match="broken.toml"):
        load_config(path, environ={})
