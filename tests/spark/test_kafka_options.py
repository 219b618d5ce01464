"""Spark Kafka source options beyond ``subscribe``/``startingOffsets``, against the real
cluster: ``assign``, the timestamp options (``startingTimestamp``,
``startingOffsetsByTimestamp``, ``endingTimestamp``, ``endingOffsetsByTimestamp``,
``startingOffsetsByTimestampStrategy``) and ``minPartitions``.

One topic of three partitions holds 30 records per partition with create times set by the
producer: record ``i`` of every partition has timestamp ``BASE + i * 1000`` ms, so a
timestamp maps to a known offset (the first ``i`` whose time is >= it).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from flux.sdk import Message, Producer

from .spark_support import FluxCluster, require_spark

require_spark()

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("spark")]

PARTITIONS = 3
PER_PARTITION = 30
STEP_MS = 1000


class Timed:
    """The produced topic: its name and the create time of record 0."""

    def __init__(self, topic: str, base_ms: int) -> None:
        self.topic = topic
        self.base_ms = base_ms

    def at(self, index: int, extra_ms: int = 0) -> int:
        """The timestamp of record ``index`` (plus ``extra_ms``)."""
        return self.base_ms + index * STEP_MS + extra_ms


@pytest.fixture(scope="module")
def timed(flux_cluster: FluxCluster) -> Timed:
    topic = f"timed-{uuid.uuid4().hex[:8]}"
    # An hour ago, whole seconds: recent enough for any retention, in the past of every clock.
    base_ms = (int(time.time()) - 3600) * 1000
    flux_cluster.create_topic(topic, partitions=PARTITIONS)
    with Producer(flux_cluster.bootstrap) as producer:
        for partition in range(PARTITIONS):
            producer.send(
                topic,
                [
                    Message(
                        f"p{partition}-{i}",
                        partition=partition,
                        timestamp_ms=base_ms + i * STEP_MS,
                    )
                    for i in range(PER_PARTITION)
                ],
            )
    return Timed(topic, base_ms)


def _read(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("flux").option("bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _offsets(frame: Any) -> list[tuple[int, int]]:
    return sorted((row.partition, row.offset) for row in frame.collect())


def _expected(ranges: dict[int, range]) -> list[tuple[int, int]]:
    return sorted(
        (partition, offset) for partition, offsets in ranges.items() for offset in offsets
    )


def _error_text(action: Any) -> str:
    """Everything an error says (PySpark shortens ``str()`` of some of its exceptions)."""
    with pytest.raises(Exception) as caught:
        action()
    error = caught.value
    parts = [str(error), str(getattr(error, "desc", ""))]
    if getattr(error, "cause", None) is not None:
        parts.append(str(error.cause))
    return "\n".join(parts)


def test_records_carry_the_produced_timestamps(
    spark: Any, flux_cluster: FluxCluster, timed: Timed
) -> None:
    rows = _read(spark, flux_cluster.bootstrap, subscribe=timed.topic).collect()
    assert len(rows) == PARTITIONS * PER_PARTITION
    for row in rows:
        assert row.timestampType == 0
        assert round(row.timestamp.timestamp() * 1000) == timed.at(row.offset)


def test_starting_timestamp_starts_every_partition_at_its_first_record_that_late(
    spark: Any, flux_cluster: FluxCluster, timed: Timed
) -> None:
    # between records 10 and 11: the first record at or after it is 11
    frame = _read(
        spark,
        flux_cluster.bootstrap,
        subscribe=timed.topic,
        startingTimestamp=str(timed.at(10, extra_ms=500)),
        # ranked below startingTimestamp, so ignored
        startingOffsets="latest",
        startingOffsetsByTimestamp=json.dumps({timed.topic: {"0": timed.at(0)}}),
    )
    assert _offsets(frame) == _expected(dict.fromkeys(range(PARTITIONS), range(11, 30)))
    exact = _read(
        spark, flux_cluster.bootstrap, subscribe=timed.topic, startingTimestamp=str(timed.at(10))
    )
    assert _offsets(exact) == _expected(dict.fromkeys(range(PARTITIONS), range(10, 30)))


def test_starting_offsets_by_timestamp_per_partition(
    spark: Any, flux_cluster: FluxCluster, timed: Timed
) -> None:
    by_time = {timed.topic: {"0": timed.at(5), "1": timed.at(20, extra_ms=1), "2": 0}}
    frame = _read(
        spark,
        flux_cluster.bootstrap,
        subscribe=timed.topic,
        startingOffsetsByTimestamp=json.dumps(by_time),
        startingOffsets="latest",  # ranked below startingOffsetsByTimestamp
    )
    assert _offsets(frame) == _expected({0: range(5, 30), 1: range(21, 30), 2: range(0, 30)})
    partial = _error_text(
        lambda: _read(
            spark,
            flux_cluster.bootstrap,
            subscribe=timed.topic,
            startingOffsetsByTimestamp=json.dumps({timed.topic: {"0": timed.at(5)}}),
        ).collect()
    )
    assert "must name every partition" in partial and f"{timed.topic}-1" in partial


def test_ending_timestamps_end_before_the_first_record_that_late(
    spark: Any, flux_cluster: FluxCluster, timed: Timed
) -> None:
    frame = _read(
        spark,
        flux_cluster.bootstrap,
        subscribe=timed.topic,
        startingTimestamp=str(timed.at(10)),
        endingTimestamp=str(timed.at(15, extra_ms=500)),
        endingOffsets=json.dumps({timed.topic: {"0": 1}}),  # ranked below endingTimestamp
    )
    assert _offsets(frame) == _expected(dict.fromkeys(range(PARTITIONS), range(10, 16)))
    # per partition; a time after every record ends at the latest offset
    by_time = {timed.topic: {"0": timed.at(3), "1": timed.at(29, extra_ms=1), "2": timed.at(0)}}
    per_partition = _read(
        spark,
        flux_cluster.bootstrap,
        subscribe=timed.topic,
        endingOffsetsByTimestamp=json.dumps(by_time),
    )
    assert _offsets(per_partition) == _expected({0: range(0, 3), 1: range(0, 30), 2: range(0, 0)})
    backwards = _error_text(
        lambda: _read(
            spark,
            flux_cluster.bootstrap,
            subscribe=timed.topic,
            startingTimestamp=str(timed.at(20)),
            endingTimestamp=str(timed.at(10)),
        ).collect()
    )
    assert "(option 'startingTimestamp') is after the ending offset" in backwards


def test_a_starting_timestamp_after_every_record_fails_or_starts_at_the_end(
    spark: Any, flux_cluster: FluxCluster, timed: Timed
) -> None:
    too_late = timed.at(PER_PARTITION + 100)
    text = _error_text(
        lambda: _read(
            spark, flux_cluster.bootstrap, subscribe=timed.topic, startingTimestamp=str(too_late)
        ).collect()
    )
    assert "FluxOptionError" in text and "option 'startingTimestamp'" in text
    assert f"{timed.topic}-0 ({too_late} = " in text
    assert "startingOffsetsByTimestampStrategy=latest" in text
    nothing = _read(
        spark,
        flux_cluster.bootstrap,
        subscribe=timed.topic,
        startingTimestamp=str(too_late),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert nothing.count() == 0
    # only the partitions no record reaches start at their end
    by_time = {timed.topic: {"0": too_late, "1": timed.at(25), "2": too_late}}
    mixed = _read(
        spark,
        flux_cluster.bootstrap,
        subscribe=timed.topic,
        startingOffsetsByTimestamp=json.dumps(by_time),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert _offsets(mixed) == _expected({1: range(25, 30)})


def test_assign_reads_only_the_named_partitions(
    spark: Any, flux_cluster: FluxCluster, timed: Timed
) -> None:
    frame = _read(
        spark,
        flux_cluster.bootstrap,
        assign=json.dumps({timed.topic: [2, 0]}),
        startingOffsets=json.dumps({timed.topic: {"2": 7}}),
    )
    assert _offsets(frame) == _expected({0: range(0, 30), 2: range(7, 30)})
    by_time = _read(
        spark,
        flux_cluster.bootstrap,
        assign=json.dumps({timed.topic: [1]}),
        startingOffsetsByTimestamp=json.dumps({timed.topic: {"1": timed.at(12)}}),
    )
    assert _offsets(by_time) == _expected({1: range(12, 30)})
    absent = _error_text(
        lambda: _read(
            spark, flux_cluster.bootstrap, assign=json.dumps({timed.topic: [0, 7]})
        ).collect()
    )
    assert "option 'assign' names partition(s) 7" in absent and "has 3 partitions" in absent
    both = _error_text(
        lambda: _read(
            spark, flux_cluster.bootstrap, assign=json.dumps({timed.topic: [0]}), subscribe="x"
        ).collect()
    )
    assert "exactly one" in both and "assign, subscribe" in both


def test_min_partitions_splits_a_batch_into_at_least_that_many_tasks(
    spark: Any, flux_cluster: FluxCluster, timed: Timed
) -> None:
    plain = _read(spark, flux_cluster.bootstrap, subscribe=timed.topic)
    assert plain.rdd.getNumPartitions() == PARTITIONS
    split = _read(spark, flux_cluster.bootstrap, subscribe=timed.topic, minPartitions="6")
    assert split.rdd.getNumPartitions() >= 6
    assert _offsets(split) == _offsets(plain)
    both = _read(
        spark,
        flux_cluster.bootstrap,
        subscribe=timed.topic,
        minPartitions="8",
        maxRecordsPerPartition="20",  # 20 + 10 per partition, then the largest cut further
    )
    assert both.rdd.getNumPartitions() >= 8
    assert _offsets(both) == _offsets(plain)


def test_a_stream_starts_at_a_timestamp_on_its_assigned_partitions(
    spark: Any, flux_cluster: FluxCluster, timed: Timed, checkpoint: str
) -> None:
    name = f"timed_{uuid.uuid4().hex[:8]}"
    query = (
        spark.readStream.format("flux")
        .option("bootstrap.servers", flux_cluster.bootstrap)
        .option("assign", json.dumps({timed.topic: [0, 1]}))
        .option("startingTimestamp", str(timed.at(24)))
        .option("minPartitions", "4")
        .option("kafka.group.id", "carried-over-and-ignored")
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()
        got = _offsets(spark.table(name))
    finally:
        query.stop()
        spark.catalog.dropTempView(name)
    assert got == _expected({0: range(24, 30), 1: range(24, 30)})


def test_min_partitions_splits_each_micro_batch(flux_cluster: FluxCluster, timed: Timed) -> None:
    """The stream reader's planning, driven directly as Spark's driver would."""
    from flux.spark.datasource import FluxStreamReader, source_struct
    from flux.spark.options import parse_reader_options
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.types import BinaryType

    options = parse_reader_options(
        {
            "bootstrap.servers": flux_cluster.bootstrap,
            "subscribe": timed.topic,
            "startingOffsets": "earliest",
            "minPartitions": "7",
        },
        streaming=True,
    )
    reader = FluxStreamReader(options, source_struct(BinaryType(), include_headers=False))
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        pieces = [partition.offset_range for partition in reader.partitions(start, end)]
    finally:
        reader.stop()
    assert len(pieces) >= 7
    covered = sorted((r.partition, o) for r in pieces for o in range(r.start, r.end))
    assert covered == _expected(dict.fromkeys(range(PARTITIONS), range(PER_PARTITION)))
