"""Batch reads and writes through ``format("flux")`` against real node processes, and the
clear errors for bad options, unknown topics and an unreachable cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flux.cluster.launcher import free_port
from flux.sdk import Message, Producer

from .spark_support import FluxCluster, require_spark

require_spark()

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("spark")]


def _read(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("flux").option("bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _produce(cluster: FluxCluster, topic: str, per_partition: int, partitions: int) -> None:
    """``per_partition`` records into each partition: value ``p<partition>-<i>``, key
    ``k<i>``, one header ``n`` = i."""
    with Producer(cluster.bootstrap) as producer:
        for partition in range(partitions):
            producer.send(
                topic,
                [
                    Message(
                        f"p{partition}-{i}",
                        key=f"k{i}",
                        partition=partition,
                        headers=[("n", str(i)), ("empty", None)],
                    )
                    for i in range(per_partition)
                ],
            )


def test_batch_read_with_explicit_offsets_returns_exactly_those_records(
    spark: Any, flux_cluster: FluxCluster, topic_name: Any
) -> None:
    topic = topic_name("batch")
    flux_cluster.create_topic(topic, partitions=3)
    _produce(flux_cluster, topic, per_partition=50, partitions=3)
    starting = {topic: {"0": 10, "1": -2, "2": 45}}
    ending = {topic: {"0": 20, "1": 5, "2": -1}}
    rows = _read(
        spark,
        flux_cluster.bootstrap,
        subscribe=topic,
        startingOffsets=json.dumps(starting),
        endingOffsets=json.dumps(ending),
        includeHeaders="true",
        maxRecordsPerPartition="4",  # forces ranges to be split across tasks
    ).collect()
    got = sorted((row.partition, row.offset) for row in rows)
    expected = (
        [(0, offset) for offset in range(10, 20)]
        + [(1, offset) for offset in range(0, 5)]
        + [(2, offset) for offset in range(45, 50)]
    )
    assert got == expected
    for row in rows:
        assert row.topic == topic
        assert row.value == f"p{row.partition}-{row.offset}".encode()
        assert row.key == f"k{row.offset}".encode()
        assert [(h.key, h.value) for h in row.headers] == [
            ("n", str(row.offset).encode()),
            ("empty", None),
        ]
        assert row.timestampType == 0 and row.timestamp is not None


def test_batch_read_defaults_to_everything_and_omits_headers(
    spark: Any, flux_cluster: FluxCluster, topic_name: Any
) -> None:
    topic = topic_name("batch-all")
    flux_cluster.create_topic(topic, partitions=2)
    _produce(flux_cluster, topic, per_partition=30, partitions=2)
    frame = _read(spark, flux_cluster.bootstrap, subscribe=topic)
    assert "headers" not in frame.columns
    assert frame.count() == 60
    assert frame.selectExpr("count(distinct partition, offset)").first()[0] == 60


def test_batch_write_uses_key_topic_partition_and_headers_columns(
    spark: Any, flux_cluster: FluxCluster, topic_name: Any
) -> None:
    first, second = topic_name("write-a"), topic_name("write-b")
    flux_cluster.create_topic(first, partitions=2)
    flux_cluster.create_topic(second, partitions=2)
    frame = spark.createDataFrame(
        [(f"key-{i}", f"value-{i}", second if i % 3 == 0 else None, i % 2) for i in range(40)],
        "key string, value string, topic string, partition int",
    ).selectExpr(
        "key",
        "value",
        "topic",
        "partition",
        "array(named_struct('key', 'source', 'value', cast('spark' as binary))) as headers",
    )
    frame.write.format("flux").option("bootstrap.servers", flux_cluster.bootstrap).option(
        "topic", first
    ).mode("append").save()
    rows = _read(
        spark, flux_cluster.bootstrap, subscribe=f"{first},{second}", includeHeaders="true"
    )
    got = {(r.topic, r.partition, r.key.decode(), r.value.decode()) for r in rows.collect()}
    expected = {
        (second if i % 3 == 0 else first, i % 2, f"key-{i}", f"value-{i}") for i in range(40)
    }
    assert got == expected
    assert {tuple((h.key, h.value) for h in r.headers) for r in rows.collect()} == {
        (("source", b"spark"),)
    }


# -- errors ----------------------------------------------------------------------------------


def _error_text(action: Any) -> str:
    """Everything an error says: PySpark shortens ``str()`` of a StreamingQueryException, so
    its JVM message and cause are included too."""
    with pytest.raises(Exception) as caught:
        action()
    error = caught.value
    parts = [str(error), str(getattr(error, "desc", ""))]
    if hasattr(error, "getMessage"):
        parts.append(str(error.getMessage()))
    if getattr(error, "cause", None) is not None:
        parts.append(str(error.cause))
    return "\n".join(parts)


def test_missing_options_are_named(spark: Any, flux_cluster: FluxCluster) -> None:
    no_bootstrap = _error_text(
        lambda: spark.read.format("flux").option("subscribe", "x").load().collect()
    )
    assert "bootstrap.servers" in no_bootstrap and "required" in no_bootstrap
    no_topics = _error_text(lambda: _read(spark, flux_cluster.bootstrap).collect())
    assert "subscribe" in no_topics and "subscribePattern" in no_topics
    no_topic = _error_text(
        lambda: (
            spark.createDataFrame([("v",)], "value string")
            .write.format("flux")
            .option("bootstrap.servers", flux_cluster.bootstrap)
            .mode("append")
            .save()
        )
    )
    assert "option 'topic'" in no_topic


def test_malformed_starting_offsets_is_explained(spark: Any, flux_cluster: FluxCluster) -> None:
    for bad in ("earliset", '{"t": {"zero": 1}}', '{"t": [1, 2]}', '{"t": {"0": "x"}}'):
        text = _error_text(
            lambda bad=bad: _read(
                spark, flux_cluster.bootstrap, subscribe="t", startingOffsets=bad
            ).collect()
        )
        assert "startingOffsets" in text and "'earliest', 'latest' or JSON" in text, text


def test_unknown_topic_is_named(spark: Any, flux_cluster: FluxCluster, topic_name: Any) -> None:
    missing = topic_name("missing")
    text = _error_text(lambda: _read(spark, flux_cluster.bootstrap, subscribe=missing).collect())
    assert "FluxTopicNotFoundError" in text and missing in text
    stream_text = _error_text(
        lambda: (
            spark.readStream.format("flux")
            .option("bootstrap.servers", flux_cluster.bootstrap)
            .option("subscribe", missing)
            .load()
            .writeStream.format("noop")
            .trigger(availableNow=True)
            .start()
            .awaitTermination()
        )
    )
    assert missing in stream_text and "not exist" in stream_text
    write_text = _error_text(
        lambda: (
            spark.createDataFrame([("v",)], "value string")
            .write.format("flux")
            .option("bootstrap.servers", flux_cluster.bootstrap)
            .option("topic", missing)
            .option("timeoutMs", "3000")
            .mode("append")
            .save()
        )
    )
    assert missing in write_text and "FluxTopicNotFoundError" in write_text


def test_unreachable_cluster_is_reported(spark: Any) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    text = _error_text(
        lambda: _read(spark, nowhere, subscribe="anything", timeoutMs="2000").collect()
    )
    assert "FluxClusterUnreachableError" in text and nowhere in text


def test_save_modes_other_than_append_name_the_append_mode(
    spark: Any, flux_cluster: FluxCluster, topic_name: Any
) -> None:
    """What a Kafka user writes, ``.save()`` without a mode, fails with a message naming
    ``.mode("append")``; overwrite is refused (a topic cannot be replaced); nothing is
    written."""
    from flux.spark import FluxSaveModeError

    topic = topic_name("modes")
    flux_cluster.create_topic(topic, partitions=1)
    frame = spark.createDataFrame([("v",)], "value string")
    writer = frame.write.format("flux").option("bootstrap.servers", flux_cluster.bootstrap)
    with pytest.raises(FluxSaveModeError, match=r'\.mode\("append"\)'):
        writer.option("topic", topic).save()
    overwrite = _error_text(lambda: writer.option("topic", topic).mode("overwrite").save())
    assert "cannot overwrite" in overwrite and '.mode("append")' in overwrite
    assert _read(spark, flux_cluster.bootstrap, subscribe=topic).count() == 0
    writer.option("topic", topic).mode("append").save()
    assert _read(spark, flux_cluster.bootstrap, subscribe=topic).count() == 1
