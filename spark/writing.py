"""Writing Spark rows to Flux, and the commit markers that make a micro-batch exactly-once.

**Rows.** An executor task gets Arrow batches with a ``value`` column (binary or string) and
optionally ``key`` (binary or string), ``topic`` (string), ``partition`` (int) and
``headers`` (array of struct<key string, value binary>); other columns are ignored. Each
Arrow batch becomes ``Message`` lists handed to one ``AsyncProducer`` (``acks=all``,
idempotent) running on a loop thread, at most ``_SENDS_IN_FLIGHT`` lists at once, so the
next Arrow batch is converted while the previous one is on the wire. A retried Produce (lost
connection, leader failover) is deduplicated by the broker through the producer's sequence
numbers, so nothing inside a task is written twice.

**Exactly-once per micro-batch** (see docs/spark.md for the whole argument). Spark re-runs a
micro-batch with the same id and the same input after a crash between the batch's write and
its commit, and retries a failed task. Two markers, kept as consumer-group offsets on the
one-partition topic ``__flux_spark_sink`` (replicated with ``__consumer_offsets``, so they
survive failover):

* the **task marker**: group ``flux-spark-sink.<queryId>.<task partition>``, offset = last
  batch id + 1 whose output this task partition wrote — committed **in the same Kafka
  transaction** as the task's rows (``task_transactional_id``: one transactional id per query
  and task partition, so every attempt fences the previous one and aborts what it left open);
* the **batch marker**: group ``flux-spark-sink.<queryId>``, offset = last committed batch
  id + 1 — committed by the sink's driver-side ``commit``.

A task of batch ``B`` initialises its transactional producer, then reads both markers: if
either says ``B`` is done it writes nothing. Otherwise its rows and its marker commit
together or not at all: a task killed in the middle of its writes leaves an open transaction
that its next attempt aborts, so read_committed readers see each row once. (read_uncommitted
readers also see the aborted attempt's records.) The batch writer (``df.write``) has no batch
ids: its tasks write with an idempotent producer, at least once.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode
from flux.sdk import (
    AsyncAdmin,
    AsyncProducer,
    ClusterClient,
    FluxConnectionError,
    FluxTimeoutError,
    Message,
    RetryPolicy,
    TopicAlreadyExistsError,
    UnknownTopicError,
)
from flux.sdk.errors import error_for

from . import limits
from ._loop import LoopThread
from .cluster import unreachable
from .errors import FluxOptionError, FluxTopicNotFoundError
from .options import WriterOptions

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "CommitMarkers",
    "SinkColumns",
    "WriteResult",
    "check_sink_schema",
    "commit_batch",
    "write_batches",
]

log = logging.getLogger("flux.spark")

#: ``send`` calls (each up to ``SEND_CHUNK_ROWS`` rows) a task keeps unacknowledged at once.
_SENDS_IN_FLIGHT = 4
_STRING_OR_BINARY = ("string", "binary")


@dataclass(frozen=True)
class SinkColumns:
    """Which of the sink's columns the input has (checked on the driver, used in tasks)."""

    key: bool
    topic: bool
    partition: bool
    headers: bool


@dataclass(frozen=True)
class WriteResult:
    """What a task reports to the driver (pickled into the WriterCommitMessage)."""

    rows: int
    skipped: bool


def check_sink_schema(fields: dict[str, str], default_topic: str | None) -> SinkColumns:
    """Check the input's column types (``name -> Spark simpleString``) and return which sink
    columns it has. ``FluxOptionError`` names the column and the types it may have."""
    value_type = fields.get("value")
    if value_type is None:
        raise FluxOptionError(
            "writing to Flux needs a 'value' column (binary or string); the input has "
            + ", ".join(sorted(fields))
        )
    _check_type("value", value_type, _STRING_OR_BINARY)
    if "key" in fields:
        _check_type("key", fields["key"], (*_STRING_OR_BINARY, "void"))
    if "topic" in fields:
        _check_type("topic", fields["topic"], ("string",))
    elif default_topic is None:
        raise FluxOptionError(
            "writing to Flux needs the option 'topic' or a 'topic' column (string)"
        )
    if "partition" in fields:
        _check_type("partition", fields["partition"], ("int", "bigint", "smallint", "tinyint"))
    if "headers" in fields:
        _check_type("headers", fields["headers"], ("array<struct<key:string,value:binary>>",))
    return SinkColumns(
        key="key" in fields,
        topic="topic" in fields,
        partition="partition" in fields,
        headers="headers" in fields,
    )


