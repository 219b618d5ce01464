"""Log compaction: the cleaner's own speed and memory, and what a busy cleaner costs producers.
Prints one JSON object on stdout (progress goes to stderr).

``cleaner`` (storage level, no network, no broker): a ``PartitionLog`` in a temporary directory
(``cleanup.policy=compact``, ``segment.bytes`` 64 MiB, ``--segment-bytes``) gets ``--records``
records (1,000,000) whose keys are drawn uniformly at random (seeded) from ``--keys`` keys
(10,000: ``key-00000042``) with ``--value-bytes`` values (100; slices of a random hex-text
pool, so a codec compresses them about 2:1), appended as batches of ``--batch-records`` records
(500) built by ``flux.protocol.records.build_batch`` the way a Kafka client batches them
(``--compression``, default none). The active segment is rolled, so the whole log is
cleanable. Then one full clean, as the broker's cleaner runs it but unthrottled:
``plan_clean`` with ``min.cleanable.dirty.ratio`` 0, ``LogCleaner(RECORD_CODEC,
dedupe_buffer_bytes=--dedupe-buffer-bytes (64 MiB, the node default))``, ``.clean()`` (the map
pass and the rewrite, which fsyncs the cleaned segments), then ``install_cleaned`` timed on its
own. The clean runs in a child process (this script with ``--child``) that opens the log
afresh, so its memory figures are the clean's alone:

- ``memory.peak_rss_growth_mb``: the process's peak RSS during ``clean()`` minus its RSS just
  before it. The peak is VmHWM from ``/proc/self/status`` after resetting it to the current
  RSS (``echo 5 > /proc/self/clear_refs``); where that reset is refused, ``ru_maxrss`` after
  the clean minus the RSS before (``memory.method`` says which);
- ``memory.tracemalloc_peak_mb`` (with ``--tracemalloc``): the peak of Python allocations
  (``tracemalloc``) during a second clean of a copy of the same log, in another child; that
  clean is about 9 times slower (tracing every allocation: 91 s for the default log) and its
  time is not reported as a speed.

Reported: log bytes and records before and after (records after are counted by reading the
cleaned log back, and must equal the number of distinct keys), ``map_s`` (the map pass alone),
``clean_s`` (map + rewrite), ``install_s``, throughput in MB/s (10^6 bytes) of log bytes per
second of ``clean_s`` and of bytes read + written (the map pass reads the dirty part once and
the rewrite reads everything again: ``io_read_bytes`` counts both, as
``flux_log_cleaner_read_bytes_total`` does), and the dedupe map's
entry count. The log files were just written, so they are most likely read from the page cache.

``produce_while_cleaning`` (real nodes, ``--nodes`` 1, or e.g. ``1,3``): for each cluster size,
two fresh local clusters (``flux.cluster.launcher.local_cluster_configs``, data on disk,
``log_level = "WARNING"``), one with the cleaner off (node config ``cleaner.enable = false``:
idle) and one with it on (``cleaner.backoff_ms = 100``: busy); everything else is the same.
Each gets two compacted topics (``cleanup.policy=compact``, ``segment.bytes``
``--topic-segment-bytes`` 4 MiB, replication factor = nodes, ``min.insync.replicas``
min(2, nodes)), both created with ``min.compaction.lag.ms`` one hour, so nothing is cleanable:

- ``background`` (``--background-partitions`` 8) is filled with ``--dirty-records``
  (1,000,000) 100-byte records keyed round robin over ``--keys`` keys, by a producer of its
  own whose batches are at most a quarter of a segment (``batch.size``), so that every
  partition holds closed segments whatever the timing (one batch per partition, which a
  producer that queued the whole fill before its first metadata answer would send, would all
  sit in the active segment, which is never cleaned); at the start of the
  window its ``min.compaction.lag.ms`` is set to 0 (IncrementalAlterConfigs), which makes all
  its closed segments cleanable at once. Several partitions, so that the cleaner installs
  several cleans during the window (each partition is one clean) rather than one long one;
- ``measured`` (``--partitions`` 1) keeps its hour of lag, so the cleaner never touches it:
  what is measured is the cost of the cleaner working on other logs of the same broker (its
  worker process, at a lower priority). For ``--seconds`` (10) seconds it receives 100-byte records
  keyed round robin over ``--keys`` keys from confluent-kafka (``acks=all``, ``linger.ms=5``,
  ``batch.size=1000000``, at most 100,000 records queued, no idempotence), then ``flush()``.
  ``records_per_s`` is the records delivered over the time from the first ``produce()`` to the
  end of ``flush()``; every delivery must succeed.

The nodes' ``/metrics`` are read (summed over nodes) just before the window and just after the
flush: ``cleaner.read_bytes``, ``written_bytes``, ``cleans``, ``removed_records`` and
``busy_s`` (the ``flux_log_cleaner_seconds`` histogram sum) are their growth during the window.
These counters move when a clean is installed, so a clean still running when the window ends
is not in them (nothing was cleanable before the window, so ``busy_s`` is a lower bound of the
cleaner's busy time in it). ``cleaner.read_bytes_grew`` must be true for the busy cluster (a
warning on stderr otherwise); ``cleaner.cleaned_eventually`` says whether the busy cluster's
cleaner installed a clean by up to ``CLEAN_WAIT_S`` after the window (the cleaner works, even
where a loaded machine is too slow for the window). ``busy_vs_idle`` is busy records/s over
idle records/s.

    .venv/bin/python benchmarks/compaction.py [--records 1000000] [--keys 10000]
        [--value-bytes 100] [--batch-records 500] [--compression none|gzip|snappy|lz4|zstd]
        [--segment-bytes 67108864] [--dedupe-buffer-bytes 67108864] [--tracemalloc]
        [--nodes 1[,3]] [--seconds 10] [--partitions 1] [--dirty-records 1000000]
        [--background-partitions 8] [--topic-segment-bytes 4194304]
        [--skip cleaner|produce] [--quick] [--out FILE]
    .venv/bin/python benchmarks/compaction.py --quick    # tiny sizes, a few seconds

``--quick``: 20,000 records over 500 keys in 256 KiB segments; a 1.5 s window, 20,000 dirty
records in 64 KiB topic segments; explicit options still win (about 20 s, most of it starting
the two nodes). The default sizes take about 2 minutes on the 2-core development machine. ``--out FILE`` also writes the
JSON there. Every node is stopped and every temporary directory removed at the end, also on
failure.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flux.cluster.compaction.codec import RECORD_CODEC  # noqa: E402
from flux.cluster.launcher import NodeProcess, local_cluster_configs  # noqa: E402
from flux.protocol.compression import Compression  # noqa: E402
from flux.protocol.records import build_batch, iter_batches  # noqa: E402
from flux.storage import LogConfig, PartitionLog  # noqa: E402
from flux.storage.compaction import LogCleaner, plan_clean  # noqa: E402

MB = 1_000_000
#: How long the busy cluster may take, after the window, to install its first clean.
CLEAN_WAIT_S = 60.0
MIB = 1 << 20
DEFAULTS = {
    "records": 1_000_000,
    "keys": 10_000,
    "segment_bytes": 64 * MIB,
    "seconds": 10.0,
    "dirty_records": 1_000_000,
    "topic_segment_bytes": 4 * MIB,
}
QUICK = {
    "records": 20_000,
    "keys": 500,
    "segment_bytes": 256 * 1024,
    "seconds": 1.5,
    "dirty_records": 20_000,
    "topic_segment_bytes": 64 * 1024,
}
SEED = 20261201
VALUE_POOL_BYTES = 1 << 16
PRODUCE_RECORD_BYTES = 100
#: librdkafka's queue bound: enough to keep the broker busy, small enough that the flush at the
#: end of a window takes well under a second.
QUEUE_RECORDS = 100_000
#: min.compaction.lag.ms of both topics (nothing cleanable); the background topic's is set to 0
#: when the window starts.
HOLD_LAG_MS = 3_600_000
# Upper bounds on waiting (seconds).
CHILD_TIMEOUT_S = 3600
FLUSH_TIMEOUT_S = 300
TOPIC_READY_TIMEOUT_S = 60
METRICS = {
    "read_bytes": "flux_log_cleaner_read_bytes_total",
    "written_bytes": "flux_log_cleaner_written_bytes_total",
    "cleans": "flux_log_cleaner_cleans_total",
    "removed_records": "flux_log_cleaner_removed_records_total",
    "errors": "flux_log_cleaner_errors_total",
    "busy_s": "flux_log_cleaner_seconds_sum",
}


def _log(message: str) -> None:
    print(f"[compaction {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# --- cleaner: the storage-level clean ---------------------------------------------------------


def _log_config(segment_bytes: int) -> LogConfig:
    return LogConfig(
        segment_bytes=segment_bytes,
        cleanup_delete=False,
        cleanup_compact=True,
        min_cleanable_dirty_ratio=0.0,
    )


def build_log(directory: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Append ``args.records`` keyed records as client-sized batches; roll the active segment."""
    rng = random.Random(SEED)
    keys = [b"key-%08d" % index for index in range(args.keys)]
    pool = os.urandom(VALUE_POOL_BYTES // 2).hex().encode()
    starts = range(0, len(pool) - args.value_bytes, 7)
    compression = Compression[args.compression.upper()]
    used: set[int] = set()
    log = PartitionLog.open(directory, _log_config(args.segment_bytes))
    started = time.perf_counter()
    try:
        timestamp_ms = _now_ms()
        for first in range(0, args.records, args.batch_records):
            count = min(args.batch_records, args.records - first)
            indexes = rng.choices(range(args.keys), k=count)
            used.update(indexes)
            offsets = rng.choices(starts, k=count)
            batch = [
                (keys[index], pool[at : at + args.value_bytes], (), None)
                for index, at in zip(indexes, offsets, strict=True)
            ]
            log.append(build_batch(batch, base_timestamp_ms=timestamp_ms, compression=compression))
        log.roll()
        figures = {
            "log_bytes": log.size_bytes,
            "segments": log.segment_count - 1,  # closed ones; the rolled active one is empty
            "log_end_offset": log.log_end_offset,
        }
    finally:
        log.close()
    figures["distinct_keys"] = len(used)
    figures["build_s"] = round(time.perf_counter() - started, 3)
    return figures


def _count_records(log: PartitionLog) -> int:
    """Records in the log, read back through ``PartitionLog.read`` (batch headers only)."""
    count = 0
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 8 * MIB)
        moved = offset
        for header, _batch in iter_batches(data):
            count += header.records_count
            moved = header.base_offset + header.last_offset_delta + 1
        if moved <= offset:
            raise RuntimeError(f"reading the cleaned log back made no progress at {offset}")
        offset = moved
    return count


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where refused."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return _status_kb("VmHWM") <= _status_kb("VmRSS") + 64


