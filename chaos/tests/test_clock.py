"""A partition leader whose wall clock jumps (``flux.chaos.clock_shim``), checked directly: the
jump reaches the node (its LogAppendTime timestamps move with it), and retention of a 7-day
topic, run twice a second on every node, deletes nothing when the leader's clock runs an hour
ahead, nor when it then runs an hour behind; every write stays readable from offset 0.

The clock-jump scenario (``chaos/tests/test_scenarios.py``) runs the log workload through
jumps of minutes to hours on leaders, the controller and other nodes; this test shows the
mechanism works and pins the retention case of the hardening issue on its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from flux.chaos.nemesis import wait_full_isr
from flux.cli.chaos import ProcessCluster, start_process_cluster
from flux.sdk import Admin, SimpleConsumer, SimpleProducer

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.slow]

TOPIC = "clock"
RETENTION_CHECK_INTERVAL_MS = 200
HOUR_S = 3600.0
#: A timestamp is "an hour off" when it is at least this far off the true time.
JUMP_SEEN_S = 0.9 * HOUR_S
JUMP_TIMEOUT_S = 10.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    extra = {"broker": {"retention_check_interval_ms": RETENTION_CHECK_INTERVAL_MS}}
    with start_process_cluster(tmp_path / "cluster", extra=extra, clock_jumps=True) as control:
        with Admin(control.bootstrap_servers(), timeout_s=30) as admin:
            admin.create_topic(
                TOPIC,
                partitions=1,
                replication_factor=3,
                configs={
                    "min.insync.replicas": "2",
                    "segment.bytes": "1024",  # a few records per segment: many closed ones
                    "retention.ms": str(7 * 24 * 3600 * 1000),
                    "message.timestamp.type": "LogAppendTime",
                },
            )
        assert wait_full_isr(control.bootstrap_servers(), [TOPIC], timeout_s=30)
        yield control


def wait_log_append_time_off_by(
    producer: SimpleProducer, consumer: SimpleConsumer, offset_s: float
) -> list[int]:
    """Send until the leader stamps a record ``offset_s`` off the true time (the shim
    re-reads the offset within 50 ms); the offsets sent."""
    sent = []
    deadline = time.monotonic() + JUMP_TIMEOUT_S
    while time.monotonic() < deadline:
        offset = producer.send(TOPIC, f"probe-{len(sent)}", partition=0).offset
        sent.append(offset)
        (record,) = [
            r for r in consumer.fetch(TOPIC, 0, offset, max_wait_ms=0) if r.offset == offset
        ]
        off_s = record.timestamp / 1000 - time.time()
        if (offset_s > 0 and off_s > JUMP_SEEN_S) or (offset_s < 0 and off_s < -JUMP_SEEN_S):
            return sent
    raise AssertionError(f"the leader's clock did not move by {offset_s} s")


def test_a_leader_an_hour_off_keeps_every_segment_of_a_seven_day_topic(
    cluster: ProcessCluster,
) -> None:
    bootstrap = cluster.bootstrap_servers()
    with Admin(bootstrap, timeout_s=10) as admin:
        leader = admin.describe_topic(TOPIC).partitions[0].leader
    with (
        SimpleProducer(bootstrap, acks=-1, timeout_s=30) as producer,
        SimpleConsumer(bootstrap, timeout_s=30) as consumer,
    ):
        written = [producer.send(TOPIC, f"v-{i}" * 20, partition=0).offset for i in range(40)]
        for offset_s in (HOUR_S, -HOUR_S):
            cluster.jump_clock(leader, offset_s)
            written += wait_log_append_time_off_by(producer, consumer, offset_s)
            # Retention runs every 200 ms on every node; give it several passes with the clock
            # off (it would delete, not signal: there is no event to wait for).
            threading.Event().wait(5 * RETENTION_CHECK_INTERVAL_MS / 1000)
            with Admin(bootstrap, timeout_s=10) as admin:
                assert admin.earliest_offsets(TOPIC) == {0: 0}, f"clock {offset_s:+} s"
        cluster.jump_clock(leader, 0.0)
        high_watermark = consumer.high_watermarks(TOPIC)[0]
        assert high_watermark == written[-1] + 1
        read = []
        while len(read) < high_watermark:
            read += [r.offset for r in consumer.fetch(TOPIC, 0, len(read), max_wait_ms=0)]
    assert read == list(range(high_watermark))