def _check_type(column: str, actual: str, allowed: tuple[str, ...]) -> None:
    if actual not in allowed:
        raise FluxOptionError(
            f"column {column!r} has type {actual}; the Flux sink accepts {' or '.join(allowed)}"
        )


# -- markers -------------------------------------------------------------------------------------


class CommitMarkers:
    """The task and batch markers of one streaming query (see the module docstring).

    Async, on the caller's loop; one instance per task or per driver commit."""

    def __init__(self, client: ClusterClient, query_id: str) -> None:
        self._client = client
        self._batch_group = f"flux-spark-sink.{query_id}"
        self._query_id = query_id

    def task_group(self, task_partition: int) -> str:
        return f"{self._batch_group}.{task_partition}"

    async def done(self, batch_id: int, task_partition: int) -> bool:
        """Whether batch ``batch_id`` was committed, or this task partition wrote all of it."""
        if await self._last(self._batch_group) >= batch_id:
            return True
        return await self._last(self.task_group(task_partition)) >= batch_id

    async def mark_batch(self, batch_id: int) -> None:
        await self._mark(self._batch_group, batch_id)

    async def _last(self, group_id: str) -> int:
        """The batch id a marker group holds (-1: none)."""
        body = {
            "group_id": group_id,
            "topics": [{"name": limits.SINK_MARKER_TOPIC, "partition_indexes": [0]}],
            "require_stable": False,
        }

        def read(response: dict[str, Any], _: int) -> int:
            code = ErrorCode.from_code(response.get("error_code", 0))
            if code is not ErrorCode.NONE:
                raise error_for(code, f"reading the commit marker {group_id!r}")
            for topic in response["topics"]:
                for item in topic["partitions"]:
                    code = ErrorCode.from_code(item["error_code"])
                    if code is not ErrorCode.NONE:
                        raise error_for(code, f"reading the commit marker {group_id!r}")
                    return int(item["committed_offset"]) - 1  # -1 committed: none
            return -1

        return await self._client.call_coordinator(group_id, ApiKey.OFFSET_FETCH, body, read)

    async def _mark(self, group_id: str, batch_id: int) -> None:
        body = {
            "group_id": group_id,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": limits.SINK_MARKER_TOPIC,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": batch_id + 1,
                            "committed_leader_epoch": -1,
                            "committed_metadata": json.dumps(
                                {"query": self._query_id, "batch": batch_id}
                            ),
                        }
                    ],
                }
            ],
        }

        def read(response: dict[str, Any], _: int) -> None:
            for topic in response["topics"]:
                for item in topic["partitions"]:
                    code = ErrorCode.from_code(item["error_code"])
                    if code is not ErrorCode.NONE:
                        raise error_for(code, f"committing the marker {group_id!r}")

        try:
            await self._client.call_coordinator(group_id, ApiKey.OFFSET_COMMIT, body, read)
        except UnknownTopicError:
            # A Kafka-strict broker wants the topic to exist; Flux does not, but be portable.
            await _create_marker_topic(self._client)
            await self._client.call_coordinator(group_id, ApiKey.OFFSET_COMMIT, body, read)


async def _create_marker_topic(client: ClusterClient) -> None:
    """Create the marker topic, compacted like ``__consumer_offsets`` (it holds no records of
    its own; Flux brokers also convert an existing one that is not compacted)."""
    admin = AsyncAdmin(",".join(f"{h}:{p}" for h, p in client.bootstrap))
    try:
        await admin.create_topic(
            limits.SINK_MARKER_TOPIC, partitions=1, configs={"cleanup.policy": "compact"}
        )
    except TopicAlreadyExistsError:
        pass
    finally:
        await admin.close()


# -- rows ----------------------------------------------------------------------------------------


