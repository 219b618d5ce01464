"""The source and the sink on a real Spark standalone cluster (a master and two one-core
workers started from the installed PySpark, ``flux.spark.standalone``): the driver is
``fluxctl pipeline run --master spark://...`` in its own process (this test process holds the
shared local[2] SparkContext, and a process can hold only one), executors are other JVMs on
the workers, reading and writing the shared 3-node Flux cluster.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from flux.sdk import Message, Producer

from .spark_support import FluxCluster, require_spark, wait_until

require_spark()

from flux.spark.standalone import StandaloneCluster, StandaloneWorker  # noqa: E402

from . import standalone_jobs  # noqa: E402
from .test_pipeline import BASE_MS, EVENTS, EXAMPLE, EXPECTED, MINUTE_MS  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("spark")]

JOBS = Path(standalone_jobs.__file__)
#: Every driver waits for both executors before its first job (Spark's standalone default is
#: to start with whatever registered first), so both workers take part.
DRIVER_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
}
DRIVER_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), workers=2) as cluster:
        yield cluster


@pytest.fixture
def cluster(standalone: StandaloneCluster) -> StandaloneCluster:
    """The standalone cluster with two live workers (a test before may have killed one)."""
    standalone.replace_dead_workers()
    return standalone


@contextlib.contextmanager
def _pipeline(
    cluster: StandaloneCluster, args: list[str], log: Path, file: Path = JOBS
) -> Iterator[subprocess.Popen[bytes]]:
    """``fluxctl pipeline run FILE --master <cluster> -- ARGS`` as a driver process logging to
    ``log``; killed on leaving the block if it still runs (a test that failed before waiting
    for it)."""
    # The driver's scratch space in the test's directory (a killed driver leaves it behind).
    settings = {**DRIVER_CONF, **cluster.driver_conf(), "spark.local.dir": str(log.parent)}
    command = [sys.executable, "-m", "flux.cli.main", "pipeline", "run", str(file)]
    command += ["--master", cluster.master_url]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    with open(log, "wb") as log_file:
        driver = subprocess.Popen(
            [*command, "--", *args],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        yield driver
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def _wait_success(driver: subprocess.Popen[bytes], log: Path, cluster: StandaloneCluster) -> None:
    try:
        returncode = driver.wait(timeout=DRIVER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        returncode = None
    output = log.read_text(errors="replace")[-4000:]
    assert returncode == 0, f"driver: {returncode}\n{output}\n{cluster.log_tails(15)}"


def _running(driver: subprocess.Popen[bytes], log: Path) -> bool:
    """True while the driver runs; once it exited, an AssertionError quoting its log (so a wait
    on the driver's progress fails at once instead of at its timeout)."""
    if driver.poll() is not None:
        output = log.read_text(errors="replace")[-4000:]
        raise AssertionError(f"the driver exited with {driver.returncode}:\n{output}")
    return True


def _traces(worker: StandaloneWorker, kind: str) -> set[tuple[int, int, int]]:
    """(stage, partition, attempt) of the tasks ``standalone_jobs`` marked ``kind``
    (``started`` / ``held``) on ``worker``, in any application."""
    found = set()
    for path in worker.work_dir.glob(f"app-*/*/{kind}-*"):
        stage, partition, attempt = path.name.split("-")[1:]
        found.add((int(stage), int(partition), int(attempt)))
    return found


def test_batch_count_by_key_on_two_workers(
    cluster: StandaloneCluster, flux_cluster: FluxCluster, topic_name: Any, tmp_path: Path
) -> None:
    """read -> count per key -> write, 20,000 records: the reads planned on the driver run on
    both workers' executors, and every key's count is exact."""
    source, sink = topic_name("standalone-in"), topic_name("standalone-counts")
    flux_cluster.create_topic(source, partitions=4)
    flux_cluster.create_topic(sink, partitions=2)
    values = [f"v-{n}" for n in range(20_000)]
    expected = Counter(f"k-{n % 17}" for n in range(len(values)))
    with Producer(flux_cluster.bootstrap) as producer:
        producer.send(
            source,
            [Message(v, key=f"k-{n % 17}", partition=n % 4) for n, v in enumerate(values)],
        )
    workers = list(cluster.running_workers())
    before = [_traces(worker, "started") for worker in workers]
    log = tmp_path / "driver.log"
    with _pipeline(cluster, ["count-by-key", flux_cluster.bootstrap, source, sink], log) as driver:
        _wait_success(driver, log, cluster)
    records = flux_cluster.read_all(sink, expected=len(expected))
    counts = {record.key.decode(): int(record.value) for record in records}
    assert counts == expected and len(records) == len(expected)
    # 4 partitions of 5,000 records, read in pieces of at most 2,500 offsets: 8 read tasks,
    # some on each worker.
    read_tasks = [
        _traces(worker, "started") - old for worker, old in zip(workers, before, strict=True)
    ]
    assert all(read_tasks), read_tasks
    assert sum(len(tasks) for tasks in read_tasks) == 8, read_tasks


def test_example_pipeline_on_the_cluster(
    cluster: StandaloneCluster, flux_cluster: FluxCluster, topic_name: Any, tmp_path: Path
) -> None:
    """``examples/pipelines/page_view_counts.py`` (a stateful streaming query: watermark,
    windowed counts) as documented: ``fluxctl pipeline run --master spark://...``."""
    source, sink = topic_name("page-views"), topic_name("page-view-counts")
    flux_cluster.create_topic(source, partitions=3)
    flux_cluster.create_topic(sink, partitions=3)
    with Producer(flux_cluster.bootstrap) as producer:
        producer.send(source, [Message(json.dumps(e), key=e["user"]) for e in EVENTS])
    log = tmp_path / "driver.log"
    arguments = ["--bootstrap", flux_cluster.bootstrap, "--source", source, "--sink-topic", sink]
    arguments += ["--checkpoint", str(tmp_path / "checkpoint"), "--available-now"]
    with _pipeline(cluster, arguments, log, file=EXAMPLE) as driver:
        _wait_success(driver, log, cluster)
    counts = [json.loads(r.value) for r in flux_cluster.read_all(sink, expected=len(EXPECTED))]
    assert len(counts) == len(EXPECTED)
    assert {(c["page"], _minute(c["window_start"]), c["views"]) for c in counts} == EXPECTED


def _minute(timestamp_text: str) -> int:
    parsed = datetime.fromisoformat(timestamp_text.replace("Z", "+00:00"))
    return int((parsed.timestamp() * 1000 - BASE_MS) // MINUTE_MS)


def test_worker_killed_mid_query_its_tasks_rerun_on_the_other_worker(
    cluster: StandaloneCluster, flux_cluster: FluxCluster, topic_name: Any, tmp_path: Path
) -> None:
    """A streaming copy (availableNow, 6 micro-batches of 300 rows) whose Worker JVM, executor
    and Python workers on one machine are SIGKILLed while a task runs there: the task reruns on
    the other worker, the query completes, and read_committed readers of the output see every
    record exactly once."""
    source, sink = topic_name("standalone-in"), topic_name("standalone-out")
    flux_cluster.create_topic(source, partitions=3)
    flux_cluster.create_topic(sink, partitions=3)
    sent = [f"v-{n}" for n in range(1800)]
    with Producer(flux_cluster.bootstrap) as producer:
        producer.send(
            source, [Message(v, key=f"k-{n % 17}", partition=n % 3) for n, v in enumerate(sent)]
        )
    victim, survivor = list(cluster.running_workers())
    checkpoint = tmp_path / "checkpoint"
    log = tmp_path / "driver.log"
    hold = victim.work_dir / standalone_jobs.HOLD
    arguments = ["copy", flux_cluster.bootstrap, source, sink, str(checkpoint)]
    with _pipeline(cluster, arguments, log) as driver:
        try:
            # Mid-query: once the first micro-batch is committed, the victim's next task holds.
            committed = checkpoint / "commits" / "0"
            wait_until(lambda: _running(driver, log) and committed.exists(), 120, "a batch")
            hold.touch()
            held = wait_until(
                lambda: _running(driver, log) and _traces(victim, "held"), 60, "a held task"
            )
            executors = victim.executor_pids()
            assert executors, "no executor on the victim worker"
            assert set(executors) <= set(victim.kill())  # returns once all of them are gone
        finally:
            hold.unlink(missing_ok=True)
        _wait_success(driver, log, cluster)
    ((stage, partition, attempt),) = held
    reruns = {t for t in _traces(survivor, "started") if t[:2] == (stage, partition)}
    assert any(rerun[2] > attempt for rerun in reruns), (held, reruns)
    values = [record.value.decode() for record in flux_cluster.read_all(sink, len(sent))]
    assert sorted(values) == sorted(f"out-{value}" for value in sent)
