"""A short seeded slice of the fuzzer against a live 3-node cluster: every case is answered or
refused (never a hang), no node dies, the well-behaved client keeps getting right answers and
no data changes except by accepted requests (``flux.chaos.fuzz``; the long runs are
``benchmarks/fuzz.py``). Bounded to about a minute of wall time on two cores."""

from __future__ import annotations

import asyncio
import json

import pytest
from flux.chaos.fuzz.mutate import KafkaCase
from flux.chaos.fuzz.runner import (
    CLUSTER_SETTINGS,
    GROUP_MAX_SESSION_MS,
    FuzzNode,
    FuzzSettings,
    _Run,
    _TargetStats,
    run_fuzz,
)
from flux.cluster.launcher import NodeProcess
from flux.protocol.api import ApiKey, encode_request
from flux.sdk.wire import KafkaConnection

from tests.integration.helpers import join_as_only_member, wait_until

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


def test_a_join_held_by_a_rebalance_is_a_group_wait_not_a_hang(cluster_factory) -> None:
    """A JoinGroup still waiting past its timeout, in a group that DescribeGroups shows
    rebalancing (a member that has not rejoined holds the round until its session ends, as
    in Kafka), is counted as a group wait: the protocol's wait, not a finding."""
    processes = cluster_factory(3, **CLUSTER_SETTINGS)
    group = "held-by-a-silent-member"
    with KafkaConnection.from_bootstrap(processes[0].bootstrap_servers) as conn:
        found = wait_until(
            lambda: (
                (r := conn.request(ApiKey.FIND_COORDINATOR, 2, {"key": group}))["error_code"] == 0
                and r
            )
        )
    with KafkaConnection(found["host"], found["port"]) as member:
        join_as_only_member(member, group, timeout_ms=GROUP_MAX_SESSION_MS)  # then silent
    newcomer = {
        "group_id": group, "session_timeout_ms": 6000, "rebalance_timeout_ms": 6000,
        "member_id": "", "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x00"}],
    }  # fmt: skip
    data = encode_request(ApiKey.JOIN_GROUP, 3, 7, "fuzz-test", newcomer)  # v3: joins at once
    case = KafkaCase(0, 0, ApiKey.JOIN_GROUP, 3, ("valid",), data, False)
    [node] = [n for n in fuzz_nodes(processes) if n.kafka == (found["host"], found["port"])]
    run = _Run([node], FuzzSettings(case_timeout_s=1.0, group_wait_s=0.0))

    async def judge() -> _TargetStats:
        stats = _TargetStats()
        run._judge_kafka(case, await run._kafka_framed(node, case, {}), stats)
        return stats

    stats = asyncio.run(judge())
    assert (stats.group_waits, stats.hangs, run.report.hangs) == (1, 0, [])