def _plain_records(
    batch: pa.RecordBatch, columns: SinkColumns, default_topic: str | None
) -> tuple[str, list[bytes | None], list[bytes | None] | None] | None:
    """The common shape, values (and keys) for the ``topic`` option's topic: ``(topic,
    values, keys)`` as ``AsyncProducer.send_records`` takes them, with no object per row.
    None when rows name their own topic, partition or headers (``_messages`` then)."""
    if columns.topic or columns.partition or columns.headers or default_topic is None:
        return None
    values = _as_bytes(batch.column("value"))
    keys = _as_bytes(batch.column("key")) if columns.key else None
    return default_topic, values, keys


def _as_bytes(column: Any) -> list[bytes | None]:
    """A string or binary Arrow column as bytes (a string column is UTF-8 already: cast to
    binary in Arrow, not per row in Python)."""
    import pyarrow as pa

    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    elif pa.types.is_null(column.type):
        return [None] * len(column)
    return column.to_pylist()


def _messages(
    batch: pa.RecordBatch, columns: SinkColumns, default_topic: str | None
) -> dict[str, list[Message]]:
    """The rows of ``batch`` as Messages grouped by topic, in row order within each topic
    (rows naming their own topic, partition or headers)."""
    values = batch.column("value").to_pylist()
    rows = len(values)
    keys = batch.column("key").to_pylist() if columns.key else [None] * rows
    partitions = batch.column("partition").to_pylist() if columns.partition else None
    headers = batch.column("headers").to_pylist() if columns.headers else None
    if not columns.topic:
        # Rows with neither partition nor headers went to ``_plain_records``.
        topics: list[str | None] = [default_topic] * rows
    else:
        topics = batch.column("topic").to_pylist()
    grouped: dict[str, list[Message]] = {}
    for index in range(rows):
        topic = topics[index] or default_topic
        if topic is None:
            raise FluxOptionError("a row has a null 'topic' and the option 'topic' is not set")
        row_headers = None
        if headers is not None and headers[index]:
            row_headers = [(h["key"], h["value"]) for h in headers[index]]
        grouped.setdefault(topic, []).append(
            Message(
                values[index],
                key=keys[index],
                partition=None if partitions is None else partitions[index],
                headers=row_headers,
            )
        )
    return grouped


def write_batches(
    batches: Iterator[pa.RecordBatch],
    options: WriterOptions,
    columns: SinkColumns,
    *,
    query_id: str | None = None,
    batch_id: int | None = None,
    task_partition: int = 0,
) -> WriteResult:
    """Write every row of ``batches``; with ``query_id`` and ``batch_id`` (a streaming task)
    skip a batch the markers say is done and mark this task's part done afterwards."""
    loop = LoopThread("flux-spark-writer")
    client = ClusterClient(
        options.bootstrap,
        client_id="flux-spark-writer",
        request_timeout_s=options.timeout_s,
        retry=RetryPolicy(timeout_s=options.timeout_s),
    )
    markers = None if query_id is None or batch_id is None else CommitMarkers(client, query_id)
    try:
        if markers is None or batch_id is None:
            producer = loop.run(_open_producer(options))
            try:
                return WriteResult(_send_all(loop, producer, batches, options, columns), False)
            finally:
                loop.run(producer.close())
        assert query_id is not None
        return _write_transaction(
            loop, markers, batches, options, columns, query_id, batch_id, task_partition
        )
    except (FluxConnectionError, FluxTimeoutError) as error:
        raise unreachable(options.bootstrap, options.timeout_s, error) from error
    finally:
        try:
            loop.run(client.close())
        finally:
            loop.close()


def task_transactional_id(query_id: str, task_partition: int) -> str:
    """The transactional id of a streaming query's task partition: every attempt of the task
    (a Spark retry, the re-run after a crash) uses it, so each one fences the one before."""
    return f"flux-spark-sink.{query_id}.{task_partition}"


