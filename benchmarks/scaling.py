"""Scaling of a local 3-node cluster (each node controller + broker, data on disk in a temporary
directory, ``log_level = "WARNING"``) along four axes, driven by confluent-kafka (librdkafka).
Prints one JSON object on stdout (progress goes to stderr).

Every axis gets a fresh cluster; every point a new topic (replication factor 3,
``min.insync.replicas=2``, created with ``AdminClient``), deleted after the point. All produce
is ``acks=all``, ``enable.idempotence=false``; latencies are from ``produce()`` to the delivery
callback. Per-node figures are lists in node id order (1, 2, 3); CPU, RSS and open file
descriptors are read from ``/proc/<pid>/{stat,status,fd}`` of the node processes.

- ``partitions`` (3, 300, 3000, 10000 partitions):
  ``create_s`` (CreateTopics call until every partition has a leader and a full ISR in the
  client's metadata); ``idle_cpu_pct`` (utime+stime over ``--idle-seconds`` right after the
  creation, or ``--settle-seconds`` after it, with no client, % of one core), ``rss_mb``
  (VmRSS) and ``open_fds`` at the end of
  that idle time; ``produce_records_per_s`` / ``produce_mb_per_s`` (``--records`` 100-byte
  records as fast as possible (``--partitioning``, below), ``linger.ms=5``,
  ``batch.size=1000000``); ``latency_p50_ms`` / ``latency_p99_ms`` at ``--rate`` records/s for
  ``--latency-seconds`` (``linger.ms=1``, ``--partitioning``) and the achieved rate;
  ``metadata_propagation_s``: a 1-partition topic is created next to the big one, timed from
  the CreateTopics call returning until the Metadata response of every broker (asked at its
  own Kafka address) shows it with a leader; ``leader_change_s`` / ``failover_s``: one broker
  that is not the active controller is SIGKILLed and each live broker's own Metadata is
  polled (one thread per broker) for the partitions it led: ``leader_change_s`` from the first
  broker showing any of them led elsewhere until every live broker shows all of them led
  elsewhere (one controller decision reaching every broker), ``failover_s`` from the SIGKILL
  until then (includes ``broker.session.timeout.ms``), ``metadata_poll_ms`` the median time
  of one Metadata call (their resolution), ``leaders_moved``; the broker is restarted and the
  point ends when every ISR is full again. ``--steps`` picks which of these measurements
  run (``idle,throughput,latency,propagation,leader-change``, default all).
- ``connections`` (10, 100, 1000 producers): that many confluent-kafka producers (one
  librdkafka client each, so one connection per broker each), each sending 10 records/s of
  100 bytes round robin over a 3-partition topic for ``--latency-seconds``, driven from up to
  4 threads: ``records_acked``, ``delivery_errors``, ``latency_p50_ms`` / ``latency_p99_ms``
  over all producers, ``peak_rss_mb`` and ``peak_open_fds`` per node during the run. The
  brokers of this axis accept 4 connections per producer (``broker.max_connections``, whose
  default is 1000).
- ``groups`` (1, 10, 50 consumer groups): ``--records`` 100-byte records (default 20000) on a
  3-partition topic, then one consumer per group (distinct ``group.id``, ``subscribe``,
  ``auto.offset.reset=earliest``), each in its own thread, reads until it has seen them all:
  ``all_read_s`` (start of the consumers until the last group has read everything, which
  includes joining the group and its 3 s ``group_initial_rebalance_delay_ms``),
  ``fastest_group_s``, ``consume_records_per_s`` (all groups' records / ``all_read_s``),
  ``peak_rss_mb`` and ``peak_open_fds`` per node.
- ``record-bytes`` (100, 10000, 1000000-byte records, 3 partitions): ``records`` (about
  ``--bytes-per-point`` bytes, at least 20), ``produce_records_per_s`` / ``produce_mb_per_s``,
  and ``latency_p50_ms`` / ``latency_p99_ms`` at ``latency_target_records_per_s``
  = ``--rate`` scaled down so that rate * size <= 20 MB/s.

``--partitioning`` says how the records of those two steps pick partitions. ``sticky`` (the
default): no key and no partition, so librdkafka's own partitioner sends each record where its
sticky partitioner points (for ``sticky.partitioning.linger.ms``, twice ``linger.ms``), as
``replicated_produce.py``, Kafka's ``kafka-producer-perf-test`` and a producer of keyless
events do; a record batch then holds the records of a few milliseconds whatever the partition
count, so the points compare the cost of partitions, not of batch sizes. ``round-robin``:
record ``i`` to partition ``i mod N`` (what keyed records spread over every partition look
like): over thousands of partitions nearly every record is its own batch and its own request
(librdkafka sends one partition per ProduceRequest), so this measures the cost per batch.
Figures taken before 2026-11-26 used ``round-robin`` (it was the only way). The warm-up
always writes one record to every partition.

A measurement that fails leaves its figures null and its error in the point's ``"error"``
(null when all went well), and the run goes on; so does one whose delivery reports are not
all in within a bound (600 s after the last record of a throughput run, 120 s after a latency
run: a cluster that cannot keep up). The script raises its open-file limit to 131072 where
allowed (root), else to the hard limit, before starting the nodes, which inherit it (a node
keeps about three files open per partition replica); ``machine.open_files_limit`` reports it.

    python benchmarks/scaling.py [--axis partitions|connections|groups|record-bytes|all]
        [--points 3,300] [--quick] [--out DIR] [--records N] [--idle-seconds 10]
        [--latency-seconds 10] [--rate 5000] [--bytes-per-point 200000000] [--steps ...]
    python benchmarks/scaling.py --quick --out /tmp/scaling    # every axis, tiny points

``--points`` overrides the points of the one chosen ``--axis``. ``--quick`` (about a minute):
partitions 3,30; connections 2,10; groups 1,2; record-bytes 100,10000; 2 s idle and latency
runs, 20000 records (2000 for groups), 20 MB per record-bytes point; explicit options still
win. ``--out DIR`` also writes ``DIR/scaling.json`` and a plot per axis,
``DIR/scaling-<axis>.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flux.cluster.launcher import NodeProcess, local_cluster_configs  # noqa: E402

NODES = 3
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
AXES = ("partitions", "connections", "groups", "record-bytes")
POINTS = {
    "partitions": (3, 300, 3000, 10_000),
    "connections": (10, 100, 1000),
    "groups": (1, 10, 50),
    "record-bytes": (100, 10_000, 1_000_000),
}
QUICK_POINTS = {
    "partitions": (3, 30),
    "connections": (2, 10),
    "groups": (1, 2),
    "record-bytes": (100, 10_000),
}
DEFAULTS = {"idle_seconds": 10.0, "latency_seconds": 10.0, "bytes_per_point": 200_000_000}
QUICK = {"idle_seconds": 2.0, "latency_seconds": 2.0, "bytes_per_point": 20_000_000}
RECORDS = {"partitions": 200_000, "groups": 20_000}
QUICK_RECORDS = {"partitions": 20_000, "groups": 2_000}
FIGURES = {
    "partitions": (
        "create_s",
        "idle_cpu_pct",
        "rss_mb",
        "open_fds",
        "produce_records_per_s",
        "produce_mb_per_s",
        "latency_p50_ms",
        "latency_p99_ms",
        "latency_records_per_s",
        "metadata_propagation_s",
        "leader_change_s",
        "failover_s",
    ),
    "connections": (
        "records_acked",
        "delivery_errors",
        "latency_p50_ms",
        "latency_p99_ms",
        "peak_rss_mb",
        "peak_open_fds",
    ),
    "groups": (
        "all_read_s",
        "fastest_group_s",
        "consume_records_per_s",
        "peak_rss_mb",
        "peak_open_fds",
    ),
    "record-bytes": (
        "records",
        "produce_records_per_s",
        "produce_mb_per_s",
        "latency_target_records_per_s",
        "latency_records_per_s",
        "latency_p50_ms",
        "latency_p99_ms",
    ),
}
RECORD_BYTES = 100
PARTITION_STEPS = ("idle", "throughput", "latency", "propagation", "leader-change")
SMALL_TOPIC_PARTITIONS = 3
PRODUCER_RATE = 10  # records/s of each producer of the connections axis
CONNECTIONS_PER_PRODUCER = 4  # broker.max_connections of the connections axis, per producer
PRODUCER_THREADS = 4
LATENCY_BYTES_PER_S = 20_000_000
MESSAGE_MAX_BYTES = 1_048_000  # under the broker's message_max_bytes (1048588)
POLL_S = 0.02
# Upper bounds on waiting for delivery reports (seconds); what is left then fails the figure.
WARM_UP_FLUSH_S = 120
THROUGHPUT_FLUSH_S = 600
LATENCY_FLUSH_S = 120
# This process's open-file limit where allowed (root), else its hard limit; the nodes inherit
# it, and a node keeps about three files open per partition replica.
FD_LIMIT = 1 << 17
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _log(message: str) -> None:
    print(f"[scaling {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _name(prefix: str, value: int) -> str:
    return f"scale-{prefix}{value}-{uuid.uuid4().hex[:6]}"


def _wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        asked = time.monotonic()
        if condition():
            return
        time.sleep(max(POLL_S, time.monotonic() - asked))  # big metadata: poll less often
    raise TimeoutError(f"{what} after {timeout_s:.0f} s")


# --- the node processes, from /proc ----------------------------------------------------------


def _pids(nodes: list[NodeProcess]) -> list[int]:
    for node in nodes:
        if not node.is_running() or node.pid is None:
            raise RuntimeError(f"node {node.node_id} is not running:\n{node.log_tail(10)}")
    return [node.pid for node in nodes if node.pid is not None]


def _cpu_times(pid: int) -> tuple[float, float]:
    """The process's user and system CPU seconds so far (utime, stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