def _timed_map_pass(cleaner: LogCleaner, phases: dict[str, float]) -> None:
    """Time the map pass on its own by wrapping the cleaner's private ``_map`` (a benchmark may
    look inside; if the method is renamed, ``map_s`` is null and the rest still runs)."""
    original = getattr(cleaner, "_map", None)
    if original is None:
        return

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            phases["map_s"] = time.perf_counter() - started

    cleaner._map = timed  # type: ignore[method-assign]


def child_clean(directory: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One full clean of the log in ``directory`` and its install, in this (child) process."""
    log = PartitionLog.open(directory, _log_config(args.segment_bytes))
    try:
        before = {"log_bytes": log.size_bytes, "segments": log.segment_count - 1}
        view = log.cleaner_view()
        plan = plan_clean(view, log.log_end_offset, _now_ms())
        if plan is None:
            raise RuntimeError("nothing to clean: the log has no closed segment")
        cleaner = LogCleaner(RECORD_CODEC, dedupe_buffer_bytes=args.dedupe_buffer_bytes)
        phases: dict[str, float] = {}
        _timed_map_pass(cleaner, phases)
        gc.collect()
        if args.child_tracemalloc:
            tracemalloc.start()
            traced_before = tracemalloc.get_traced_memory()[0]
        rss_before_kb = _status_kb("VmRSS")
        maxrss_before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        reset = _reset_peak_rss()
        started = time.perf_counter()
        result = cleaner.clean(view, plan)
        clean_s = time.perf_counter() - started
        peak_kb = _status_kb("VmHWM") if reset else None
        maxrss_after_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        memory: dict[str, Any] = {}
        if args.child_tracemalloc:
            traced_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            memory["tracemalloc_peak_mb"] = round((traced_peak - traced_before) / MIB, 2)
        else:
            peak_growth_kb = (peak_kb if reset else maxrss_after_kb) - rss_before_kb
            memory = {
                "method": (
                    "VmHWM reset via /proc/self/clear_refs, peak minus VmRSS before the clean"
                    if reset
                    else "ru_maxrss after the clean minus VmRSS before it"
                ),
                "rss_before_mb": round(rss_before_kb / 1024, 2),
                "peak_rss_growth_mb": round(peak_growth_kb / 1024, 2),
                "ru_maxrss_before_mb": round(maxrss_before_kb / 1024, 2),
                "ru_maxrss_after_mb": round(maxrss_after_kb / 1024, 2),
            }
        started = time.perf_counter()
        if not log.install_cleaned(result):
            raise RuntimeError("install_cleaned refused the clean (the log changed?)")
        install_s = time.perf_counter() - started
        after_bytes = log.size_bytes
        records_after = _count_records(log)
        segments_after = log.segment_count - 1
    finally:
        log.close()
    map_s = phases.get("map_s")
    io_read = result.bytes_read  # the map pass (the dirty part) and the rewrite (everything)
    return {
        "log_bytes_before": before["log_bytes"],
        "log_bytes_after": after_bytes,
        "segments_before": before["segments"],
        "segments_after": segments_after,
        "records_before": result.records_read,
        "records_after": records_after,
        "records_removed": result.records_removed,
        "map_entries": result.map_entries,
        "cleaned_through": result.cleaned_through,
        "map_s": None if map_s is None else round(map_s, 3),
        "rewrite_s": None if map_s is None else round(clean_s - map_s, 3),
        "clean_s": round(clean_s, 3),
        "install_s": round(install_s, 4),
        "result_bytes_read": result.bytes_read,
        "result_bytes_written": result.bytes_written,
        "io_read_bytes": io_read,
        "log_mb_per_s": round(before["log_bytes"] / clean_s / MB, 1),
        "read_written_mb_per_s": round((io_read + result.bytes_written) / clean_s / MB, 1),
        "memory": memory,
    }


def _run_child(directory: Path, args: argparse.Namespace, *, trace: bool) -> dict[str, Any]:
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        str(directory),
        "--segment-bytes",
        str(args.segment_bytes),
        "--dedupe-buffer-bytes",
        str(args.dedupe_buffer_bytes),
    ]
    if trace:
        command.append("--child-tracemalloc")
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, cwd=ROOT, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"the clean's child process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def cleaner_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="flux-compaction-log-") as workdir:
        directory = Path(workdir) / "table-0"
        _log(f"building a log of {args.records} records over {args.keys} keys")
        built = build_log(directory, args)
        _log(
            f"built {built['log_bytes'] / MB:.1f} MB in {built['segments']} segments "
            f"in {built['build_s']} s"
        )
        copy = Path(workdir) / "copy-0"
        if args.tracemalloc:
            shutil.copytree(directory, copy)
        _log("cleaning (child process)")
        figures = _run_child(directory, args, trace=False)
        _log(f"cleaned in {figures['clean_s']} s, install {figures['install_s']} s")
        if figures["records_after"] != built["distinct_keys"]:
            raise RuntimeError(
                f"{figures['records_after']} records survived, expected one per key "
                f"({built['distinct_keys']})"
            )
        if args.tracemalloc:
            _log("cleaning a copy under tracemalloc (child process)")
            traced = _run_child(copy, args, trace=True)
            figures["memory"]["tracemalloc_peak_mb"] = traced["memory"]["tracemalloc_peak_mb"]
            figures["memory"]["tracemalloc_clean_s"] = traced["clean_s"]
    return {
        "records": args.records,
        "keys": args.keys,
        "distinct_keys": built["distinct_keys"],
        "value_bytes": args.value_bytes,
        "batch_records": args.batch_records,
        "compression": args.compression,
        "segment_bytes": args.segment_bytes,
        "dedupe_buffer_bytes": args.dedupe_buffer_bytes,
        "build_s": built["build_s"],
        **figures,
    }


# --- produce while cleaning: real nodes --------------------------------------------------------


def _metrics(nodes: list[NodeProcess]) -> dict[str, float]:
    """The cleaner's counters summed over ``nodes``."""
    totals = dict.fromkeys(METRICS, 0.0)
    for node in nodes:
        url = f"http://{node.ready['broker_http']}/metrics"
        with urllib.request.urlopen(url, timeout=30) as reply:
            text = reply.read().decode()
        for name, metric in METRICS.items():
            match = re.search(rf"^{metric} ([0-9.e+-]+)$", text, re.M)
            totals[name] += float(match.group(1)) if match else 0.0
    return totals


def _log_why_no_clean(nodes: list[NodeProcess], bootstrap: str, topic: str) -> None:
    """What tells a starved cleaner from one that saw nothing to clean: the topic's
    min.compaction.lag.ms as the brokers describe it, each node's child processes (the
    cleaner's worker: CPU seconds and niceness from ``/proc``) and the end of each node's log."""
    from confluent_kafka.admin import ConfigResource

    try:
        resource_ = ConfigResource(ConfigResource.Type.TOPIC, topic)
        admin = _admin(bootstrap)  # held until the result is in: a dropped client cancels it
        entries = admin.describe_configs([resource_])[resource_].result(timeout=30)
        _log(f"  {topic} min.compaction.lag.ms = {entries['min.compaction.lag.ms'].value}")
    except Exception as error:  # noqa: BLE001 - a diagnostic must not hide the figures
        _log(f"  describing {topic} failed: {error}")
    ticks = os.sysconf("SC_CLK_TCK")
    for node in nodes:
        children: list[str] = []
        pid = node.pid
        try:
            child_pids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            child_pids = []
        for child in child_pids:
            try:
                fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            cpu_s = (int(fields[11]) + int(fields[12])) / ticks
            children.append(f"pid {child} cpu {cpu_s:.2f} s nice {fields[16]}")
        _log(f"  node {node.node_id}: children {children or 'none'}")
        try:
            tail = node.log_path.read_text(errors="replace").splitlines()[-15:]
        except OSError:
            tail = []
        for line in tail:
            _log(f"    {line}")


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _create_topics(
    bootstrap: str, topics: dict[str, tuple[int, dict[str, str]]], nodes: int
) -> None:
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)
    new = [
        NewTopic(name, num_partitions=partitions, replication_factor=nodes, config=config)
        for name, (partitions, config) in topics.items()
    ]
    for future in admin.create_topics(new, operation_timeout=30).values():
        future.result(timeout=60)
    deadline = time.monotonic() + TOPIC_READY_TIMEOUT_S
    for name, (partitions, _config) in topics.items():
        while True:
            meta = admin.list_topics(name, timeout=10).topics.get(name)
            if (
                meta is not None
                and meta.error is None
                and len(meta.partitions) == partitions
                and all(p.leader >= 0 and len(p.isrs) == nodes for p in meta.partitions.values())
            ):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name} has no leader and full ISR everywhere")
            time.sleep(0.1)