def _write_transaction(
    loop: LoopThread,
    markers: CommitMarkers,
    batches: Iterator[pa.RecordBatch],
    options: WriterOptions,
    columns: SinkColumns,
    query_id: str,
    batch_id: int,
    task_partition: int,
) -> WriteResult:
    """One streaming task's rows and its task marker in one transaction. Initialising the
    producer fences an earlier attempt of this task partition and aborts what it left open
    (a task killed mid-write leaves nothing for read_committed readers); only then are the
    markers read, so a transaction of an earlier attempt that committed is seen."""
    producer = loop.run(
        _open_producer(options, transactional_id=task_transactional_id(query_id, task_partition))
    )
    try:
        loop.run(producer.init_transactions(options.timeout_s))
        if loop.run(markers.done(batch_id, task_partition)):
            log.info(
                "batch %d of query %s, task partition %d: already written, skipping",
                batch_id,
                query_id,
                task_partition,
            )
            for _ in batches:  # drain the input: Spark expects it consumed
                pass
            return WriteResult(rows=0, skipped=True)
        loop.run(producer.begin_transaction())
        try:
            rows = _send_all(loop, producer, batches, options, columns)
            loop.run(
                producer.send_offsets_to_transaction(
                    {(limits.SINK_MARKER_TOPIC, 0): batch_id + 1},
                    markers.task_group(task_partition),
                    options.timeout_s,
                )
            )
            loop.run(producer.commit_transaction(options.timeout_s))
        except BaseException:
            with contextlib.suppress(Exception):
                loop.run(producer.abort_transaction(options.timeout_s))
            raise
        return WriteResult(rows=rows, skipped=False)
    finally:
        loop.run(producer.close())


def commit_batch(options: WriterOptions, query_id: str, batch_id: int) -> None:
    """The driver's half: record that micro-batch ``batch_id`` of ``query_id`` is committed."""
    loop = LoopThread("flux-spark-commit")
    client = ClusterClient(
        options.bootstrap,
        client_id="flux-spark-commit",
        request_timeout_s=options.timeout_s,
        retry=RetryPolicy(timeout_s=options.timeout_s),
    )
    try:
        loop.run(CommitMarkers(client, query_id).mark_batch(batch_id))
    except (FluxConnectionError, FluxTimeoutError) as error:
        raise unreachable(options.bootstrap, options.timeout_s, error) from error
    finally:
        try:
            loop.run(client.close())
        finally:
            loop.close()


def _send_all(
    loop: LoopThread,
    producer: AsyncProducer,
    batches: Iterator[pa.RecordBatch],
    options: WriterOptions,
    columns: SinkColumns,
) -> int:
    in_flight: list[concurrent.futures.Future[Any]] = []
    rows = 0
    try:
        for batch in batches:
            for start in range(0, batch.num_rows, limits.SEND_CHUNK_ROWS):
                chunk = batch.slice(start, limits.SEND_CHUNK_ROWS)
                plain = _plain_records(chunk, columns, options.topic)
                if plain is not None:
                    topic, values, keys = plain
                    in_flight.append(loop.submit(producer.send_records(topic, values, keys)))
                    rows += len(values)
                else:
                    for topic, messages in _messages(chunk, columns, options.topic).items():
                        in_flight.append(loop.submit(producer.send(topic, messages)))
                        rows += len(messages)
                while len(in_flight) > _SENDS_IN_FLIGHT:
                    _wait_sent(in_flight.pop(0))
        for future in in_flight:
            _wait_sent(future)
        in_flight.clear()
    finally:
        for future in in_flight:
            future.cancel()
    return rows


async def _open_producer(
    options: WriterOptions, *, transactional_id: str | None = None
) -> AsyncProducer:
    return AsyncProducer(
        options.bootstrap,
        client_id="flux-spark-writer",
        acks="all",
        linger_ms=limits.PRODUCER_LINGER_MS_DEFAULT,
        batch_size=limits.PRODUCER_BATCH_BYTES_DEFAULT,
        compression=options.compression,
        delivery_timeout_ms=options.timeout_s * 1000,
        allow_auto_topic_creation=False,
        transactional_id=transactional_id,
    )


def _wait_sent(future: concurrent.futures.Future[Any]) -> None:
    try:
        future.result()
    except UnknownTopicError as error:
        raise FluxTopicNotFoundError(
            f"cannot write to Flux: {error}. Create the topic first (fluxctl topic create)."
        ) from error
