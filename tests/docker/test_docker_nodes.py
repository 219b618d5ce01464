"""The environment of a broker that ``fluxctl cluster add-node --docker`` starts (pure: no
Docker engine needed); the container itself is tested in ``test_docker_cluster.py``."""

from __future__ import annotations

import click
import pytest
from flux.cli.docker_nodes import add_docker_node, broker_environment

COMPOSE_NODE = {
    "PATH": "/opt/flux/bin:/usr/bin",
    "FLUX_NODE__ID": "1",
    "FLUX_NODE__ROLES": "broker,controller",
    "FLUX_CONTROLLER__VOTERS": "1@flux1:9093:9094,2@flux2:9093:9094,3@flux3:9093:9094",
    "FLUX_CONTROLLER__SECRET": "s3cret",
    "FLUX_CONTROLLER__SESSION_TIMEOUT_MS": "2000",
    "FLUX_BROKER__ADVERTISED_HOST": "flux1",
    "FLUX_BROKER__LISTENERS": "INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:19092",
    "FLUX_BROKER__ADVERTISED_LISTENERS": "INTERNAL://flux1:9092,EXTERNAL://10.0.0.5:21000",
}


def test_broker_environment_copies_the_cluster_settings_and_changes_the_identity() -> None:
    environment = broker_environment(
        COMPOSE_NODE, node_id=4, external_host="10.0.0.5", kafka_port=21003
    )
    assert "PATH" not in environment  # the image's own, not a node setting
    assert environment["FLUX_CONTROLLER__VOTERS"] == COMPOSE_NODE["FLUX_CONTROLLER__VOTERS"]
    assert environment["FLUX_CONTROLLER__SECRET"] == "s3cret"
    assert environment["FLUX_CONTROLLER__SESSION_TIMEOUT_MS"] == "2000"
    assert environment["FLUX_NODE__ID"] == "4"
    assert environment["FLUX_NODE__ROLES"] == "broker"
    assert environment["FLUX_BROKER__ADVERTISED_HOST"] == "flux4"
    assert environment["FLUX_BROKER__ADVERTISED_LISTENERS"] == (
        "INTERNAL://flux4:9092,EXTERNAL://10.0.0.5:21003"
    )


def test_a_secure_docker_cluster_is_refused_before_anything_starts() -> None:
    class SecureCluster:
        secure = True

        def containers(self) -> dict[int, object]:
            raise AssertionError("nothing is looked at once the cluster is known secure")

    with pytest.raises(click.ClickException, match="names only flux1..flux3"):
        add_docker_node(SecureCluster(), node_id=None, timeout_s=1.0)
