"""The broker's Prometheus metrics (``GET /metrics``), on a registry of its own.

Counters and histograms are updated where things happen (requests, push deliveries). Partition
gauges are computed at scrape time from the replicas (``PartitionCollector``), so they never go
stale: log end offset, high watermark, log start offset, ISR size, under-replicated and offline
partitions, memory-topic bytes. Consumer lag is reported by the leader of each partition for
every group (and push subscription, as group ``__flux_push.<id>``) that committed an offset on
it: ``high watermark - committed offset``. The committed offsets are gathered from every broker
just before the scrape (``set_committed``), because each group lives on its own coordinator.

Thread-safety: one owner, the broker's event loop (prometheus-client's own locking makes
concurrent scrapes safe).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from flux.controller.image import MetadataImage
from flux.storage import MemoryLog
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..replication.partition import Partition

__all__ = ["BrokerMetrics", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

# (group, topic, partition) -> committed offset
Committed = dict[tuple[str, str, int], int]


class BrokerMetrics:
    def __init__(
        self,
        *,
        broker_id: int,
        partitions: Callable[[], Iterable[Partition]],
        image: Callable[[], MetadataImage],
        offline_log_dirs: Callable[[], int] = lambda: 0,
        traffic: Callable[[], BrokerTraffic] | None = None,
        controller: Callable[[], dict[str, Any] | None] = lambda: None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        # process_open_fds / process_max_fds, resident memory, CPU seconds, start time: read
        # from /proc at each scrape (nothing on Linux-less systems).
        ProcessCollector(registry=self.registry)
        self.http_requests = Counter(
            "flux_http_requests",
            "HTTP API requests by route, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.http_latency = Histogram(
            "flux_http_request_seconds",
            "HTTP API request latency by route",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.http_forwarded_records = Counter(
            "flux_http_forwarded_records",
            "messages of HTTP produces this broker forwarded to their partition's leader (a "
            "client that sends each message to its leader, as flux.sdk.http does, forwards none)",
            registry=self.registry,
        )
        self.http_malformed_requests = Counter(
            "flux_http_malformed_requests",
            "HTTP requests refused as malformed before reaching any route (answered 400 by "
            "the HTTP parser; the log names one every 10 s at most)",
            registry=self.registry,
        )
        self.kafka_requests = Counter(
            "flux_kafka_requests",
            "Kafka protocol requests by API",
            ["api"],
            registry=self.registry,
        )
        self.kafka_idle_connections_closed = Counter(
            "flux_kafka_idle_connections_closed",
            "Kafka connections closed for having nothing to do for broker.connections_max_idle_ms",
            ["listener"],
            registry=self.registry,
        )
        # Kafka's connection-count per listener; the HTTP port is listener "http-port". Each
        # listener's gauge reads its server (set_function) when scraped.
        self.connections = Gauge(
            "flux_connections",
            "connections open on each listener (each Kafka listener by name, the HTTP port as "
            "http-port, which also carries other brokers' replication and forwarding)",
            ["listener"],
            registry=self.registry,
        )
        self.connections_refused = Counter(
            "flux_connections_refused",
            "connections refused because their listener had broker.max_connections open (closed "
            "on accept on a Kafka listener, answered 503 on the HTTP port)",
            ["listener"],
            registry=self.registry,
        )
        self.gc_pauses = Histogram(
            "flux_gc_pause_seconds",
            "full (generation 2) garbage collections of the node process",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.kafka_latency = Histogram(
            "flux_kafka_request_seconds",
            "Kafka protocol request latency by API",
            ["api"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.push_deliveries = Counter(
            "flux_push_deliveries",
            "push deliveries acknowledged by the subscriber",
            ["subscription", "topic"],
            registry=self.registry,
        )
        self.push_retries = Counter(
            "flux_push_retries",
            "push delivery attempts that failed and were retried",
            ["subscription", "topic"],
            registry=self.registry,
        )
        self.push_failures = Counter(
            "flux_push_failures",
            "push deliveries that exhausted their retries (the subscription became inactive)",
            ["subscription", "topic"],
            registry=self.registry,
        )
        self.push_latency = Histogram(
            "flux_push_delivery_seconds",
            "time from sending a push to its acknowledgement",
            ["kind"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.memory_cleanup_removed = Counter(
            "flux_memory_cleanup_removed_messages",
            "messages removed from memory topics by the cleanup task",
            ["topic"],
            registry=self.registry,
        )
        # The log cleaner (cleanup.policy=compact).
        self.cleaner_cleans = Counter(
            "flux_log_cleaner_cleans", "log cleans installed", registry=self.registry
        )
        self.cleaner_bytes_read = Counter(
            "flux_log_cleaner_read_bytes", "bytes the log cleaner read", registry=self.registry
        )
        self.cleaner_bytes_written = Counter(
            "flux_log_cleaner_written_bytes",
            "bytes the log cleaner wrote",
            registry=self.registry,
        )
        self.cleaner_records_removed = Counter(
            "flux_log_cleaner_removed_records",
            "records the log cleaner removed (superseded or expired tombstones)",
            registry=self.registry,
        )
        self.cleaner_errors = Counter(
            "flux_log_cleaner_errors", "log cleans that failed", registry=self.registry
        )
        self.cleaner_seconds = Histogram(
            "flux_log_cleaner_seconds",
            "time one clean took",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._collector = PartitionCollector(broker_id, partitions, image, offline_log_dirs)
        self.registry.register(self._collector)
        self.registry.register(TrafficCollector(traffic, controller))

    def requests_total(self) -> int:
        """Kafka and HTTP requests this broker has answered since it started."""
        total = 0.0
        for counter in (self.kafka_requests, self.http_requests):
            for family in counter.collect():
                total += sum(s.value for s in family.samples if s.name.endswith("_total"))
        return int(total)

    def set_committed(self, committed: Committed) -> None:
        self._collector.committed = committed

    def render(self) -> bytes:
        return generate_latest(self.registry)


class PartitionCollector(Collector):
    def __init__(
        self,
        broker_id: int,
        partitions: Callable[[], Iterable[Partition]],
        image: Callable[[], MetadataImage],
        offline_log_dirs: Callable[[], int] = lambda: 0,
    ) -> None:
        self._broker_id = broker_id
        self._partitions = partitions
        self._image = image
        self._offline_log_dirs = offline_log_dirs
        self.committed: Committed = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["topic", "partition"]
        end = GaugeMetricFamily("flux_partition_log_end_offset", "log end offset", labels=labels)
        start = GaugeMetricFamily(
            "flux_partition_log_start_offset", "log start offset", labels=labels
        )
        high = GaugeMetricFamily("flux_partition_high_watermark", "high watermark", labels=labels)
        isr = GaugeMetricFamily("flux_partition_isr_size", "in-sync replicas", labels=labels)
        replicas = GaugeMetricFamily("flux_partition_replicas", "replicas", labels=labels)
        under = GaugeMetricFamily(
            "flux_partition_under_replicated",
            "1 if the ISR is smaller than the replicas",
            labels=labels,
        )
        memory = GaugeMetricFamily(
            "flux_memory_topic_bytes", "bytes held by a memory-topic replica", labels=labels
        )
        size = GaugeMetricFamily(
            "flux_partition_log_size_bytes",
            "bytes of the partition's log on its leader (this broker)",
            labels=labels,
        )
        lag = GaugeMetricFamily(
            "flux_consumer_lag",
            "high watermark minus the group's committed offset (reported by the leader)",
            labels=["group", "topic", "partition"],
        )
        leaders = 0
        under_count = 0
        offline_replicas = 0
        led: dict[tuple[str, int], int] = {}
        for partition in list(self._partitions()):
            key = [partition.topic, str(partition.index)]
            offline_replicas += partition.offline
            if isinstance(partition.log, MemoryLog):
                memory.add_metric(key, partition.log.size_bytes)
            if not partition.is_leader:
                continue
            leaders += 1
            end.add_metric(key, partition.log_end_offset)
            start.add_metric(key, partition.log.log_start_offset)
            high.add_metric(key, partition.high_watermark)
            isr.add_metric(key, len(partition.state.isr))
            replicas.add_metric(key, len(partition.state.replicas))
            is_under = len(partition.state.isr) < len(partition.state.replicas)
            under_count += is_under
            under.add_metric(key, 1 if is_under else 0)
            led[(partition.topic, partition.index)] = partition.high_watermark
            size.add_metric(key, partition.log.size_bytes)
        for (group, topic, index), offset in sorted(self.committed.items()):
            high_watermark = led.get((topic, index))
            if high_watermark is not None and offset >= 0:
                lag.add_metric([group, topic, str(index)], max(high_watermark - offset, 0))
        yield from (end, start, high, isr, replicas, under, memory, size, lag)
        totals = GaugeMetricFamily(
            "flux_broker_leader_partitions", "partitions this broker leads", value=leaders
        )
        yield totals
        yield GaugeMetricFamily(
            "flux_broker_under_replicated_partitions",
            "partitions led here whose ISR is smaller than their replicas",
            value=under_count,
        )
        # Kafka's OfflineLogDirectoryCount and OfflineReplicaCount (disk faults).
        yield GaugeMetricFamily(
            "flux_broker_offline_log_dirs",
            "log directories taken offline by an I/O error (ENOSPC, EIO, EROFS)",
            value=self._offline_log_dirs(),
        )
        yield GaugeMetricFamily(
            "flux_broker_offline_replicas",
            "replicas hosted here that are offline because their log directory failed",
            value=offline_replicas,
        )
        offline = sum(
            1
            for topic in self._image().topics.values()
            for state in topic.partitions
            if state.leader < 0
        )
        yield GaugeMetricFamily(
            "flux_cluster_offline_partitions",
            "partitions without a leader (cluster-wide, from this broker's metadata)",
            value=offline,
        )


class BrokerTraffic(Protocol):
    """What ``TrafficCollector`` reads (a ``ReplicaManager``)."""

    traffic: dict[str, list[int]]
    isr_shrinks: int
    isr_expands: int


class TrafficCollector(Collector):
    """Counters of this broker's work per topic (bytes and records appended as leader, bytes
    sent to consumers), its leaders' ISR shrinks and expansions, and, on a controller, its
    role in the quorum (Kafka's ActiveControllerCount, the Raft term and the metadata
    version it applied)."""

    def __init__(
        self,
        traffic: Callable[[], BrokerTraffic] | None,
        controller: Callable[[], dict[str, Any] | None],
    ) -> None:
        self._traffic = traffic
        self._controller = controller

    def collect(self) -> Iterator[Metric]:
        if self._traffic is not None:
            broker = self._traffic()
            families = [
                CounterMetricFamily(name, text, labels=["topic"])
                for name, text in (
                    ("flux_topic_bytes_in", "bytes produced to the topic's partitions led here"),
                    ("flux_topic_messages_in", "records produced to partitions led here"),
                    ("flux_topic_bytes_out", "bytes of the topic sent to consumers from here"),
                )
            ]
            for topic, counts in sorted(broker.traffic.items()):
                for family, count in zip(families, counts, strict=True):
                    family.add_metric([topic], count)
            yield from families
            yield CounterMetricFamily(
                "flux_isr_shrinks", "ISR shrinks committed for partitions led here",
                value=broker.isr_shrinks,
            )  # fmt: skip
            yield CounterMetricFamily(
                "flux_isr_expands", "ISR expansions committed for partitions led here",
                value=broker.isr_expands,
            )  # fmt: skip
        status = self._controller()
        if status is not None:
            yield GaugeMetricFamily(
                "flux_controller_active",
                "1 on the active controller (the Raft leader of the metadata quorum), else 0",
                value=1 if status.get("is_leader") else 0,
            )
            if status.get("raft_term") is not None:
                yield GaugeMetricFamily(
                    "flux_controller_raft_term", "the metadata quorum's Raft term here",
                    value=status["raft_term"],
                )  # fmt: skip
            yield GaugeMetricFamily(
                "flux_controller_metadata_version",
                "the metadata version this controller applied",
                value=status.get("version", 0),
            )
