"""Failover times of a local 3-node cluster (real processes, default 3 s session timeout).

For each round it measures
- controller failover: SIGKILL of the active controller until a topic creation succeeds on a
  survivor;
- broker failover: SIGKILL of a broker that leads partitions (not the active controller) until
  the metadata shows new leaders for all of them (election) and until an unmodified
  confluent-kafka producer has delivered a record to each of them (produce resume).
- steady producer (``--steady-seconds`` > 0): an idempotent ``acks=all`` confluent-kafka
  producer writes ``STEADY_RATE`` records/s round-robin over the partitions while a node is
  SIGKILLed, once a partition leader that is not the active controller (``leader_kill``) and
  once the node of the active controller (``controller_kill``; every node is controller and
  broker, so it leads partitions too): the time from the SIGKILL to the first acknowledged
  record, sent after the kill, on every partition the victim led (``first_ack_s``), and the
  longest stretch without any acknowledgement from one second before the kill to the end of
  the window (``longest_gap_s``).
The killed node is restarted and waited for between rounds. Prints one JSON object.

    python benchmarks/failover.py [--rounds 3] [--session-timeout-ms 3000]
        [--steady-seconds 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flux.cluster.launcher import NodeProcess, local_cluster_configs  # noqa: E402

from tests.integration.cluster_helpers import (  # noqa: E402
    active_controller,
    create_topic,
    partitions,
)

POLL_S = 0.02
TOPIC = "failover"
#: Records per second of the steady producer.
STEADY_RATE = 500


def _wait(condition, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    problem: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = condition()
        except (OSError, ConnectionError, AssertionError) as error:
            result, problem = None, error
        if result:
            return result
        time.sleep(POLL_S)
    raise TimeoutError(f"condition not met (last problem: {problem!r})")


def controller_failover(nodes: list[NodeProcess]) -> float:
    victim = _wait(lambda: active_controller(nodes))
    survivor = next(node for node in nodes if node is not victim)
    victim.kill()
    started = time.monotonic()
    _wait(lambda: create_topic(survivor, f"probe-{uuid.uuid4().hex[:8]}", 1, 2)["error_code"] == 0)
    elapsed = time.monotonic() - started
    _restart_and_rebalance(victim, survivor, TOPIC)
    return elapsed


def broker_failover(nodes: list[NodeProcess], topic: str) -> tuple[float, float]:
    from confluent_kafka import Producer

    active = _wait(lambda: active_controller(nodes))
    survivor = active
    leaders = {p["partition_index"]: p["leader_id"] for p in partitions(survivor, topic)}
    victim = next(node for node in nodes if node is not active and node.node_id in leaders.values())
    led = [index for index, leader in leaders.items() if leader == victim.node_id]
    producer = Producer(
        {
            "bootstrap.servers": survivor.bootstrap_servers,
            "acks": 1,
            "message.timeout.ms": 60000,
            "retry.backoff.ms": 20,
            "retry.backoff.max.ms": 100,
            "topic.metadata.refresh.fast.interval.ms": 50,
        }
    )
    producer.list_topics(topic, timeout=10)
    delivered: dict[int, float] = {}
    victim.kill()
    started = time.monotonic()
    for index in led:
        producer.produce(
            topic,
            value=b"probe",
            partition=index,
            on_delivery=lambda error, msg: (
                delivered.setdefault(msg.partition(), time.monotonic()) if error is None else None
            ),
        )

    def elected() -> bool:
        now = partitions(survivor, topic)
        return all(now[i]["leader_id"] not in (victim.node_id, -1) for i in led)

    _wait(elected)
    election = time.monotonic() - started
    producer.flush(60)
    if len(delivered) != len(led):
        raise RuntimeError(f"delivered to {sorted(delivered)} of {led}")
    resume = max(delivered.values()) - started
    _restart_and_rebalance(victim, survivor, topic)
    return election, resume


def steady_failover(
    nodes: list[NodeProcess], topic: str, victim_kind: str, seconds: float
) -> tuple[float, float]:
    """``(first_ack_s, longest_gap_s)`` of one SIGKILL under a steady acks=all producer (see
    the module docstring)."""
    from confluent_kafka import Producer

    active = _wait(lambda: active_controller(nodes))
    leaders = {p["partition_index"]: p["leader_id"] for p in partitions(active, topic)}
    if victim_kind == "controller":
        victim = active
    else:
        victim = next(n for n in nodes if n is not active and n.node_id in leaders.values())
    observer = next(node for node in nodes if node is not victim)
    led = [index for index, leader in leaders.items() if leader == victim.node_id]
    producer = Producer(
        {
            "bootstrap.servers": ",".join(node.bootstrap_servers for node in nodes),
            "enable.idempotence": True,
            "linger.ms": 1,
            "message.timeout.ms": 60000,
            "retry.backoff.ms": 20,
            "retry.backoff.max.ms": 100,
            "topic.metadata.refresh.fast.interval.ms": 50,
        }
    )
    acks: list[tuple[float, int, float]] = []  # (acknowledged at, partition, sent at)
    stop = threading.Event()

    def write() -> None:
        number = 0
        while not stop.is_set():
            sent = time.monotonic()
            producer.produce(
                topic,
                value=b"steady",
                partition=number % len(leaders),
                on_delivery=lambda error, msg, sent=sent: (
                    acks.append((time.monotonic(), msg.partition(), sent))
                    if error is None
                    else None
                ),
            )
            number += 1
            producer.poll(0)
            time.sleep(1 / STEADY_RATE)
        producer.flush(60)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        time.sleep(2.0)  # steady before the kill
        victim.kill()
        killed = time.monotonic()
        time.sleep(seconds)
    finally:
        stop.set()
        writer.join(90)
    first = []
    for index in led:
        after = [at for at, partition, sent in acks if partition == index and sent >= killed]
        first.append(min(after) - killed if after else float("inf"))
    times = sorted(at for at, _p, _s in acks if at >= killed - 1.0)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    _restart_and_rebalance(victim, observer, topic)
    return max(first, default=0.0), max(gaps, default=float("inf"))


def _restart_and_rebalance(victim: NodeProcess, observer: NodeProcess, topic: str) -> None:
    """Restart ``victim`` and wait until it is back in every ISR and leads its preferred
    partitions again, so each round starts from the same balanced cluster."""
    victim.start()
    victim.wait_ready()

    def balanced() -> bool:
        now = partitions(observer, topic)
        return all(
            len(p["isr_nodes"]) == 3 and p["leader_id"] == p["replica_nodes"][0] for p in now
        )

    _wait(balanced)


def _summary(values: list[float]) -> dict[str, float | list[float]]:
    return {
        "runs_s": [round(v, 3) for v in values],
        "median_s": round(statistics.median(values), 3),
        "max_s": round(max(values), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    parser.add_argument(
        "--steady-seconds", type=float, default=10.0, help="0: no steady-producer rounds"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="flux-failover-") as workdir:
        nodes = local_cluster_configs(
            Path(workdir),
            3,
            extra={
                "node": {"log_level": "WARNING"},
                "controller": {"session_timeout_ms": args.session_timeout_ms},
            },
        )
        for node in nodes:
            node.start()
        try:
            for node in nodes:
                node.wait_ready()
            topic = TOPIC
            assert create_topic(nodes[0], topic, 6, 3)["error_code"] == 0
            controller_times, election_times, resume_times = [], [], []
            steady: dict[str, dict[str, list[float]]] = {
                kind: {"first_ack_s": [], "longest_gap_s": []}
                for kind in ("leader_kill", "controller_kill")
            }
            for _ in range(args.rounds):
                controller_times.append(controller_failover(nodes))
                election, resume = broker_failover(nodes, topic)
                election_times.append(election)
                resume_times.append(resume)
                if args.steady_seconds > 0:
                    for kind, victim in (
                        ("leader_kill", "leader"),
                        ("controller_kill", "controller"),
                    ):
                        first, gap = steady_failover(nodes, topic, victim, args.steady_seconds)
                        steady[kind]["first_ack_s"].append(first)
                        steady[kind]["longest_gap_s"].append(gap)
        finally:
            for node in nodes:
                node.stop()
    print(
        json.dumps(
            {
                "benchmark": "failover",
                "nodes": 3,
                "session_timeout_ms": args.session_timeout_ms,
                "heartbeat_interval_ms": 500,
                "controller_failover_to_topic_creation": _summary(controller_times),
                "broker_kill_to_new_leaders": _summary(election_times),
                "broker_kill_to_first_produce_on_every_led_partition": _summary(resume_times),
                **(
                    {
                        "steady_producer": {
                            "rate_per_s": STEADY_RATE,
                            "acks": "all",
                            **{
                                kind: {name: _summary(values) for name, values in figures.items()}
                                for kind, figures in steady.items()
                            },
                        }
                    }
                    if args.steady_seconds > 0
                    else {}
                ),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
