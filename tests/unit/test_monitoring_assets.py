"""The monitoring files shipped in docs/monitoring/: the Grafana dashboard and the Prometheus
alert rules load, and every metric they name is one a broker's /metrics serves."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from flux.cluster.http.metrics import BrokerMetrics
from flux.controller.image import MetadataImage
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "docs" / "monitoring"
_METRIC = re.compile(r"\b(flux_[a-z0-9_]+)")
_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


class _Traffic:
    traffic = {"orders": [100, 2, 50]}
    isr_shrinks = 1
    isr_expands = 1


def _served() -> set[str]:
    """Every sample name a broker with a controller renders (families with their suffixes)."""
    metrics = BrokerMetrics(
        broker_id=1,
        partitions=list,
        image=lambda: MetadataImage.EMPTY,
        traffic=lambda: _Traffic(),
        controller=lambda: {"is_leader": True, "raft_term": 3, "version": 9},
    )
    names = set()
    for family in text_string_to_metric_families(metrics.render().decode()):
        names.add(family.name)
        names.update(f"{family.name}{suffix}" for suffix in _SUFFIXES)
    return names


def _named(expression: str) -> set[str]:
    return set(_METRIC.findall(expression))


def test_the_dashboard_loads_and_names_only_served_metrics() -> None:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 30
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels) >= 10
    served = _served()
    named: set[str] = set()
    for panel in panels:
        assert panel["type"] in ("stat", "timeseries"), panel["title"]
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"]), panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            found = _named(target["expr"])
            assert found, target["expr"]
            named |= found
    assert named - served == set(), (
        f"the dashboard names metrics no broker serves: {named - served}"
    )
    for family in ("flux_topic_messages_in", "flux_consumer_lag", "flux_controller_active"):
        assert any(name.startswith(family) for name in named), family


def test_the_alert_rules_load_and_name_only_served_metrics() -> None:
    rules = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    served = _served()
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert {rule["alert"] for rule in alerts} >= {
        "FluxOfflinePartitions",
        "FluxUnderReplicatedPartitions",
        "FluxNoActiveController",
        "FluxOfflineLogDirectory",
    }
    for rule in alerts:
        assert rule["expr"] and rule["annotations"]["summary"], rule["alert"]
        unknown = _named(rule["expr"]) - served
        assert unknown == set(), (rule["alert"], unknown)


def test_prometheus_scrapes_every_node_of_the_compose_cluster() -> None:
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    [job] = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["flux1:8080", "flux2:8080", "flux3:8080"]
    compose = (ROOT / "docker-compose.cluster.yml").read_text()
    assert compose.count(':8080"') == 3  # the nodes' broker HTTP port, as scraped
    assert "profiles: [monitoring]" in compose


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs Debian's prometheus package")
def test_promtool_accepts_the_rules_and_the_config(tmp_path: Path) -> None:
    rules = subprocess.run(
        ["promtool", "check", "rules", str(MONITORING / "alerts.yml")],
        capture_output=True,
        text=True,
    )
    assert rules.returncode == 0, rules.stdout + rules.stderr
    config = tmp_path / "prometheus.yml"
    config.write_text(
        (MONITORING / "prometheus.yml")
        .read_text()
        .replace("/etc/prometheus/alerts.yml", str(MONITORING / "alerts.yml"))
    )
    checked = subprocess.run(
        ["promtool", "check", "config", str(config)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