def _cpu_seconds(pid: int) -> float:
    return sum(_cpu_times(pid))


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"process {pid} has no VmRSS (exited?)")


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class _PeakSampler:
    """Peak RSS and open file descriptors of each node, sampled from a thread."""

    def __init__(self, pids: list[int], interval_s: float = 0.25) -> None:
        self.pids = pids
        self.interval_s = interval_s
        self.rss_mb = [0.0] * len(pids)
        self.fds = [0] * len(pids)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        for index, pid in enumerate(self.pids):
            self.rss_mb[index] = max(self.rss_mb[index], _rss_mb(pid))
            self.fds[index] = max(self.fds[index], _open_fds(pid))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(OSError, RuntimeError):
                self.sample()

    def figures(self) -> dict[str, list[Any]]:
        return {"peak_rss_mb": [round(v, 1) for v in self.rss_mb], "peak_open_fds": self.fds}

    def __enter__(self) -> _PeakSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def idle_figures(nodes: list[NodeProcess], seconds: float) -> dict[str, list[Any]]:
    """CPU per node over ``seconds`` with no client (% of one core), then RSS and fds."""
    pids = _pids(nodes)
    before = [_cpu_seconds(pid) for pid in pids]
    started = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - started
    used = [_cpu_seconds(pid) - cpu for pid, cpu in zip(pids, before, strict=True)]
    return {
        "idle_cpu_pct": [round(cpu / wall * 100, 1) for cpu in used],
        "rss_mb": [round(_rss_mb(pid), 1) for pid in pids],
        "open_fds": [_open_fds(pid) for pid in pids],
    }


