"""A short seeded slice of the fuzzer against a live 3-node cluster: every case is answered or
refused (never a hang), no node dies, the well-behaved client keeps getting right answers and
no data changes except by accepted requests (``flux.chaos.fuzz``; the long runs are
``benchmarks/fuzz.py``). Bounded to about a minute of wall time on two cores."""

from __future__ import annotations

import asyncio
import json

import pytest
from flux.chaos.fuzz.runner import CLUSTER_SETTINGS, FuzzNode, FuzzSettings, run_fuzz
from flux.cluster.launcher import NodeProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def fuzz_nodes(processes: list[NodeProcess]) -> list[FuzzNode]:
    nodes = []
    for process in processes:
        kafka_host, _, kafka_port = process.bootstrap_servers.rpartition(":")
        http_host, _, http_port = str(process.ready["broker_http"]).rpartition(":")
        nodes.append(
            FuzzNode(
                node_id=process.node_id,
                kafka=(kafka_host, int(kafka_port)),
                http=(http_host, int(http_port)),
                is_alive=process.is_running,
                log_path=process.log_path,
            )
        )
    return nodes


def test_seeded_fuzz_slice_finds_nothing(cluster_factory) -> None:
    processes = cluster_factory(3, **CLUSTER_SETTINGS)
    settings = FuzzSettings(
        seed=20261126,
        cases={"kafka": 8000, "http": 1500, "replication": 400},
        concurrency={"kafka": 6, "http": 4, "replication": 3},
        check_interval_s=5.0,
        time_limit_s=12.0,  # per target: about a minute in all
    )
    report = asyncio.run(run_fuzz(fuzz_nodes(processes), settings))
    summary = report.as_dict()
    assert report.ok, json.dumps(summary, indent=2, default=str)
    assert summary["cases"]["kafka"] > 200
    assert summary["health_checks"] >= 2
    assert all(process.is_running() for process in processes)
