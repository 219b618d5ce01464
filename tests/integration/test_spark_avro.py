"""``format("flux")`` with ``valueFormat=avro``: values written by confluent-kafka's
``AvroSerializer`` through Flux's schema registry read into typed Spark columns, against a
real 3-node cluster (docs/spark.md, "Avro values")."""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from flux.cluster.launcher import NodeProcess

from tests.integration.http_helpers import running_cluster
from tests.spark.spark_support import FluxCluster, require_spark

require_spark()

from pyspark.sql.types import (  # noqa: E402  (after the skip rule)
    ArrayType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("spark")]

_ADDRESS = {
    "type": "record",
    "name": "Address",
    "fields": [
        {"name": "city", "type": "string"},
        {"name": "zip", "type": ["null", "string"], "default": None},
    ],
}
USER_V1 = {
    "type": "record",
    "name": "User",
    "namespace": "com.example",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "active", "type": "boolean"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["FREE", "PAID"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "scores", "type": {"type": "map", "values": "long"}},
        {"name": "address", "type": ["null", _ADDRESS], "default": None},
        {"name": "joined", "type": {"type": "int", "logicalType": "date"}},
        {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "balance",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
    ],
}
#: Backward compatible with v1: the added fields have defaults.
USER_V2 = {
    **USER_V1,
    "fields": [
        *USER_V1["fields"],
        {"name": "country", "type": "string", "default": "unknown"},
        {"name": "rating", "type": ["null", "double"], "default": None},
    ],
}
V1_RECORDS = 150
V2_RECORDS = 50
PARTITIONS = 3