# --- topics ----------------------------------------------------------------------------------


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    # No auto-creation: a Metadata request for a topic a broker does not know yet must not
    # create it.
    return AdminClient({"bootstrap.servers": bootstrap, "allow.auto.create.topics": False})


def _new_topic(topic: str, partitions: int) -> Any:
    from confluent_kafka.admin import NewTopic

    return NewTopic(
        topic,
        num_partitions=partitions,
        replication_factor=REPLICATION_FACTOR,
        config={"min.insync.replicas": str(MIN_INSYNC_REPLICAS)},
    )


def _topic_ready(admin: Any, topic: str, partitions: int, full_isr: bool = True) -> bool:
    meta = admin.list_topics(topic, timeout=30).topics.get(topic)
    return (
        meta is not None
        and meta.error is None
        and len(meta.partitions) == partitions
        and all(
            p.leader >= 0 and (not full_isr or len(p.isrs) == REPLICATION_FACTOR)
            for p in meta.partitions.values()
        )
    )


def create_topic(bootstrap: str, topic: str, partitions: int) -> float:
    """Seconds from the CreateTopics call until every partition has a leader and a full ISR
    in the client's metadata."""
    admin = _admin(bootstrap)
    admin.list_topics(timeout=30)  # connected before the clock starts
    timeout_s = 60 + partitions * 0.1
    started = time.perf_counter()
    futures = admin.create_topics(
        [_new_topic(topic, partitions)], operation_timeout=timeout_s, request_timeout=timeout_s
    )
    futures[topic].result(timeout=timeout_s + 10)
    _wait(lambda: _topic_ready(admin, topic, partitions), timeout_s, f"{topic} not ready")
    return time.perf_counter() - started


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    admin = _admin(bootstrap)
    for topic, future in admin.delete_topics(topics, operation_timeout=120).items():
        try:
            future.result(timeout=150)
        except Exception as error:  # noqa: BLE001 - a leftover topic does not void the point
            if "UNKNOWN_TOPIC" not in str(error):  # never created
                _log(f"could not delete {topic}: {error}")


def metadata_propagation(nodes: list[NodeProcess], bootstrap: str) -> float:
    """Seconds from a 1-partition CreateTopics returning until every broker's own Metadata
    response shows the topic with a leader."""
    topic = _name("probe", 1)
    creator = _admin(bootstrap)
    brokers = [_admin(node.bootstrap_servers) for node in nodes]
    for admin in (creator, *brokers):
        admin.list_topics(timeout=60)  # connected before the clock starts
    creator.create_topics([_new_topic(topic, 1)], operation_timeout=30)[topic].result(60)
    started = time.perf_counter()
    pending = set(range(len(brokers)))
    try:
        while pending:
            if time.perf_counter() - started > 60:
                raise TimeoutError(f"brokers {sorted(pending)} never showed {topic}")
            pending = {i for i in pending if not _topic_ready(brokers[i], topic, 1, False)}
            if pending:
                time.sleep(0.005)
        return time.perf_counter() - started
    finally:
        delete_topics(bootstrap, [topic])


