"""``fluxctl cluster up/status/kill/restart/down`` and ``fluxctl node start`` errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from flux.protocol.api import ApiKey
from flux.sdk.wire import KafkaConnection

pytestmark = pytest.mark.integration


def _fluxctl(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flux.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=check,
    )


def _metadata_brokers(bootstrap: str) -> list[int]:
    with KafkaConnection.from_bootstrap(bootstrap) as conn:
        response = conn.request(
            ApiKey.METADATA, 5, {"topics": [], "allow_auto_topic_creation": False}
        )
    return [broker["node_id"] for broker in response["brokers"]]


def test_cluster_lifecycle(tmp_path: Path) -> None:
    cluster_dir = str(tmp_path / "cluster")
    try:
        up = json.loads(_fluxctl("cluster", "up", "--dir", cluster_dir, "--kafka-port", "0").stdout)
        assert [node["running"] for node in up["nodes"]] == [True]
        assert _metadata_brokers(up["bootstrap_servers"]) == [1]

        again = _fluxctl("cluster", "up", "--dir", cluster_dir, "--kafka-port", "0")
        assert "already running" in again.stderr

        _fluxctl("cluster", "kill", "1", "--dir", cluster_dir)
        status = json.loads(_fluxctl("cluster", "status", "--dir", cluster_dir).stdout)
        assert status["nodes"][0]["running"] is False

        restarted = json.loads(_fluxctl("cluster", "restart", "1", "--dir", cluster_dir).stdout)
        assert restarted["nodes"][0]["running"] is True
        assert _metadata_brokers(restarted["bootstrap_servers"]) == [1]
    finally:
        down = _fluxctl("cluster", "down", "--dir", cluster_dir, check=False)
    assert json.loads(down.stdout) == {"stopped": [1]}
    assert "no cluster" in _fluxctl("cluster", "status", "--dir", cluster_dir, check=False).stderr


def test_node_start_refuses_bad_config(tmp_path: Path) -> None:
    config = tmp_path / "node.toml"
    config.write_text(f'[node]\ndata_dir = "{tmp_path}"\n[broker]\nkafka_prt = 1\n')
    result = _fluxctl("node", "start", "--config", str(config), check=False)
    assert result.returncode != 0
    assert "broker.kafka_prt" in result.stderr
