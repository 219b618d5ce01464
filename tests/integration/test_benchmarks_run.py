"""The benchmark scripts still run end to end and print their JSON (tiny sizes; the figures
themselves are measured by hand, never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str, stderr: list[str] | None = None) -> dict:
    """The JSON ``script`` prints; its standard error appended to ``stderr`` if given."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    if stderr is not None:
        stderr.append(result.stderr)
    return json.loads(result.stdout)


def test_produce_consume_benchmark_prints_json() -> None:
    figures = _run("produce_consume.py", "--records", "20000")
    assert figures["records"] == 20000
    assert figures["produce"]["records_per_s"] > 0 and figures["consume"]["records_per_s"] > 0


def test_replicated_produce_benchmark_prints_json() -> None:
    figures = _run(
        "replicated_produce.py", "--records", "20000", "--latency-seconds", "1", "--rate", "500"
    )
    assert figures["throughput"]["delivery_errors"] == 0
    assert figures["latency"]["p99_ms"] >= figures["latency"]["p50_ms"] > 0


def test_publish_cost_benchmark_prints_json() -> None:
    figures = _run("publish_cost.py", "--shapes", "1x1", "--connections", "2", "--seconds", "1")
    [point] = figures["points"]
    assert point["shape"] == "1x1" and point["connections"] == 2
    assert point["errors"] == 0 and point["messages_per_s"] > 0
    # Every answered message is stored (the high watermarks count the warm-up's too).
    assert point["stored"] >= point["answered"] > 0
    assert point["cpu_us_per_message"] > 0
    split = point["user_us_per_message"] + point["system_us_per_message"]
    assert abs(split - point["cpu_us_per_message"]) <= 1
    # Each answered request is at least one socket read (its request) and one write (its answer).
    assert point["reads_per_message"] >= 1 and point["writes_per_message"] >= 1


def test_http_floor_benchmark_prints_json() -> None:
    figures = _run(
        "http_floor.py", "--seconds", "1", "--link-calls", "200", "--pingpong-calls", "300"
    )
    assert figures["aiohttp"]["requests_per_s"] > 0 and figures["aiohttp"]["non_2xx"] == 0
    assert figures["forward_link"]["calls"] == 200
    assert figures["forward_link"]["round_trips_per_s"] > 0
    for kind in ("websocket", "tcp"):
        assert figures[kind]["round_trips"] == 300 and figures[kind]["round_trips_per_s"] > 0
        assert figures[kind]["caller_cpu_us_per_round_trip"] > 0


def test_record_check_benchmark_prints_json() -> None:
    figures = _run("record_check.py", "--number", "20")
    assert set(figures) == {"alike", "varying", "header", "single"}
    assert all(shape["us_per_batch"] > 0 for shape in figures.values())


def test_replication_round_benchmark_prints_json() -> None:
    figures = _run("replication_round.py", "--rounds", "50")
    assert set(figures) == {"http", "kafka", "batch"}
    assert all(shape["us_per_round"] > 0 for shape in figures.values())


def test_failover_benchmark_prints_json() -> None:
    figures = _run("failover.py", "--rounds", "1", "--steady-seconds", "4")
    assert len(figures["broker_kill_to_new_leaders"]["runs_s"]) == 1
    assert figures["controller_failover_to_topic_creation"]["median_s"] > 0
    for kind in ("leader_kill", "controller_kill"):
        steady = figures["steady_producer"][kind]
        # Produce resumed on every partition the victim led (infinite: it never did).
        assert 0 < steady["first_ack_s"]["median_s"] < 60
        assert 0 < steady["longest_gap_s"]["median_s"] < 60


def test_soak_fencing_benchmark_prints_json() -> None:
    figures = _run("soak_fencing.py", "--minutes", "0.1", "--rate", "500", "--partitions", "6")
    assert figures["acked"] > 0 and figures["failed"] == 0
    assert figures["fenced"] == 0 and figures["all_nodes_running"]


def test_sdk_benchmark_prints_json() -> None:
    figures = _run("sdk_produce.py", "--records", "20000")
    for path in (("flux-sdk", "produce"), ("flux-sdk", "send"), ("flux-sdk", "consume")):
        assert figures[path[0]][path[1]]["records_per_s"] > 0, path
    assert figures["confluent-kafka"]["produce"]["records_per_s"] > 0


