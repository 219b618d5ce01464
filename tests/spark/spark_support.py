"""Shared pieces of the Spark tests: the skip rule, a session factory, cluster helpers.

Spark tests skip only when PySpark (or PyArrow) is missing **and** ``CI`` is unset: CI
installs the ``spark`` extra, so there a missing PySpark is a failure, not a skip.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from flux.cluster.launcher import NodeProcess
from flux.sdk import Admin, Consumer, Message, Producer


def require_spark() -> None:
    """Call at the top of a test module that needs PySpark (before importing it)."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip(
            "PySpark / PyArrow not installed (pip install -e '.[spark]')", allow_module_level=True
        )


def wait_until(condition: Callable[[], Any], timeout_s: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what or condition}")
        time.sleep(0.1)


class FluxCluster:
    """The test cluster: its nodes, a bootstrap string naming all of them, and helpers."""

    def __init__(self, nodes: list[NodeProcess]) -> None:
        self.nodes = nodes

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap_servers for node in self.nodes if node.is_running())

    def create_topic(self, name: str, partitions: int = 3, replication_factor: int = 3) -> None:
        with Admin(self.bootstrap) as admin:
            admin.create_topic(name, partitions=partitions, replication_factor=replication_factor)

    def leader_of(self, topic: str, partition: int) -> NodeProcess:
        with Admin(self.bootstrap) as admin:
            leader = admin.describe_topic(topic).partitions[partition].leader
        return next(node for node in self.nodes if node.node_id == leader)

    def read_all(self, topic: str, expected: int, timeout_s: float = 60.0) -> list[Any]:
        """Every committed record of ``topic`` (waiting until at least ``expected`` arrived),
        plus a short grace period that would reveal duplicates written late. Read
        ``read_committed``: the streaming sink writes each micro-batch in a transaction, and
        what an aborted attempt wrote is not output."""
        records: list[Any] = []
        with Consumer(self.bootstrap, read_old=True, isolation_level="read_committed") as consumer:
            with Admin(self.bootstrap) as admin:
                count = len(admin.describe_topic(topic).partitions)
            consumer.assign([(topic, p) for p in range(count)])
            deadline = time.monotonic() + timeout_s
            while len(records) < expected and time.monotonic() < deadline:
                records += consumer.poll(timeout_s=0.5, max_records=10_000)
            records += consumer.poll(timeout_s=0.5, max_records=10_000)
        return records


class BackgroundProducer:
    """Writes ``v-<n>`` values (keys ``k-<n % 17>``) to a topic from a thread, paced, until
    ``count`` records are acknowledged or ``stop`` is called. ``sent`` lists the values whose
    send was acknowledged (a send in progress when ``stop`` is called completes first)."""

    def __init__(self, bootstrap: str, topic: str, count: int, per_second: float) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._count = count
        self._interval_s = 50 / per_second
        self.sent: list[str] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            with Producer(self._bootstrap) as producer:
                number = len(self.sent)
                while number < self._count and not self._stop.is_set():
                    chunk = [f"v-{n}" for n in range(number, min(number + 50, self._count))]
                    producer.send(
                        self._topic, [Message(v, key=f"k-{int(v[2:]) % 17}") for v in chunk]
                    )
                    self.sent += chunk
                    number += len(chunk)
                    time.sleep(self._interval_s)
        except BaseException as error:  # reported by join()
            self.error = error

    def sent_count(self) -> int:
        return len(self.sent)

    def join(self, timeout_s: float = 120.0) -> list[str]:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the producer did not finish"
        if self.error is not None:
            raise self.error
        return self.sent

    def is_running(self) -> bool:
        return self._thread.is_alive() and self.error is None

    def stop(self) -> list[str]:
        """Stop writing; the values acknowledged so far (an error is raised)."""
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error
        return self.sent