_ADDRESS_STRUCT = StructType(
    [StructField("city", StringType(), False), StructField("zip", StringType(), True)]
)
USER_V1_STRUCT = StructType(
    [
        StructField("name", StringType(), False),
        StructField("age", IntegerType(), False),
        StructField("active", BooleanType(), False),
        StructField("kind", StringType(), False),
        StructField("tags", ArrayType(StringType(), False), False),
        StructField("scores", MapType(StringType(), LongType(), False), False),
        StructField("address", _ADDRESS_STRUCT, True),
        StructField("joined", DateType(), False),
        StructField("seen", TimestampType(), False),
        StructField("balance", DecimalType(10, 2), False),
    ]
)
USER_V2_STRUCT = StructType(
    [
        *USER_V1_STRUCT.fields,
        StructField("country", StringType(), False),
        StructField("rating", DoubleType(), True),
    ]
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FluxCluster]:
    with running_cluster(tmp_path_factory.mktemp("spark-avro")) as nodes:
        yield FluxCluster(nodes)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local[2] session for the module, set up like tests/spark's; a session that was
    already running in this process (tests/spark's, under xdist's ``spark`` group) is used
    and left running."""
    from flux.spark import flux_session
    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession()
    session = flux_session(
        "flux-spark-avro-tests",
        master="local[2]",
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
        },
    )
    try:
        yield session
    finally:
        if existing is None:
            session.stop()


def registry_url(nodes: list[NodeProcess]) -> str:
    return ",".join(f"http://{node.ready['broker_http']}/schemas" for node in nodes)


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def user(number: int, version: int) -> dict[str, Any]:
    """User ``number`` as written with schema ``version`` (fastavro's Python values)."""
    fields: dict[str, Any] = {
        "name": f"user-{number:03d}",
        "age": 18 + number % 60,
        "active": number % 2 == 0,
        "kind": "PAID" if number % 3 == 0 else "FREE",
        "tags": [f"t{j}" for j in range(number % 3)],
        "scores": {"math": number, "art": -number} if number % 4 else {},
        "address": None if number % 5 == 0 else {"city": f"c{number % 7}", "zip": None},
        "joined": datetime.date(2020, 1, 1) + datetime.timedelta(days=number),
        "seen": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        + datetime.timedelta(milliseconds=1001 * number),
        "balance": Decimal(number * 101) / 100,
    }
    if version == 2:
        fields["country"] = f"country-{number % 4}"
        fields["rating"] = None if number % 2 else number / 4
    return fields


def as_read(record: dict[str, Any], reader_version: int) -> dict[str, Any]:
    """``record`` as Spark returns it read with schema ``reader_version``: old records get the
    new fields' defaults, new records lose the fields the old schema lacks."""
    row = dict(record)
    if reader_version == 2:
        row.setdefault("country", "unknown")
        row.setdefault("rating", None)
    else:
        row.pop("country", None)
        row.pop("rating", None)
    # PySpark hands TimestampType to Python as a naive datetime in local time.
    row["seen"] = record["seen"].astimezone().replace(tzinfo=None)
    return row


def produce(cluster: FluxCluster, topic: str, values: list[tuple[int, bytes]]) -> None:
    """``(partition, value)`` pairs, in order, acknowledged by all in-sync replicas."""
    producer = Producer(
        {"bootstrap.servers": cluster.nodes[0].bootstrap_servers, "acks": "all", "linger.ms": 5}
    )
    for partition, value in values:
        producer.produce(topic, value=value, partition=partition)
    assert producer.flush(30) == 0


def read(spark: Any, cluster: FluxCluster, topic: str, **options: str) -> Any:
    reader = (
        spark.read.format("flux")
        .option("bootstrap.servers", cluster.bootstrap)
        .option("subscribe", topic)
        .option("valueFormat", "avro")
        .option("schemaRegistryUrl", registry_url(cluster.nodes))
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def error_text(action: Any) -> str:
    """What a failed Spark action says (the Python error of the task is in its message)."""
    with pytest.raises(Exception) as caught:
        action()
    error = caught.value
    return "\n".join([str(error), str(getattr(error, "desc", "")), str(error.__cause__ or "")])


def test_avro_values_of_two_schema_versions_read_into_typed_columns(
    spark: Any, cluster: FluxCluster
) -> None:
    topic = unique("avro-users")
    cluster.create_topic(topic, partitions=PARTITIONS)
    registry = SchemaRegistryClient({"url": registry_url(cluster.nodes[:1])})
    context = SerializationContext(topic, MessageField.VALUE)
    old = AvroSerializer(registry, json.dumps(USER_V1))
    new = AvroSerializer(registry, json.dumps(USER_V2))
    written = {number: user(number, 1) for number in range(V1_RECORDS)}
    written |= {number: user(number, 2) for number in range(V1_RECORDS, V1_RECORDS + V2_RECORDS)}
    produce(
        cluster,
        topic,
        [
            (number % PARTITIONS, (old if number < V1_RECORDS else new)(record, context))
            for number, record in written.items()
        ],
    )
    assert registry.get_versions(f"{topic}-value") == [1, 2]

    # The default subject <topic>-value at its latest version: v2, old records get defaults.
    users = read(spark, cluster, topic)
    assert users.schema["value"].dataType == USER_V2_STRUCT
    assert users.schema["value"].nullable
    assert [field.name for field in users.schema.fields] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    rows = users.collect()
    assert len(rows) == V1_RECORDS + V2_RECORDS
    got = {row.value.name: row.value.asDict(recursive=True) for row in rows}
    assert got == {record["name"]: as_read(record, 2) for record in written.values()}
    # Records keep their place: each partition holds its users in the order written.
    for row in rows:
        number = int(row.value.name.split("-")[1])
        assert row.partition == number % PARTITIONS
        assert row.offset == number // PARTITIONS

    # Column access and SQL work on the struct like on any other.
    summary = users.selectExpr("value.country", "value.age").groupBy("country").count()
    counts = {row.country: row["count"] for row in summary.collect()}
    assert counts["unknown"] == V1_RECORDS
    assert sum(counts.values()) == V1_RECORDS + V2_RECORDS

    # An explicit older version is the reader schema: new records lose the added fields.
    first = read(spark, cluster, topic, valueSubject=f"{topic}-value", valueSchemaVersion="1")
    assert first.schema["value"].dataType == USER_V1_STRUCT
    got = {row.value.name: row.value.asDict(recursive=True) for row in first.collect()}
    assert got == {record["name"]: as_read(record, 1) for record in written.values()}


def test_values_not_in_the_wire_format_fail_the_query_or_read_as_null(
    spark: Any, cluster: FluxCluster
) -> None:
    topic = unique("avro-mixed")
    cluster.create_topic(topic, partitions=1)
    registry = SchemaRegistryClient({"url": registry_url(cluster.nodes[1:2])})
    serialize = AvroSerializer(registry, json.dumps(USER_V1))
    context = SerializationContext(topic, MessageField.VALUE)
    unknown_id = b"\x00" + (2**31 - 1).to_bytes(4, "big") + b"\x02"
    produce(
        cluster,
        topic,
        [
            (0, serialize(user(0, 1), context)),
            (0, serialize(user(1, 1), context)),
            (0, b"plain text, not Avro"),  # offset 2
            (0, unknown_id),  # offset 3
            (0, serialize(user(4, 1), context)),
        ],
    )

    raw = error_text(lambda: read(spark, cluster, topic).collect())
    assert f"{topic}-0 offset 2" in raw, raw
    assert "not in the schema registry's wire format" in raw, raw
    assert "FluxMalformedValueError" in raw, raw
    assert "mode=PERMISSIVE" in raw, raw

    after_raw = json.dumps({topic: {"0": 3}})
    unknown = error_text(lambda: read(spark, cluster, topic, startingOffsets=after_raw).collect())
    assert f"{topic}-0 offset 3" in unknown, unknown
    assert f"schema id {2**31 - 1} is not in the schema registry" in unknown, unknown

    # mode=PERMISSIVE, as from_avro's: the bad values read as null, the rest decoded.
    rows = read(spark, cluster, topic, mode="PERMISSIVE").orderBy("offset").collect()
    assert [row.offset for row in rows] == [0, 1, 2, 3, 4]
    assert [None if row.value is None else row.value.name for row in rows] == [
        "user-000",
        "user-001",
        None,
        None,
        "user-004",
    ]
    assert rows[2].value is None and rows[3].value is None


def test_registry_problems_are_named_when_the_query_is_planned(
    spark: Any, cluster: FluxCluster
) -> None:
    topic = unique("avro-none")
    cluster.create_topic(topic, partitions=1)
    missing = error_text(lambda: read(spark, cluster, topic).collect())
    assert f"version latest of subject '{topic}-value' is not in the schema registry" in missing
    no_url = error_text(
        lambda: (
            spark.read.format("flux")
            .option("bootstrap.servers", cluster.bootstrap)
            .option("subscribe", topic)
            .option("valueFormat", "avro")
            .load()
            .collect()
        )
    )
    assert "schemaRegistryUrl" in no_url and "required" in no_url


def test_stream_reads_avro_values(spark: Any, cluster: FluxCluster, tmp_path: Any) -> None:
    topic = unique("avro-stream")
    cluster.create_topic(topic, partitions=2)
    registry = SchemaRegistryClient({"url": registry_url(cluster.nodes[2:])})
    serialize = AvroSerializer(registry, json.dumps(USER_V1))
    context = SerializationContext(topic, MessageField.VALUE)
    written = [user(number, 1) for number in range(20)]
    produce(cluster, topic, [(n % 2, serialize(r, context)) for n, r in enumerate(written)])
    stream = (
        spark.readStream.format("flux")
        .option("bootstrap.servers", cluster.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("valueFormat", "avro")
        .option("schemaRegistryUrl", registry_url(cluster.nodes))
        .load()
    )
    assert stream.schema["value"].dataType == USER_V1_STRUCT
    name = unique("avro_stream").replace("-", "_")
    query = (
        stream.select("value.name", "value.age")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120)
    finally:
        query.stop()
    got = sorted((row.name, row.age) for row in spark.table(name).collect())
    assert got == sorted((record["name"], record["age"]) for record in written)
