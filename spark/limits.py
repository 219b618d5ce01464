"""Named bounds and defaults of ``flux.spark`` (STYLE.md: limits on everything), kept together.

Each reader and writer bound is an option a user may lower or raise within the range given
here; ``flux.spark.options`` checks every value against it.
"""

from __future__ import annotations

__all__ = [
    "ARROW_BATCH_ROWS_MAX",
    "AVRO_WRITER_SCHEMAS_MAX",
    "FETCH_BYTES_DEFAULT",
    "FETCH_BYTES_MAX",
    "FETCH_TIMEOUT_MS_DEFAULT",
    "FETCH_TIMEOUT_MS_MAX",
    "FETCH_WAIT_MS",
    "MAX_OFFSETS_PER_TRIGGER_MAX",
    "MAX_RECORDS_PER_PARTITION_DEFAULT",
    "MAX_RECORDS_PER_PARTITION_MAX",
    "METADATA_TIMEOUT_S",
    "MIN_PARTITIONS_MAX",
    "PRODUCER_BATCH_BYTES_DEFAULT",
    "PRODUCER_LINGER_MS_DEFAULT",
    "SEND_CHUNK_ROWS",
    "SINK_MARKER_TOPIC",
    "SUBSCRIBE_TOPICS_MAX",
]

#: At most this many topics in ``subscribe`` (or matched by ``subscribePattern``).
SUBSCRIBE_TOPICS_MAX = 1_000

#: One Spark input partition covers at most this many offsets of one Flux partition: a
#: larger range is split, so a backlog spreads over every core instead of one task.
MAX_RECORDS_PER_PARTITION_DEFAULT = 1_000_000
MAX_RECORDS_PER_PARTITION_MAX = 1 << 40

#: ``minPartitions`` may not exceed this: each Spark input partition is a task (and an object
#: the driver plans and pickles), so more would cost more than it spreads.
MIN_PARTITIONS_MAX = 100_000

#: ``maxOffsetsPerTrigger`` may not exceed this (it is a row count).
MAX_OFFSETS_PER_TRIGGER_MAX = 1 << 40

#: Bytes one Fetch asks for per partition: large enough that a fetch answer turns into an
#: Arrow batch of tens of thousands of rows, small enough that two tasks on a small executor
#: hold only a few of them in memory.
FETCH_BYTES_DEFAULT = 4 << 20
FETCH_BYTES_MAX = 64 << 20
#: A fetch that finds nothing new long-polls this long at the broker.
FETCH_WAIT_MS = 500
#: A task waits at most this long for records its range promises (a new leader's high
#: watermark may lag the old one's for a moment after failover) before declaring data loss.
FETCH_TIMEOUT_MS_DEFAULT = 120_000
FETCH_TIMEOUT_MS_MAX = 3_600_000

#: An Arrow batch handed to Spark holds at most this many rows (a fetch answer is cut).
ARROW_BATCH_ROWS_MAX = 65_536

#: Writer schemas (by schema id) one read task keeps parsed for ``valueFormat=avro``; a task
#: that meets more starts its cache over (each further id costs one registry call).
AVRO_WRITER_SCHEMAS_MAX = 1_000

#: Metadata and offset look-ups from the driver give up after this long (an unreachable
#: cluster is reported within it).
METADATA_TIMEOUT_S = 30.0

#: The writer's producer: it sends whole Arrow batches, so batches fill by size, not time.
PRODUCER_BATCH_BYTES_DEFAULT = 512 << 10
PRODUCER_LINGER_MS_DEFAULT = 5
#: Rows handed to ``AsyncProducer.send`` at once (bounds the Python objects alive per call).
SEND_CHUNK_ROWS = 10_000

#: The one-partition topic whose consumer-group offsets hold the sink's commit markers.
SINK_MARKER_TOPIC = "__flux_spark_sink"