def _set_topic_config(bootstrap: str, topic: str, name: str, value: str) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    resource_ = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)],
    )
    admin = _admin(bootstrap)  # held until the result is in: a dropped client cancels it
    admin.incremental_alter_configs([resource_])[resource_].result(timeout=30)


def _producer(bootstrap: str, batch_bytes: int = 1_000_000) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": batch_bytes,
            "queue.buffering.max.messages": QUEUE_RECORDS,
            "queue.buffering.max.kbytes": 1_000_000,
            "enable.idempotence": False,
        }
    )


def _close(producer: Any) -> None:
    """Drop what is still queued and release the client (``close()`` is newer than 2.0)."""
    producer.purge()
    close = getattr(producer, "close", None)
    if close is not None:
        close()


class _Deliveries:
    def __init__(self) -> None:
        self.ok = 0
        self.errors = 0
        self.first_error: str | None = None

    def __call__(self, error: Any, _message: Any) -> None:
        if error is None:
            self.ok += 1
        else:
            self.errors += 1
            if self.first_error is None:
                self.first_error = str(error)

    def check(self, remaining: int, what: str) -> None:
        if remaining or self.errors:
            raise RuntimeError(
                f"{what}: {self.ok} delivered, {self.errors} failed (first: {self.first_error}),"
                f" {remaining} undelivered"
            )


