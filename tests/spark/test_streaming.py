"""Streaming queries Flux -> Spark -> Flux on a real 3-node cluster: restarts from the
checkpoint, a driver SIGKILLed between a batch's write and its commit, a source partition
leader SIGKILLed mid-query, new partitions and topics, and read limits.

The transformation is ``value -> "out-" + value`` with the key kept; producers write unique
values ``v-<n>``, so "no gap, no duplicate" is: the output's values are exactly
``out-<v>`` for every acknowledged input ``v``, each once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from flux.sdk import Admin, Consumer, Message, Producer

from .spark_support import BackgroundProducer, FluxCluster, require_spark, wait_until

require_spark()

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group("spark")]

CRASH_DRIVER = Path(__file__).with_name("crash_driver.py")
TASK_CRASH_DRIVER = Path(__file__).with_name("task_crash_driver.py")


def _query(
    spark: Any,
    bootstrap: str,
    source: str,
    sink: str,
    checkpoint: str,
    *,
    available_now: bool = True,
    max_offsets: int = 150,
    pattern: bool = False,
) -> Any:
    reader = (
        spark.readStream.format("flux")
        .option("bootstrap.servers", bootstrap)
        .option("subscribePattern" if pattern else "subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_offsets))
    )
    writer = (
        reader.load()
        .selectExpr("key", "concat('out-', cast(value as string)) as value")
        .writeStream.format("flux")
        .option("bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def _run_once(
    spark: Any, bootstrap: str, source: str, sink: str, checkpoint: str, **kw: Any
) -> Any:
    query = _query(spark, bootstrap, source, sink, checkpoint, **kw)
    query.awaitTermination(240)
    assert query.exception() is None, query.exception()
    return query


def _assert_exact_output(cluster: FluxCluster, sink: str, sent: list[str]) -> None:
    records = cluster.read_all(sink, expected=len(sent))
    values = Counter(record.value.decode() for record in records)
    duplicates = {value: n for value, n in values.items() if n > 1}
    expected = {f"out-{value}" for value in sent}
    missing = expected - set(values)
    unexpected = set(values) - expected
    assert not duplicates, f"{len(duplicates)} duplicated, e.g. {list(duplicates.items())[:5]}"
    assert not missing, f"{len(missing)} missing (gap), e.g. {sorted(missing)[:5]}"
    assert not unexpected, f"unexpected output {sorted(unexpected)[:5]}"
    for record in records:  # keys travel with their values
        number = int(record.value.decode().removeprefix("out-v-"))
        assert record.key == f"k-{number % 17}".encode()


def _read_so_far(query: Any) -> int:
    end = json.loads(query.lastProgress["sources"][0]["endOffset"])
    return sum(offset for partitions in end.values() for offset in partitions.values())


def test_restart_from_checkpoint_while_producers_write(
    spark: Any, flux_cluster: FluxCluster, topic_name: Any, checkpoint: str
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    flux_cluster.create_topic(source, partitions=3)
    flux_cluster.create_topic(sink, partitions=3)
    bootstrap = flux_cluster.bootstrap
    producer = BackgroundProducer(bootstrap, source, count=100_000, per_second=200).start()
    try:
        wait_until(lambda: producer.sent_count() >= 400, 60, "first records")
        first = _run_once(spark, bootstrap, source, sink, checkpoint)
        read_first = _read_so_far(first)
        assert read_first >= 400
        wait_until(lambda: producer.sent_count() >= read_first + 400, 60, "more records")
        # Restarted from its checkpoint while the producer keeps writing.
        second = _run_once(spark, bootstrap, source, sink, checkpoint)
        assert _read_so_far(second) >= read_first + 400
        assert producer.is_running()
    finally:
        sent = producer.stop()
    _run_once(spark, bootstrap, source, sink, checkpoint)  # drain what came last
    _assert_exact_output(flux_cluster, sink, sent)


def _wait_gone(pid: int, timeout_s: float = 60.0) -> None:
    """Wait for a process this test caused to exist (the killed driver's JVM) to exit."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)


def test_driver_killed_between_write_and_commit(
    spark: Any, flux_cluster: FluxCluster, topic_name: Any, checkpoint: str, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    flux_cluster.create_topic(source, partitions=3)
    flux_cluster.create_topic(sink, partitions=3)
    bootstrap = flux_cluster.bootstrap
    crash_batch = 2
    pid_file = tmp_path / "jvm.pid"
    producer = BackgroundProducer(bootstrap, source, count=100_000, per_second=150).start()
    try:
        wait_until(lambda: producer.sent_count() >= 500, 60, "first records")
        driver = subprocess.Popen(
            [
                sys.executable,
                str(CRASH_DRIVER),
                bootstrap,
                source,
                sink,
                checkpoint,
                str(crash_batch),
                str(pid_file),
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "driver.log", "wb"),  # noqa: SIM115
        )
        try:
            returncode = driver.wait(timeout=240)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
        log_tail = (tmp_path / "driver.log").read_text(errors="replace")[-3000:]
        assert returncode == -signal.SIGKILL, log_tail
        if pid_file.exists():
            _wait_gone(int(pid_file.read_text()))
        # The crash point: the batch was planned and written, but committed nowhere.
        offsets_dir = Path(checkpoint, "offsets")
        commits_dir = Path(checkpoint, "commits")
        assert (offsets_dir / str(crash_batch)).exists()
        assert not (commits_dir / str(crash_batch)).exists()
        assert (commits_dir / str(crash_batch - 1)).exists()
        query_id = json.loads(Path(checkpoint, "metadata").read_text())["id"]
        with Admin(bootstrap) as admin:
            batch_marker = admin.committed_offsets(f"flux-spark-sink.{query_id}")
            task_markers = [
                admin.committed_offsets(f"flux-spark-sink.{query_id}.{task}") for task in range(3)
            ]
        assert list(batch_marker.values()) == [crash_batch]  # batches 0..crash-1 committed
        assert [crash_batch + 1] in [list(m.values()) for m in task_markers]
        # Restart from the checkpoint in another driver (this process) while producing.
        _run_once(spark, bootstrap, source, sink, checkpoint, max_offsets=5000)
        assert producer.is_running()
    finally:
        sent = producer.stop()
    _run_once(spark, bootstrap, source, sink, checkpoint, max_offsets=5000)
    _assert_exact_output(flux_cluster, sink, sent)


def test_task_killed_mid_write_leaves_one_copy_for_read_committed_readers(
    flux_cluster: FluxCluster, topic_name: Any, checkpoint: str, tmp_path: Path
) -> None:
    """A sink task's Python worker SIGKILLed after some of its rows reached the log, before its
    transaction committed: Spark retries the task, the retry fences the dead attempt (its
    transaction is aborted), and a read_committed reader of the output sees every row once,
    while a read_uncommitted one also sees the dead attempt's rows."""

    source, sink = topic_name("in"), topic_name("out")
    flux_cluster.create_topic(source, partitions=3)
    flux_cluster.create_topic(sink, partitions=3)
    bootstrap = flux_cluster.bootstrap
    sent = [f"v-{n}" for n in range(600)]
    with Producer(bootstrap) as producer:
        producer.send(source, [Message(value, key=f"k-{n % 17}") for n, value in enumerate(sent)])
    flag = tmp_path / "killed"
    driver = subprocess.Popen(
        [sys.executable, str(TASK_CRASH_DRIVER), bootstrap, source, sink, checkpoint, str(flag)],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "driver.log", "wb"),  # noqa: SIM115
    )
    try:
        returncode = driver.wait(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    log_tail = (tmp_path / "driver.log").read_text(errors="replace")[-3000:]
    assert returncode == 0, log_tail
    assert flag.exists(), "no task was killed"

    def read(isolation: str, at_least: int) -> list[str]:
        """What ``isolation`` reads once it holds ``at_least`` values (or after 30 s), and
        one poll more."""
        values: list[str] = []
        with Consumer(bootstrap, read_old=True, isolation_level=isolation) as consumer:
            consumer.assign([(sink, p) for p in range(3)])
            deadline = time.monotonic() + 30
            while len(values) < at_least and time.monotonic() < deadline:
                values += [r.value.decode() for r in consumer.poll(timeout_s=0.5)]
            values += [r.value.decode() for r in consumer.poll(timeout_s=1.0)]
        return values

    committed = read("read_committed", len(sent))
    assert sorted(committed) == sorted(f"out-{value}" for value in sent)
    # The dead attempt wrote some rows: a read_uncommitted reader gets more than every row
    # once (reading on until it does: stopping at len(sent) could stop before them).
    assert len(read("read_uncommitted", len(sent) + 1)) > len(sent)


def test_source_leader_killed_mid_query(
    spark: Any, flux_cluster: FluxCluster, topic_name: Any, checkpoint: str
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    flux_cluster.create_topic(source, partitions=3)
    flux_cluster.create_topic(sink, partitions=3)
    bootstrap = flux_cluster.bootstrap
    producer = BackgroundProducer(bootstrap, source, count=3000, per_second=600).start()
    query = _query(
        spark, bootstrap, source, sink, checkpoint, available_now=False, max_offsets=1000
    )
    victim = None
    try:
        wait_until(
            lambda: query.lastProgress and query.lastProgress["numInputRows"] > 0,
            120,
            "the query's first batch",
        )
        victim = flux_cluster.leader_of(source, 0)
        victim.kill()  # SIGKILL
        sent = producer.join(180)
        assert len(sent) == 3000
        # Count committed output records: the high watermarks also count the transaction
        # markers and the rows of a micro-batch still open (which query.stop() below aborts),
        # so they reach len(sent) before the query has caught up.
        output: set[str] = set()
        with Consumer(bootstrap, read_old=True, isolation_level="read_committed") as reader:
            reader.assign([(sink, p) for p in range(3)])
            wait_until(
                lambda: (
                    output.update(r.value.decode() for r in reader.poll(timeout_s=0.5))
                    or len(output) >= len(sent)
                ),
                180,
                "the query to catch up after failover",
            )
        assert query.isActive and query.exception() is None
    finally:
        producer.stop()
        query.stop()
        if victim is not None and not victim.is_running():
            victim.start()
            victim.wait_ready()
    _assert_exact_output(flux_cluster, sink, sent)


def test_new_partitions_and_topics_are_picked_up_within_read_limits(
    spark: Any, flux_cluster: FluxCluster, topic_name: Any, checkpoint: str
) -> None:
    prefix = topic_name("pattern")
    first, second, sink = f"{prefix}-a", f"{prefix}-b", topic_name("out")
    flux_cluster.create_topic(first, partitions=2)
    flux_cluster.create_topic(sink, partitions=2)
    bootstrap = flux_cluster.bootstrap
    with Producer(bootstrap) as producer:
        producer.send(first, [Message(f"v-{n}", key=f"k-{n % 17}") for n in range(100)])
    query = _run_once(
        spark, bootstrap, f"{prefix}-.*", sink, checkpoint, max_offsets=30, pattern=True
    )
    rows = [p["numInputRows"] for p in query.recentProgress]
    assert sum(rows) == 100 and max(rows) <= 30, rows
    flux_cluster.create_topic(second, partitions=1)
    with Admin(bootstrap) as admin:
        admin.create_partitions(first, 3)
    with Producer(bootstrap) as producer:
        producer.send(
            first, [Message(f"v-{n}", key=f"k-{n % 17}", partition=2) for n in range(100, 150)]
        )
        producer.send(second, [Message(f"v-{n}", key=f"k-{n % 17}") for n in range(150, 200)])
    _run_once(spark, bootstrap, f"{prefix}-.*", sink, checkpoint, max_offsets=1000, pattern=True)
    _assert_exact_output(flux_cluster, sink, [f"v-{n}" for n in range(200)])
