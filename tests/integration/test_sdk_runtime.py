"""The runtime API under faults, on real 3-node clusters.

* Three ``Consumer.run`` processes share a group while a producer writes; one member is
  SIGKILLed, then the leader of a partition. Every acknowledged message is processed at least
  once, the committed offsets end at the log end, and SIGTERM stops the survivors cleanly
  (they leave the group and exit 0).
* An idempotent producer keeps writing across a SIGKILL of its partition's leader: no
  duplicate, no reordering, nothing acknowledged lost.

Run as ``python -m tests.integration.test_sdk_runtime BOOTSTRAP GROUP TOPIC OUTPUT`` this
module is one group member: it appends ``partition offset value`` to OUTPUT for each message
its handler processed (before the commit), until SIGTERM.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration

GROUP_SETTINGS = {"broker": {"group_initial_rebalance_delay_ms": 0}}
SESSION_TIMEOUT_MS = 6000
MESSAGES = 600


def run_member(bootstrap: str, group: str, topic: str, output_path: str) -> None:
    from flux.sdk import ConsumedRecord, Consumer

    with open(output_path, "a") as output:

        def handle(record: ConsumedRecord) -> None:
            output.write(f"{record.partition} {record.offset} {record.value.decode()}\n")
            output.flush()
            time.sleep(0.002)  # slow members, so kills land while work remains

        consumer = Consumer(
            bootstrap,
            group_id=group,
            topics=[topic],
            read_old=True,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=300,
            timeout_s=20,
        )
        consumer.run(each_message=handle)


def _processed(paths: list[Path]) -> set[str]:
    values: set[str] = set()
    for path in paths:
        if path.exists():
            for line in path.read_text().splitlines():
                parts = line.split(" ")
                if len(parts) == 3:
                    values.add(parts[2])
    return values


class _Writer:
    """Produces ``value-<i>`` (keyed by i) at a steady pace on a thread; remembers the acked."""

    def __init__(self, bootstrap: str, topic: str, count: int) -> None:
        from flux.sdk import Message, Producer

        self.acked: set[str] = set()
        self.failed = 0
        self._producer = Producer(bootstrap, acks="all", linger_ms=5, delivery_timeout_ms=30_000)
        self._message = Message
        self._topic = topic
        self._count = count
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        futures = []
        for index in range(self._count):
            value = f"value-{index}"
            future = self._producer.produce(self._topic, value, key=str(index))
            futures.append((value, future))
            time.sleep(0.01)
        for value, future in futures:
            try:
                future.result(60)
                self.acked.add(value)
            except Exception:
                self.failed += 1
        self._producer.close()


def test_runtime_group_survives_member_and_leader_kills(cluster_factory, tmp_path: Path) -> None:
    from flux.sdk import Admin

    nodes = cluster_factory(3, **GROUP_SETTINGS)
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    with Admin(bootstrap) as admin:
        admin.create_topic("work", partitions=6, replication_factor=3)
    outputs = [tmp_path / f"member-{i}.txt" for i in range(3)]
    members = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.integration.test_sdk_runtime", bootstrap, "workers",
             "work", str(path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for path in outputs
    ]  # fmt: skip
    admin = Admin(bootstrap, timeout_s=20)
    try:
        wait_until(lambda: len(admin.describe_group("workers").members) == 3, timeout_s=60)
        writer = _Writer(bootstrap, "work", MESSAGES)
        wait_until(lambda: len(_processed(outputs)) >= 100, timeout_s=60)
        members[0].kill()
        members[0].wait(10)
        wait_until(lambda: len(_processed(outputs)) >= 250, timeout_s=60)
        leader_id = admin.describe_topic("work").partitions[0].leader
        victim = next(node for node in nodes if node.node_id == leader_id)
        victim.kill()
        writer.thread.join(120)
        assert not writer.thread.is_alive()
        assert len(writer.acked) >= MESSAGES * 0.8, f"{writer.failed} sends failed"
        wait_until(lambda: writer.acked <= _processed(outputs[1:] + outputs[:1]), timeout_s=90)

        def committed_at_log_end() -> bool:
            committed = admin.committed_offsets("workers")
            ends = admin.high_watermarks("work")
            return all(committed.get(("work", p)) == end for p, end in ends.items())

        wait_until(committed_at_log_end, timeout_s=60)
        assert admin.describe_topic("work").partitions[0].leader not in (leader_id, -1)
        described = admin.describe_group("workers")
        assert described.state == "Stable" and len(described.members) == 2
        owned = sorted(p for m in described.members for p in m.assignment.get("work", []))
        assert owned == list(range(6))
        # SIGTERM: each survivor finishes its handler, commits, leaves and exits 0.
        for member in members[1:]:
            member.send_signal(signal.SIGTERM)
        for member in members[1:]:
            assert member.wait(30) == 0, member.stderr.read().decode()[-2000:]
        assert admin.describe_group("workers").members == []
    finally:
        admin.close()
        for member in members:
            if member.poll() is None:
                member.kill()
                member.wait(10)


def test_idempotent_producer_across_a_leader_kill(cluster_factory) -> None:
    from flux.sdk import Admin, Consumer, Producer

    nodes = cluster_factory(3)
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    with Admin(bootstrap) as admin:
        admin.create_topic("ordered", partitions=1, replication_factor=3)
        leader_id = admin.describe_topic("ordered").partitions[0].leader
    acked: list[int] = []
    failed: list[int] = []
    with Producer(bootstrap, linger_ms=2, delivery_timeout_ms=30_000) as producer:
        assert producer.idempotent
        futures = []
        for index in range(3000):
            futures.append((index, producer.produce("ordered", str(index), partition=0)))
            if index == 1000:
                next(node for node in nodes if node.node_id == leader_id).kill()
            if index % 50 == 0:
                time.sleep(0.005)
        producer.flush(60)
        for index, future in futures:
            (acked if future.exception() is None else failed).append(index)
    assert len(acked) >= 2900, f"{len(failed)} failed"
    with Consumer(bootstrap, read_old=True) as consumer:
        consumer.assign([("ordered", 0)])
        end = consumer.end_offsets("ordered")[0]
        values: list[int] = []
        while consumer.position(("ordered", 0)) < end:
            values += [int(r.value) for r in consumer.poll(1.0)]
    assert len(values) == len(set(values)), "a duplicate was written"
    assert values == sorted(values), "records were reordered"
    assert set(acked) <= set(values), "an acknowledged record was lost"
    with Admin(bootstrap) as admin:
        assert admin.describe_topic("ordered").partitions[0].leader not in (leader_id, -1)


if __name__ == "__main__":
    run_member(*sys.argv[1:5])