def _produce(
    producer: Any, topic: str, keys: list[bytes], *, records: int, seconds: float
) -> tuple[int, float]:
    """Produce keyed 100-byte records round robin over ``keys`` until ``records`` are sent or
    ``seconds`` have passed, then flush. Returns (records sent, seconds until flushed)."""
    payload = os.urandom(PRODUCE_RECORD_BYTES)
    deliveries = _Deliveries()
    produce_one = producer.produce
    poll = producer.poll
    key_count = len(keys)
    clock = time.perf_counter
    started = clock()
    deadline = started + seconds
    sent = 0
    while sent < records:
        # Check the clock every 1,000 records: cheap next to produce() itself.
        if sent % 1000 == 0:
            poll(0)
            if clock() >= deadline:
                break
        key = keys[sent % key_count]
        try:
            produce_one(topic, payload, key, on_delivery=deliveries)
        except BufferError:
            poll(0.01)
            continue
        sent += 1
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    elapsed = clock() - started
    deliveries.check(remaining, f"producing to {topic}")
    return sent, elapsed


def _cluster_run(args: argparse.Namespace, nodes_count: int, *, cleaner: bool) -> dict[str, Any]:
    mode = "busy" if cleaner else "idle"
    cleaner_config = {"enable": True, "backoff_ms": 100} if cleaner else {"enable": False}
    extra = {"node": {"log_level": "WARNING"}, "cleaner": cleaner_config}
    keys = [b"key-%08d" % index for index in range(args.keys)]
    common = {
        "cleanup.policy": "compact",
        "segment.bytes": str(args.topic_segment_bytes),
        "min.insync.replicas": str(min(2, nodes_count)),
        "min.compaction.lag.ms": str(HOLD_LAG_MS),
    }
    suffix = uuid.uuid4().hex[:6]
    measured, background = f"measured-{suffix}", f"background-{suffix}"
    with tempfile.TemporaryDirectory(prefix="flux-compaction-cluster-") as workdir:
        nodes = local_cluster_configs(Path(workdir), nodes_count, extra=extra)
        producer = None
        try:
            for node in nodes:
                node.start()
            for node in nodes:
                node.wait_ready()
            bootstrap = ",".join(node.bootstrap_servers for node in nodes)
            _create_topics(
                bootstrap,
                {
                    measured: (args.partitions, common),
                    background: (args.background_partitions, common),
                },
                nodes_count,
            )
            _log(f"{nodes_count} node(s), cleaner {mode}: filling {background}")
            filler = _producer(bootstrap, batch_bytes=max(1024, args.topic_segment_bytes // 4))
            try:
                sent, fill_s = _produce(
                    filler, background, keys, records=args.dirty_records, seconds=float("inf")
                )
            finally:
                _close(filler)
            producer = _producer(bootstrap)
            _log(f"filled {sent} records in {fill_s:.1f} s; warming up {measured}")
            _produce(producer, measured, keys, records=1000, seconds=float("inf"))
            before = _metrics(nodes)
            _set_topic_config(bootstrap, background, "min.compaction.lag.ms", "0")
            _log(f"producing to {measured} for {args.seconds} s")
            sent, elapsed = _produce(producer, measured, keys, records=2**62, seconds=args.seconds)
            after = _metrics(nodes)
            # Whether the cleaner works at all, window or not (a loaded machine may not finish a
            # clean within a short window): wait for its first installed clean, bounded.
            eventually = after
            deadline = time.monotonic() + CLEAN_WAIT_S
            while cleaner and eventually["read_bytes"] <= before["read_bytes"]:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
                eventually = _metrics(nodes)
            if cleaner and eventually["read_bytes"] <= before["read_bytes"]:
                _log(f"WARNING: no clean installed within {CLEAN_WAIT_S:g} s after the window")
                _log_why_no_clean(nodes, bootstrap, background)
        finally:
            if producer is not None:
                _close(producer)  # before the nodes go: no reconnect attempts meanwhile
            for node in nodes:
                node.stop()
    grown = {name: after[name] - before[name] for name in METRICS}
    figures = {
        "records": sent,
        "seconds": round(elapsed, 3),
        "records_per_s": round(sent / elapsed),
        "mb_per_s": round(sent * PRODUCE_RECORD_BYTES / elapsed / MB, 1),
        "background_fill_s": round(fill_s, 2),
        "cleaner": {
            "read_bytes": int(grown["read_bytes"]),
            "written_bytes": int(grown["written_bytes"]),
            "cleans": int(grown["cleans"]),
            "removed_records": int(grown["removed_records"]),
            "errors": int(grown["errors"]),
            "busy_s": round(grown["busy_s"], 3),
            "read_bytes_grew": grown["read_bytes"] > 0,
            "cleaned_eventually": eventually["read_bytes"] > before["read_bytes"],
        },
    }
    _log(f"cleaner {mode}: {figures['records_per_s']} records/s, cleaner {figures['cleaner']}")
    if cleaner and not figures["cleaner"]["read_bytes_grew"]:
        _log("WARNING: the cleaner installed no clean during the window; the busy figure is void")
    return figures


def produce_while_cleaning(args: argparse.Namespace, nodes_count: int) -> dict[str, Any]:
    idle = _cluster_run(args, nodes_count, cleaner=False)
    busy = _cluster_run(args, nodes_count, cleaner=True)
    return {
        "nodes": nodes_count,
        "replication_factor": nodes_count,
        "min_insync_replicas": min(2, nodes_count),
        "acks": "all",
        "linger_ms": 5,
        "partitions": args.partitions,
        "keys": args.keys,
        "record_bytes": PRODUCE_RECORD_BYTES,
        "window_s": args.seconds,
        "dirty_records": args.dirty_records,
        "background_partitions": args.background_partitions,
        "topic_segment_bytes": args.topic_segment_bytes,
        "idle": idle,
        "busy": busy,
        "busy_vs_idle": round(busy["records_per_s"] / idle["records_per_s"], 3),
    }


# --- command line --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, help="records in the cleaned log (1,000,000)")
    parser.add_argument("--keys", type=int, help="distinct keys (10,000)")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batch-records", type=int, default=500)
    parser.add_argument(
        "--compression", default="none", choices=[c.name.lower() for c in Compression]
    )
    parser.add_argument("--segment-bytes", type=int, help="of the cleaned log (64 MiB)")
    parser.add_argument("--dedupe-buffer-bytes", type=int, default=64 * MIB)
    parser.add_argument(
        "--tracemalloc", action="store_true", help="also clean a copy under tracemalloc"
    )
    parser.add_argument("--nodes", default="1", help="cluster sizes, comma separated (1)")
    parser.add_argument("--seconds", type=float, help="produce window (10)")
    parser.add_argument("--partitions", type=int, default=1, help="of the measured topic")
    parser.add_argument("--dirty-records", type=int, help="background records (1,000,000)")
    parser.add_argument("--background-partitions", type=int, default=8)
    parser.add_argument("--topic-segment-bytes", type=int, help="segment.bytes (4 MiB)")
    parser.add_argument("--skip", choices=["cleaner", "produce"], help="leave one part out")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a few seconds")
    parser.add_argument("--out", help="also write the JSON to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # clean this log directory, print JSON
    parser.add_argument("--child-tracemalloc", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name, default in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    args.node_counts = [int(part) for part in str(args.nodes).split(",") if part]
    return args


def main() -> int:
    args = parse_args()
    if args.child:
        print(json.dumps(child_clean(Path(args.child), args)))
        return 0
    started = time.monotonic()
    table: dict[str, Any] = {
        "benchmark": "compaction",
        "quick": args.quick,
        "machine": {"cpus": os.cpu_count()},
    }
    if args.skip != "cleaner":
        table["cleaner"] = cleaner_benchmark(args)
    if args.skip != "produce":
        table["produce_while_cleaning"] = [
            produce_while_cleaning(args, count) for count in args.node_counts
        ]
    table["total_s"] = round(time.monotonic() - started, 1)
    text = json.dumps(table, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
