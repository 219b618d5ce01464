"""Workloads: clients that drive the cluster and record every operation into the history.

* ``LogWorkload``: producer threads send unique values (``<process>-<n>``) round-robin over
  the topic's partitions with ``acks=all``, some idempotent, through both client libraries;
  consumer threads are assigned every partition and poll from offset 0.
* ``GroupWorkload``: consumer-group members in child processes (``flux.chaos.group_member``)
  subscribe to the same topic, poll and commit; every few seconds (from the seed) one member
  is SIGKILLed or SIGTERMed and a new one takes its place.
* ``final_read``: after the faults heal, one reader reads every partition from 0 to its high
  watermark; its ``final-read`` op tells the checker the read was complete.

On a secured cluster every client (threads, member processes, the final reader) gets the
cluster's client settings (``client_config``, Kafka's dotted names; see ``clients``).

Process names say what a process is (``producer-confluent-idempotent-0``); a replaced client
gets a new name (``...-0.1``), so per-process checks restart with it.

Thread-safety: each worker thread owns its client; they share only the ``History`` and the
``stop`` event.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flux.sdk import FluxError, SimpleConsumer

from . import limits
from .clients import make_consumer, make_producer
from .group_member import CLIENT_CONFIG_ENV
from .history import History, Op

__all__ = ["GroupWorkload", "LogWorkload", "WorkloadSpec", "final_read"]

#: Joining a worker thread or a member process at the end gives up after this long.
_JOIN_TIMEOUT_S = limits.OP_TIMEOUT_S + 10


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """Which clients run: producers as (client, idempotent), assign-mode consumers by client,
    and the clients of the group members (empty: no group workload)."""

    producers: Sequence[tuple[str, bool]] = (
        ("confluent", False),
        ("confluent", True),
        ("flux", False),
        ("flux", True),
    )
    consumers: Sequence[str] = ("confluent", "flux")
    group_members: Sequence[str] = ()
    #: Seconds between member kills (drawn uniformly from this range).
    member_kill_interval_s: tuple[float, float] = (4.0, 8.0)
    send_rate_per_producer: float = limits.SEND_RATE_PER_PRODUCER
    #: Transactional producers of the transactional workload (``txn_workload``; 0: none).
    transactional_producers: int = 0


@dataclass
class LogWorkload:
    """Producer and consumer threads; ``start`` them, ``stop`` them."""

    history: History
    bootstrap: str
    topic: str
    partitions: list[int]
    spec: WorkloadSpec
    log: Callable[[str], None] = print
    client_config: Mapping[str, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for index, (client, idempotent) in enumerate(self.spec.producers):
            kind = "idempotent" if idempotent else "plain"
            name = f"producer-{client}-{kind}-{index}"
            self._spawn(name, lambda n=name, c=client, i=idempotent: self._produce(n, c, i))
        for index, client in enumerate(self.spec.consumers):
            name = f"consumer-{client}-{index}"
            self._spawn(name, lambda n=name, c=client: self._consume(n, c))

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(_JOIN_TIMEOUT_S)
            if thread.is_alive():
                self.log(f"workload: thread {thread.name} did not stop in time")

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _produce(self, base_name: str, client: str, idempotent: bool) -> None:
        """Send until stopped, paced to ``send_rate_per_producer``; a producer that met a fatal
        error is replaced by a fresh one under a new process name."""
        interval_s = 1.0 / self.spec.send_rate_per_producer
        life = 0
        while not self._stop.is_set():
            process = base_name if life == 0 else f"{base_name}.{life}"
            producer = make_producer(
                client, self.bootstrap, idempotent=idempotent, client_config=self.client_config
            )
            try:
                self._send_until_fatal(producer, process, idempotent, interval_s)
            finally:
                producer.close()
            life += 1

    def _send_until_fatal(
        self, producer: Any, process: str, idempotent: bool, interval_s: float
    ) -> None:
        sequence = 0
        next_send = time.monotonic()
        while not self._stop.is_set() and not producer.fatal:
            partition = self.partitions[sequence % len(self.partitions)]
            value = f"{process}-{sequence}"
            sequence += 1
            request = {"partition": partition, "value": value, "idempotent": idempotent}
            invocation = self.history.invoke(process, "send", request)
            outcome = producer.send(self.topic, partition, value)
            if outcome.type == "ok":
                self.history.complete(invocation, "ok", {**request, "offset": outcome.offset})
            else:
                self.history.complete(invocation, outcome.type, {**request, "error": outcome.error})
            next_send = max(next_send + interval_s, time.monotonic())
            self._stop.wait(max(0.0, next_send - time.monotonic()))

    def _consume(self, process: str, client: str) -> None:
        consumer = make_consumer(
            client,
            self.bootstrap,
            topic=self.topic,
            partitions=self.partitions,
            name=process,
            client_config=self.client_config,
        )
        self.history.append(process, "ok", "assign", {"partitions": list(self.partitions)})
        try:
            while not self._stop.is_set():
                started = self.history.now()
                records, error = consumer.poll()
                # Empty polls are not recorded: they say nothing and would swamp the history.
                if records:
                    self.history.append(process, "invoke", "poll", None, time=started)
                    self.history.append(process, "ok", "poll", {"records": records})
                if error is not None:
                    self.history.append(process, "invoke", "poll", None, time=started)
                    self.history.append(process, "info", "poll", {"error": error})
                    self._stop.wait(0.1)  # back off; the client reconnects on its own
        finally:
            consumer.close()


@dataclass
class GroupWorkload:
    """Group members as child processes; one is killed and replaced every few seconds."""

    history: History
    bootstrap: str
    topic: str
    group: str
    spec: WorkloadSpec
    seed: int
    log: Callable[[str], None] = print
    client_config: Mapping[str, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _members: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _readers: list[threading.Thread] = field(default_factory=list)
    _killer: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _started: int = 0

    def start(self) -> None:
        for client in self.spec.group_members:
            self._start_member(client)
        self._killer = threading.Thread(target=self._kill_and_replace, name="group-killer")
        self._killer.start()

    def stop(self) -> None:
        self._stop.set()
        if self._killer is not None:
            self._killer.join(_JOIN_TIMEOUT_S)
        with self._lock:
            members = list(self._members.items())
        for process, member in members:
            self._end_member(process, member, graceful=True)
        for reader in self._readers:
            reader.join(_JOIN_TIMEOUT_S)

    def _start_member(self, client: str) -> None:
        process = f"member-{client}-{self._started}"
        self._started += 1
        member = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "flux.chaos.group_member",
                client,
                self.bootstrap,
                self.group,
                self.topic,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env={**os.environ, CLIENT_CONFIG_ENV: json.dumps(dict(self.client_config))},
        )
        with self._lock:
            self._members[process] = member
        reader = threading.Thread(
            target=self._read_member, args=(process, member), name=f"{process}-reader"
        )
        self._readers.append(reader)
        reader.start()
        self.log(f"workload: started {process} (pid {member.pid})")

    def _read_member(self, process: str, member: subprocess.Popen[bytes]) -> None:
        """Copy the member's ops into the history; when its output ends (it exited), complete
        its open op with ``info`` and record a ``crash``."""
        assert member.stdout is not None
        open_op: Op | None = None
        for line in member.stdout:
            try:
                data = json.loads(line)
            except ValueError:
                continue  # a line torn by SIGKILL
            op = self.history.append(
                process, data["type"], data["f"], data.get("value"), time=data["time"]
            )
            open_op = op if op.type == "invoke" else None
        member.wait()
        if open_op is not None:
            self.history.complete(open_op, "info", {"error": "member process ended"})
        self.history.append(process, "info", "crash", {"returncode": member.returncode})

    def _kill_and_replace(self) -> None:
        rng = random.Random(f"{self.seed}-members")
        low, high = self.spec.member_kill_interval_s
        while not self._stop.wait(rng.uniform(low, high)):
            with self._lock:
                processes = sorted(self._members)
            if not processes:
                continue
            victim = rng.choice(processes)
            graceful = rng.random() < 0.5
            with self._lock:
                member = self._members[victim]
            self._end_member(victim, member, graceful=graceful)
            self.log(f"workload: {'stopped' if graceful else 'killed'} {victim}, replacing it")
            self._start_member(victim.split("-")[1])

    def _end_member(self, process: str, member: subprocess.Popen[bytes], *, graceful: bool) -> None:
        with self._lock:
            self._members.pop(process, None)
        if member.poll() is None:
            member.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
        try:
            member.wait(_JOIN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            member.kill()
            member.wait()


def final_read(
    history: History,
    bootstrap: str,
    topic: str,
    timeout_s: float = limits.FINAL_READ_TIMEOUT_S,
    *,
    client_config: Mapping[str, str] | None = None,
) -> bool:
    """Read every partition from 0 to its high watermark as process ``final-reader``; record
    ``final-read`` ok with the high watermarks, or info if it could not finish in time."""
    process = "final-reader"
    invocation = history.invoke(process, "final-read", None)
    deadline = time.monotonic() + timeout_s
    last_error = "timed out"
    while time.monotonic() < deadline:
        try:
            with SimpleConsumer(
                bootstrap, client_id=process, timeout_s=10, security=client_config or None
            ) as consumer:
                high_watermarks = consumer.high_watermarks(topic)
                history.append(process, "ok", "assign", {"partitions": sorted(high_watermarks)})
                for partition, high_watermark in sorted(high_watermarks.items()):
                    _read_partition(history, consumer, topic, partition, high_watermark, process)
        except FluxError as error:
            last_error = f"{type(error).__name__}: {error}"
            time.sleep(0.5)  # the cluster is still settling; try the whole read again
            continue
        history.complete(
            invocation,
            "ok",
            {"high_watermarks": sorted([p, o] for p, o in high_watermarks.items())},
        )
        return True
    history.complete(invocation, "info", {"error": last_error})
    return False


def _read_partition(
    history: History,
    consumer: SimpleConsumer,
    topic: str,
    partition: int,
    high_watermark: int,
    process: str,
) -> None:
    position = 0
    while position < high_watermark:
        started = history.now()
        fetched = consumer.fetch(topic, partition, position, max_wait_ms=0)
        records = [
            [partition, r.offset, (r.value or b"").decode()]
            for r in fetched
            if r.offset < high_watermark
        ]
        if not records:
            raise FluxError(f"{topic}-{partition}: nothing at {position} below {high_watermark}")
        history.append(process, "invoke", "poll", None, time=started)
        history.append(process, "ok", "poll", {"records": records})
        position = records[-1][1] + 1
