"""Fixtures of the Spark tests: ONE local[2] SparkSession and ONE 3-node Flux cluster for the
whole session, because starting either costs seconds to tens of seconds on 2 cores.

Every module that uses them marks itself ``xdist_group("spark")``, so under ``pytest -n auto
--dist loadgroup`` they all run in one worker: one JVM, one cluster. Both are stopped at the
end of the session. Tests isolate themselves by topic names and checkpoint directories.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flux.cluster.launcher import local_cluster_configs

from tests.conftest import FAST_FAILURE_DETECTION

from .spark_support import FluxCluster, wait_until

#: Replicated three ways with min.insync.replicas=2 (offsets too), so killing one node loses
#: nothing acknowledged; followers leave the ISR quickly.
CLUSTER_SETTINGS: dict[str, dict[str, Any]] = {
    "controller": dict(FAST_FAILURE_DETECTION["controller"]),
    "broker": {
        **FAST_FAILURE_DETECTION["broker"],
        "replica_lag_time_max_ms": 1500,
        "group_initial_rebalance_delay_ms": 0,
        "offsets_topic_partitions": 3,
    },
    "topic": {"replication_factor": 3, "min_insync_replicas": 2},
    "node": {"log_level": "WARNING"},
}


@pytest.fixture(scope="session")
def flux_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FluxCluster]:
    root = tmp_path_factory.mktemp("spark-cluster")
    nodes = local_cluster_configs(root, 3, extra=CLUSTER_SETTINGS)
    try:
        for node in nodes:
            node.start()
        for node in nodes:
            node.wait_ready()
        cluster = FluxCluster(nodes)
        # Writable once every broker is registered: a topic replicated on all three.
        probe = f"probe-{uuid.uuid4().hex[:6]}"
        wait_until(lambda: _try_create(cluster, probe), 60, "the cluster accepts topics")
        yield cluster
    finally:
        for node in nodes:
            node.stop(timeout_s=10.0)


def _try_create(cluster: FluxCluster, topic: str) -> bool:
    try:
        cluster.create_topic(topic, partitions=1)
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from flux.spark import flux_session

    session = flux_session(
        "flux-spark-tests",
        master="local[2]",
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.streaming.noDataMicroBatches.enabled": "false",
            "spark.default.parallelism": "2",
        },
    )
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def topic_name() -> Any:
    """``topic_name("in")`` -> a fresh, unique topic name."""
    return lambda prefix: f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")