def test_scaling_benchmark_prints_json() -> None:
    common = ("--quick", "--idle-seconds", "1", "--latency-seconds", "1", "--records", "2000")
    figures = _run("scaling.py", *common, "--axis", "partitions", "--points", "3")
    assert figures["benchmark"] == "scaling" and figures["nodes"] == 3
    assert figures["machine"]["cpus"] > 0
    (point,) = figures["axes"]["partitions"]
    assert point["partitions"] == 3 and point["error"] is None, point
    for name in (
        "create_s",
        "produce_records_per_s",
        "latency_p50_ms",
        "latency_p99_ms",
        "metadata_propagation_s",
        "failover_s",
        "metadata_poll_ms",
    ):
        assert point[name] > 0, name
    assert point["latency_p99_ms"] >= point["latency_p50_ms"]
    # One of three brokers was killed: it led a third of the partitions, now led elsewhere.
    assert point["leaders_moved"] == 1
    assert 0 <= point["leader_change_s"] <= point["failover_s"]
    for name in ("rss_mb", "open_fds", "idle_cpu_pct"):
        assert len(point[name]) == 3 and min(point[name]) >= 0, name
    assert min(point["rss_mb"]) > 0 and min(point["open_fds"]) > 0

    figures = _run("scaling.py", *common, "--axis", "connections", "--points", "2")
    (point,) = figures["axes"]["connections"]
    assert point["error"] is None, point
    assert point["records_acked"] == 2 * 10 and point["delivery_errors"] == 0
    assert point["latency_p99_ms"] >= point["latency_p50_ms"] > 0
    assert min(point["peak_rss_mb"]) > 0 and min(point["peak_open_fds"]) > 0


def test_compaction_benchmark_prints_json() -> None:
    stderr: list[str] = []
    figures = _run("compaction.py", "--quick", stderr=stderr)
    cleaner = figures["cleaner"]
    # One record per key survives the full clean; offsets are not renumbered.
    assert cleaner["records_after"] == cleaner["distinct_keys"] < cleaner["records_before"]
    assert 0 < cleaner["log_bytes_after"] < cleaner["log_bytes_before"]
    assert cleaner["map_entries"] == cleaner["distinct_keys"]
    assert cleaner["clean_s"] > 0 and cleaner["log_mb_per_s"] > 0
    assert cleaner["memory"]["method"] and cleaner["memory"]["rss_before_mb"] > 0
    (run,) = figures["produce_while_cleaning"]
    assert run["nodes"] == 1
    assert run["idle"]["records_per_s"] > 0 and run["busy"]["records_per_s"] > 0
    assert run["idle"]["cleaner"]["read_bytes"] == 0  # cleaner.enable = false
    # The busy cluster's cleaner installs a clean (within 60 s of the window's end; the
    # benchmark fills the background topic in batches of a quarter segment, so its partitions
    # hold closed segments even when the fill's producer stalled and sent one batch each).
    # On failure, the benchmark's diagnosis (the topic's lag as described, the cleaner
    # worker's CPU, the nodes' logs) is in the message.
    assert run["busy"]["cleaner"]["cleaned_eventually"], stderr[0][-6000:]


def test_security_benchmark_prints_json() -> None:
    figures = _run("security.py", "--quick")
    assert figures["benchmark"] == "security" and figures["nodes"] == 3
    assert figures["machine"]["cpus"] > 0 and len(figures["machine"]["load_average_at_start"]) == 3
    protocols = figures["protocols"]
    assert sorted(protocols) == ["PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL"]
    for name, entry in protocols.items():
        for side in ("produce", "consume"):
            assert entry[side]["records_per_s"] > 0 and entry[side]["mb_per_s"] > 0, (name, side)
            if name != "PLAINTEXT":
                assert entry[f"{side}_vs_plaintext"] > 0, (name, side)
    assert len(figures["runs"]) == 4
    for run in figures["runs"]:
        assert run["produce"]["delivery_errors"] == 0
        assert run["consume"]["high_watermark_records"] == figures["records"] == 50_000


def test_v1_produce_benchmark_prints_json() -> None:
    figures = _run("v1_produce.py", "--messages", "300", "--window", "16")
    for front_door in ("v1", "kafka"):
        assert figures[front_door]["acks_1_msg_per_s"] > 0
        assert figures[front_door]["acks_all_msg_per_s"] > 0