def _active_controller(nodes: list[NodeProcess]) -> int | None:
    for node in nodes:
        try:
            with urllib.request.urlopen(
                f"http://{node.ready['controller_http']}/controller/status", timeout=5
            ) as answer:
                status = json.load(answer)
        except (OSError, ValueError):
            continue
        if status.get("leader_id") is not None:
            return int(status["leader_id"])
    return None


def _leaders(admin: Any, topic: str) -> dict[int, int]:
    meta = admin.list_topics(topic, timeout=30).topics[topic]
    return {index: p.leader for index, p in meta.partitions.items()}


def leader_change(nodes: list[NodeProcess], topic: str, partitions: int) -> dict[str, float]:
    """SIGKILL one broker that is not the active controller and watch, from one thread per
    live broker, that broker's own Metadata for the partitions the killed one led.
    ``leader_change_s``: from the first live broker showing any of them led elsewhere until
    every live broker shows all of them led elsewhere (one controller decision reaching every
    broker); ``failover_s``: from the SIGKILL until then (includes the controller's
    ``broker.session.timeout.ms`` detection); ``metadata_poll_ms``: the median time of one
    Metadata call, the resolution of both. The broker is then restarted and the point ends
    once every partition has a full ISR again."""
    controller = _active_controller(nodes)
    victim = next(n for n in reversed(nodes) if n.node_id != controller)
    live = [n for n in nodes if n is not victim]
    watchers = [_admin(n.bootstrap_servers) for n in live]
    before = _leaders(watchers[0], topic)
    moved = {index for index, leader in before.items() if leader == victim.node_id}
    if not moved:
        raise RuntimeError(f"broker {victim.node_id} leads no partition of {topic}")
    first_seen: list[float | None] = [None] * len(live)
    all_seen: list[float | None] = [None] * len(live)
    shown: list[dict[int, int]] = [{} for _ in live]
    errors: list[str | None] = [None] * len(live)
    polls: list[float] = []

    def watch(slot: int) -> None:
        from confluent_kafka import KafkaException

        deadline = time.perf_counter() + 120
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            try:
                leaders = _leaders(watchers[slot], topic)
            except KafkaException as error:  # a call the client sent to the killed broker
                errors[slot] = str(error)
                continue
            polls.append(time.perf_counter() - started)
            shown[slot] = {i: leaders.get(i, -1) for i in sorted(moved)}
            elsewhere = [i for i in moved if leaders.get(i, -1) not in (-1, victim.node_id)]
            if elsewhere and first_seen[slot] is None:
                first_seen[slot] = started
            if len(elsewhere) == len(moved):
                all_seen[slot] = started
                return

    killed = time.perf_counter()
    victim.kill()
    threads = [threading.Thread(target=watch, args=(i,)) for i in range(len(live))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        if any(t is None for t in all_seen):
            behind = [
                f"broker {node.node_id} showed leaders {shown[slot]} (last error: {errors[slot]})"
                for slot, node in enumerate(live)
                if all_seen[slot] is None
            ]
            raise TimeoutError(
                f"not every live broker showed new leaders for the partitions broker "
                f"{victim.node_id} led within 120 s: {'; '.join(behind)}"
            )
        done = max(t for t in all_seen if t is not None)
        first = min(t for t in first_seen if t is not None)
        return {
            "leader_change_s": round(done - first, 3),
            "failover_s": round(done - killed, 3),
            "metadata_poll_ms": round(sorted(polls)[len(polls) // 2] * 1000, 2),
            "leaders_moved": len(moved),
        }
    finally:
        victim.start()
        victim.wait_ready(timeout_s=300)
        admin = _admin(live[0].bootstrap_servers)
        _wait(
            lambda: _topic_ready(admin, topic, partitions),
            300 + partitions * 0.05,
            f"{topic}: broker {victim.node_id} never rejoined every ISR",
        )


# --- producing -------------------------------------------------------------------------------


class _Tally:
    """Delivery reports: a count (untimed) or latencies in ms (timed), and errors."""

    def __init__(self) -> None:
        self.ok = 0
        self.latencies_ms: list[float] = []
        self.errors: list[str] = []
        self.sent = 0
        self.send_s = 0.0
        self.undelivered = 0

    def delivered(self, error: Any, _msg: Any) -> None:
        if error is None:
            self.ok += 1
        else:
            self.errors.append(str(error))

    def timed(self, sent: float) -> Callable[[Any, Any], None]:
        def on_delivery(error: Any, _msg: Any) -> None:
            if error is None:
                self.latencies_ms.append((time.perf_counter() - sent) * 1000.0)
            else:
                self.errors.append(str(error))

        return on_delivery

    def check(self, expected: int, what: str) -> None:
        delivered = self.ok + len(self.latencies_ms)
        if self.undelivered or self.errors or delivered != expected:
            raise RuntimeError(
                f"{what}: {delivered} delivered, {len(self.errors)} failed "
                f"(first: {self.errors[:1]}), {self.undelivered} undelivered, of {expected}"
            )

    def percentiles(self) -> dict[str, float]:
        ordered = sorted(self.latencies_ms)
        if not ordered:
            raise RuntimeError(f"no record acknowledged ({len(self.errors)} errors)")

        def at(fraction: float) -> float:
            index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
            return round(ordered[index], 2)

        return {"latency_p50_ms": at(0.50), "latency_p99_ms": at(0.99)}


def _producer(bootstrap: str, linger_ms: float, extra: dict[str, Any] | None = None) -> Any:
    from confluent_kafka import Producer

    config = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": linger_ms,
        "enable.idempotence": False,
        "message.max.bytes": MESSAGE_MAX_BYTES,
    }
    return Producer({**config, **(extra or {})})


def _produce(
    producer: Any, topic: str, payload: bytes, partition: int | None, callback: Any
) -> None:
    """Produce one record to ``partition`` (None: where the client's partitioner says)."""
    while True:
        try:
            if partition is None:
                producer.produce(topic, payload, on_delivery=callback)
            else:
                producer.produce(topic, payload, partition=partition, on_delivery=callback)
            return
        except BufferError:
            producer.poll(0.01)


def _flush_all(producers: list[Any], budget_s: float) -> int:
    """Flush every producer within ``budget_s`` in all; purge and count what is left."""
    deadline = time.monotonic() + budget_s
    undelivered = 0
    for producer in producers:
        left = producer.flush(max(1.0, deadline - time.monotonic()))
        if left:
            producer.purge()
            undelivered += left
    return undelivered


def _warm_up(producers: list[Any], topic: str, partitions: int) -> None:
    """One record per partition from every producer, so connections and metadata are up."""
    tally = _Tally()
    for producer in producers:
        for partition in range(partitions):
            _produce(producer, topic, b"warm-up", partition, tally.delivered)
    tally.undelivered = _flush_all(producers, WARM_UP_FLUSH_S)
    tally.check(len(producers) * partitions, "warm-up")


def produce_throughput(
    bootstrap: str,
    topic: str,
    partitions: int,
    records: int,
    record_bytes: int,
    round_robin: bool = True,
) -> dict[str, float]:
    """``records`` produced as fast as possible after a warm-up, partition round robin or
    (``round_robin`` False) where the client's sticky partitioner puts them."""
    producer = _producer(
        bootstrap,
        5,
        {
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "message.timeout.ms": (THROUGHPUT_FLUSH_S + 60) * 1000,
        },
    )
    _warm_up([producer], topic, partitions)
    tally = _Tally()
    payload = os.urandom(record_bytes)
    started = time.perf_counter()
    for index in range(records):
        _produce(
            producer, topic, payload, index % partitions if round_robin else None, tally.delivered
        )
        if index % 1000 == 0:
            producer.poll(0)
    tally.undelivered = _flush_all([producer], THROUGHPUT_FLUSH_S)
    elapsed = time.perf_counter() - started
    tally.check(records, f"throughput run ({elapsed:.0f} s)")
    return {
        "produce_records_per_s": round(records / elapsed),
        "produce_mb_per_s": round(records * record_bytes / elapsed / 1e6, 1),
    }


def _pace(jobs: list[tuple[Any, float]], spec: dict[str, Any], tally: _Tally) -> None:
    """Send ``spec["total"]`` records from each (producer, phase) at one per ``interval``."""
    clock = time.perf_counter
    interval, total, started = spec["interval"], spec["total"], spec["started"]
    sent = [0] * len(jobs)
    while True:
        elapsed = clock() - started
        for index, (producer, phase) in enumerate(jobs):
            due = min(total, int((elapsed - phase) / interval) + 1) if elapsed >= phase else 0
            while sent[index] < due:
                partition = (
                    sent[index] % spec["partitions"] if spec.get("round_robin", True) else None
                )
                _produce(producer, spec["topic"], spec["payload"], partition, tally.timed(clock()))
                sent[index] += 1
            producer.poll(0)
        waiting = [
            phase + n * interval for (_p, phase), n in zip(jobs, sent, strict=True) if n < total
        ]
        if not waiting:
            return
        pause = started + min(waiting) - clock()
        if len(jobs) == 1 and pause >= 0.001:
            jobs[0][0].poll(min(pause, 0.005))  # returns as soon as a delivery report arrives
        elif pause > 0:
            time.sleep(min(pause, 0.002))


def paced(
    producers: list[Any],
    topic: str,
    partitions: int,
    rate: float,
    seconds: float,
    record_bytes: int,
    round_robin: bool = True,
) -> _Tally:
    """Every producer sends ``rate`` records/s for ``seconds`` (partition round robin, phases
    spread over one interval) from up to ``PRODUCER_THREADS`` threads, then flushes; each
    record is timed from ``produce()`` to its delivery callback."""
    interval = 1.0 / rate
    jobs = [(p, i * interval / len(producers)) for i, p in enumerate(producers)]
    threads = max(1, min(PRODUCER_THREADS, len(producers) // 250))
    spec = {
        "interval": interval,
        "total": max(1, int(rate * seconds)),
        "started": time.perf_counter(),
        "partitions": partitions,
        "round_robin": round_robin,
        "topic": topic,
        "payload": os.urandom(record_bytes),
    }
    tally = _Tally()
    workers = [
        threading.Thread(target=_pace, args=(jobs[i::threads], spec, tally)) for i in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    tally.send_s = time.perf_counter() - spec["started"]
    tally.sent = spec["total"] * len(producers)
    tally.undelivered = _flush_all(producers, LATENCY_FLUSH_S)
    return tally


def fixed_rate_latency(
    bootstrap: str,
    topic: str,
    partitions: int,
    rate: float,
    seconds: float,
    record_bytes: int,
    round_robin: bool = True,
) -> dict[str, float]:
    producer = _producer(bootstrap, 1, {"queue.buffering.max.messages": 2_000_000})
    _warm_up([producer], topic, partitions)
    tally = paced([producer], topic, partitions, rate, seconds, record_bytes, round_robin)
    tally.check(tally.sent, "latency run")
    return {**tally.percentiles(), "latency_records_per_s": round(tally.sent / tally.send_s)}


# --- consuming -------------------------------------------------------------------------------


def _commit_once(bootstrap: str, topic: str) -> None:
    """Commit an offset once, so ``__consumer_offsets`` exists before anything is timed."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-warm-up"})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        consumer.close()


def _read_all(
    bootstrap: str, topic: str, expected: int, started: float, results: list[Any], index: int
) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-group-{index}",
            "auto.offset.reset": "earliest",
        }
    )
    seen = 0
    try:
        consumer.subscribe([topic])
        deadline = started + 120 + expected / 1000
        while seen < expected and time.perf_counter() < deadline:
            seen += sum(1 for m in consumer.consume(1000, 0.5) if m.error() is None)
        finished = time.perf_counter() - started
        results[index] = finished if seen >= expected else f"read {seen} of {expected}"
    except Exception as error:  # noqa: BLE001 - reported by consume_groups
        results[index] = f"{type(error).__name__}: {error}"
    finally:
        consumer.close()


def consume_groups(bootstrap: str, topic: str, groups: int, expected: int) -> list[float]:
    """Seconds from the start until each of ``groups`` groups has read ``expected`` records."""
    results: list[Any] = [None] * groups
    started = time.perf_counter()
    threads = [
        threading.Thread(target=_read_all, args=(bootstrap, topic, expected, started, results, i))
        for i in range(groups)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failures = [r for r in results if not isinstance(r, float)]
    if failures:
        raise RuntimeError(f"{len(failures)} of {groups} groups failed (first: {failures[0]})")
    return results


# --- the axes --------------------------------------------------------------------------------


def _note_error(point: dict, error: str) -> None:
    _log(f"failed: {error}")
    point["error"] = f"{point['error']}; {error}" if point["error"] else error


def _step(point: dict, what: str, measure: Callable[[], dict[str, Any]]) -> None:
    """One measurement of a point: on failure its figures stay null, the error is noted, and
    the point goes on."""
    try:
        point.update(measure())
    except Exception as error:  # noqa: BLE001 - recorded in the point
        _note_error(point, f"{what}: {type(error).__name__}: {error}")


def partitions_point(
    nodes: list[NodeProcess], bootstrap: str, count: int, args: Any, point: dict
) -> None:
    topic = _name("p", count)
    round_robin = args.partitioning == "round-robin"
    try:  # the topic is deleted even if it never got ready
        point["create_s"] = round(create_topic(bootstrap, topic, count), 3)
        if args.settle_seconds:
            time.sleep(args.settle_seconds)  # let the new topic's first fetches and checkpoints end
        steps = {
            "idle": lambda: idle_figures(nodes, args.idle_seconds),
            "throughput": lambda: produce_throughput(
                bootstrap, topic, count, args.records, RECORD_BYTES, round_robin
            ),
            "latency": lambda: fixed_rate_latency(
                bootstrap, topic, count, args.rate, args.latency_seconds, RECORD_BYTES, round_robin
            ),
            "propagation": lambda: {
                "metadata_propagation_s": round(metadata_propagation(nodes, bootstrap), 4)
            },
            "leader-change": lambda: leader_change(nodes, topic, count),
        }
        for name, measure in steps.items():
            if name in args.steps:
                _step(point, name, measure)
    finally:
        delete_topics(bootstrap, [topic])


def connections_point(
    nodes: list[NodeProcess], bootstrap: str, count: int, args: Any, point: dict
) -> None:
    topic = _name("c", count)
    producers: list[Any] = []
    try:
        create_topic(bootstrap, topic, SMALL_TOPIC_PARTITIONS)
        with _PeakSampler(_pids(nodes)) as peak:
            producers = [_producer(bootstrap, 1) for _ in range(count)]
            _warm_up(producers, topic, SMALL_TOPIC_PARTITIONS)
            tally = paced(
                producers,
                topic,
                SMALL_TOPIC_PARTITIONS,
                PRODUCER_RATE,
                args.latency_seconds,
                RECORD_BYTES,
            )
        point["records_acked"] = len(tally.latencies_ms)
        point["delivery_errors"] = len(tally.errors) + tally.undelivered
        point.update(peak.figures())
        point.update(tally.percentiles())
    finally:
        producers.clear()  # destroys the clients before the topic goes
        delete_topics(bootstrap, [topic])


def groups_point(
    nodes: list[NodeProcess], bootstrap: str, count: int, args: Any, point: dict
) -> None:
    topic = _name("g", count)
    try:
        create_topic(bootstrap, topic, SMALL_TOPIC_PARTITIONS)
        produce_throughput(bootstrap, topic, SMALL_TOPIC_PARTITIONS, args.records, RECORD_BYTES)
        _commit_once(bootstrap, topic)
        expected = args.records + SMALL_TOPIC_PARTITIONS  # with the warm-up records
        with _PeakSampler(_pids(nodes)) as peak:
            finished = consume_groups(bootstrap, topic, count, expected)
        point["all_read_s"] = round(max(finished), 3)
        point["fastest_group_s"] = round(min(finished), 3)
        point["consume_records_per_s"] = round(count * expected / max(finished))
        point.update(peak.figures())
    finally:
        delete_topics(bootstrap, [topic])


def record_bytes_point(
    nodes: list[NodeProcess], bootstrap: str, size: int, args: Any, point: dict
) -> None:
    topic = _name("b", size)
    try:
        create_topic(bootstrap, topic, SMALL_TOPIC_PARTITIONS)
        records = max(20, args.bytes_per_point // size)
        rate = max(1, min(args.rate, LATENCY_BYTES_PER_S // size))
        point["records"] = records
        point["latency_target_records_per_s"] = rate
        _step(
            point,
            "throughput",
            lambda: produce_throughput(bootstrap, topic, SMALL_TOPIC_PARTITIONS, records, size),
        )
        _step(
            point,
            "latency",
            lambda: fixed_rate_latency(
                bootstrap, topic, SMALL_TOPIC_PARTITIONS, rate, args.latency_seconds, size
            ),
        )
    finally:
        delete_topics(bootstrap, [topic])


MEASURES: dict[str, Callable[[list[NodeProcess], str, int, Any, dict], None]] = {
    "partitions": partitions_point,
    "connections": connections_point,
    "groups": groups_point,
    "record-bytes": record_bytes_point,
}


@contextlib.contextmanager
def _cluster(broker: dict[str, Any] | None = None) -> Iterator[list[NodeProcess]]:
    with tempfile.TemporaryDirectory(prefix="flux-scaling-") as workdir:
        extra: dict[str, dict[str, Any]] = {"node": {"log_level": "WARNING"}}
        if broker:
            extra["broker"] = broker
        nodes = local_cluster_configs(Path(workdir), NODES, extra=extra)
        started = time.monotonic()
        try:
            for node in nodes:
                node.start()
            for node in nodes:
                node.wait_ready()
            _log(f"cluster ready in {time.monotonic() - started:.1f} s")
            yield nodes
        finally:
            started = time.monotonic()
            for node in nodes:
                node.stop()
            _log(f"cluster stopped in {time.monotonic() - started:.1f} s")


def _axis_key(axis: str) -> str:
    return axis.replace("-", "_")


def _measure(axis: str, nodes: list[NodeProcess], bootstrap: str, point: dict, args: Any) -> None:
    value = point[_axis_key(axis)]
    _log(f"{axis} = {value} ...")
    started = time.monotonic()
    try:
        _pids(nodes)
        MEASURES[axis](nodes, bootstrap, value, args, point)
    except Exception as error:  # noqa: BLE001 - recorded, and the run goes on
        _note_error(point, f"{type(error).__name__}: {error}")
    _log(f"{axis} = {value} done in {time.monotonic() - started:.1f} s")


def run_axis(axis: str, points: list[int], args: Any) -> list[dict[str, Any]]:
    """Every point of ``axis`` on one fresh cluster."""
    results = [
        {_axis_key(axis): value, **dict.fromkeys(FIGURES[axis]), "error": None} for value in points
    ]
    broker = None
    if axis == "connections":
        broker = {"max_connections": max(1000, CONNECTIONS_PER_PRODUCER * max(points) + 100)}
    try:
        with _cluster(broker) as nodes:
            bootstrap = ",".join(node.bootstrap_servers for node in nodes)
            for point in results:
                _measure(axis, nodes, bootstrap, point, args)
    except Exception as error:  # noqa: BLE001 - the cluster itself failed
        _log(f"{axis}: cluster failed: {error}")
        for point in results:
            point["error"] = point["error"] or f"cluster: {type(error).__name__}: {error}"
    return results


# --- output ----------------------------------------------------------------------------------


def _series(points: list[dict], name: str) -> list[tuple[str | None, list[float]]]:
    values = [point.get(name) for point in points]  # None: not measured (--steps, an error)
    if any(isinstance(value, list) for value in values):
        return [
            (f"node {i + 1}", [v[i] if isinstance(v, list) else math.nan for v in values])
            for i in range(NODES)
        ]
    return [(None, [math.nan if v is None else v for v in values])]


def plot_axis(axis: str, points: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key, names = _axis_key(axis), FIGURES[axis]
    xs = [point[key] for point in points]
    rows = math.ceil(len(names) / 3)
    figure, grid = plt.subplots(rows, 3, figsize=(15, 3.4 * rows), squeeze=False)
    for ax, name in zip(grid.flat, names, strict=False):
        series = _series(points, name)
        for label, ys in series:
            ax.plot(xs, ys, marker="o", label=label)
        if series[0][0] is not None:
            ax.legend(fontsize="small")
        if min(xs) > 0 and max(xs) >= 10 * min(xs):
            ax.set_xscale("log")
            ax.minorticks_off()
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_title(name)
        ax.set_xlabel(key)
    for ax in list(grid.flat)[len(names) :]:
        ax.set_visible(False)
    figure.suptitle(f"Flux scaling: {axis} (3 nodes, RF 3, acks=all)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write_out(directory: Path, table: dict[str, Any], text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "scaling.json").write_text(text + "\n")
    for axis, points in table["axes"].items():
        plot_axis(axis, points, directory / f"scaling-{axis}.png")


def _raise_fd_limit() -> int:
    """Raise RLIMIT_NOFILE to FD_LIMIT (a hard limit may only be raised by root), else to the
    hard limit; the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    for wanted in (FD_LIMIT, hard):
        if wanted == unlimited or (soft != unlimited and soft >= wanted):
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, max(hard, wanted)))
            break
        except (ValueError, OSError):
            continue
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _int_list(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--axis", choices=(*AXES, "all"), default="all")
    parser.add_argument("--points", type=_int_list, help="comma-separated, for one --axis")
    parser.add_argument("--quick", action="store_true", help="tiny points, about a minute")
    parser.add_argument("--out", type=Path, help="write scaling.json and PNG plots here")
    parser.add_argument("--records", type=int, help="default 200000 (groups: 20000)")
    parser.add_argument("--idle-seconds", type=float)
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=0.0,
        help="wait this long after creating a topic before measuring idle figures (default 0)",
    )
    parser.add_argument("--latency-seconds", type=float)
    parser.add_argument("--rate", type=int, default=5000, help="records/s of latency runs")
    parser.add_argument(
        "--partitioning",
        choices=("sticky", "round-robin"),
        default="sticky",
        help="partitions axis: how throughput and latency records pick partitions",
    )
    parser.add_argument("--bytes-per-point", type=int)
    parser.add_argument(
        "--steps",
        type=lambda text: set(text.split(",")),
        default=set(PARTITION_STEPS),
        help="partitions axis: which of " + ",".join(PARTITION_STEPS) + " to run (default all)",
    )
    args = parser.parse_args(argv)
    if not args.steps <= set(PARTITION_STEPS):
        parser.error(f"--steps: unknown {sorted(args.steps - set(PARTITION_STEPS))}")
    if args.points and args.axis == "all":
        parser.error("--points needs a single --axis")
    for key, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def _axis_args(axis: str, args: argparse.Namespace) -> tuple[list[int], argparse.Namespace]:
    points = args.points or list((QUICK_POINTS if args.quick else POINTS)[axis])
    records = args.records or (QUICK_RECORDS if args.quick else RECORDS).get(axis, 0)
    return points, argparse.Namespace(**{**vars(args), "records": records})


def main() -> int:
    args = parse_args()
    fd_limit = _raise_fd_limit()
    table: dict[str, Any] = {
        "benchmark": "scaling",
        "nodes": NODES,
        "replication_factor": REPLICATION_FACTOR,
        "min_insync_replicas": MIN_INSYNC_REPLICAS,
        "acks": "all",
        "quick": args.quick,
        "partitioning": args.partitioning,
        "machine": {"cpus": os.cpu_count(), "open_files_limit": fd_limit},
        "axes": {},
    }
    for axis in AXES if args.axis == "all" else (args.axis,):
        points, axis_args = _axis_args(axis, args)
        table["axes"][axis] = run_axis(axis, points, axis_args)
    text = json.dumps(table, indent=2)
    if args.out:
        write_out(args.out, table, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
