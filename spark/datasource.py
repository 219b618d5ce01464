"""The PySpark Python data source ``flux``: batch and streaming reader and writer.

    from flux.spark import register
    register(spark)
    events = (spark.readStream.format("flux")
              .option("bootstrap.servers", "127.0.0.1:9092")
              .option("subscribe", "page-views").load())

Where each piece runs (see ``notes/spark-python-data-source.md``):

* ``FluxStreamReader``'s offset calls (``initialOffset``, ``latestOffset``, ``partitions``,
  ``commit``, ``stop``) run in one long-lived Python process on the driver, which keeps a
  ``ClusterView`` (connections to the cluster) between micro-batches. Spark pickles the reader
  to executors for ``read``: ``__getstate__`` leaves the view behind, and ``read`` opens its
  own connections.
* Writers are pickled to executor tasks (``write``); the driver-side ``commit`` of a stream
  writer runs in a new process per micro-batch, so it keeps no state: the commit markers
  live in Flux (``flux.spark.writing``).

Offsets are Spark's Kafka JSON (``{"topic": {"0": 42}}``), checkpointed by Spark: a restarted
query resumes exactly where its last committed batch ended.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .avro import AvroValueDecoder, ValueSchema, fetch_value_schema, value_type
from .cluster import ClusterView
from .errors import FluxDataLossError, FluxOptionError, FluxSaveModeError
from .offsets import (
    OffsetRange,
    Positions,
    from_spark,
    limit_rows,
    offsets_at_times,
    resolve,
    split_ranges,
    timestamps_for,
    to_spark,
)
from .options import (
    EARLIEST,
    LATEST,
    ReaderOptions,
    TimestampSpec,
    parse_reader_options,
    parse_writer_options,
)
from .reading import DecodeValues, ReadSettings, read_range
from .writing import SinkColumns, WriteResult, check_sink_schema, commit_batch, write_batches

__all__ = [
    "FluxBatchReader",
    "FluxBatchWriter",
    "FluxCommitMessage",
    "FluxDataSource",
    "FluxInputPartition",
    "FluxStreamReader",
    "FluxStreamWriter",
    "source_schema",
    "source_struct",
]

log = logging.getLogger("flux.spark")

_BASE_COLUMNS = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "timestamp timestamp, timestampType int"
)
_HEADERS_COLUMN = "headers array<struct<key: string, value: binary>>"


def source_schema(include_headers: bool) -> str:
    """The rows a Flux read returns, as Spark's Kafka source shapes them (DDL)."""
    return f"{_BASE_COLUMNS}, {_HEADERS_COLUMN}" if include_headers else _BASE_COLUMNS


def source_struct(value: DataType, include_headers: bool) -> StructType:
    """``source_schema`` with ``value`` of type ``value`` (``valueFormat=avro``). Built from
    types, not DDL: the schema is made where no JVM parses DDL, and Avro types do not always
    have one (non-null struct fields)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", value),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


class FluxDataSource(DataSource):
    """``format("flux")``. Options: see ``flux.spark.options``.

    With ``valueFormat=avro``, ``schema`` reads the value schema from the registry once and
    keeps it: Spark pickles this object after ``schema`` and builds the readers from that
    copy, so the column types and the schema tasks decode with are the same version even if
    ``latest`` moves meanwhile.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._value_schema: ValueSchema | None = None

    @classmethod
    def name(cls) -> str:
        return "flux"

    def schema(self) -> StructType | str:
        value_format = str(self.options.get("valueFormat", "raw")).strip().lower()
        if value_format == "raw":
            include_headers = str(self.options.get("includeHeaders", "false")).strip().lower()
            return source_schema(include_headers in ("true", "1", "yes"))
        # Batch or stream is not known here; the stream-only checks come with streamReader.
        options = parse_reader_options(self.options, streaming=False)
        value_schema = self._value_schema_of(options)
        assert value_schema is not None
        return source_struct(value_type(value_schema), options.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_reader_options(self.options, streaming=False)
        return FluxBatchReader(options, schema, self._value_schema_of(options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = parse_reader_options(self.options, streaming=True)
        return FluxStreamReader(options, schema, self._value_schema_of(options))

    def _value_schema_of(self, options: ReaderOptions) -> ValueSchema | None:
        """The reader schema of an avro read: the one ``schema`` found, or (when the user gave
        the schema, so ``schema`` was not called) read now."""
        if options.avro is None:
            return None
        if self._value_schema is None:
            self._value_schema = fetch_value_schema(options.avro, timeout_s=options.timeout_s)
        return self._value_schema

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            # A topic's records cannot be replaced, only appended to (Spark's Kafka sink
            # refuses Overwrite too).
            raise FluxSaveModeError(
                'the flux sink cannot overwrite a topic, it only appends: use .mode("append")'
            )
        return FluxBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return FluxStreamWriter(self.options, schema)


class FluxInputPartition(InputPartition):
    """One ``OffsetRange``: what one Spark task reads."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.offset_range = offset_range


# -- readers ---------------------------------------------------------------------------------


class _Reading:
    """What the batch and the stream reader share: options, the lazily opened driver view,
    and ``read`` (on executors)."""

    def __init__(
        self, options: ReaderOptions, schema: StructType, value_schema: ValueSchema | None = None
    ) -> None:
        self._options = options
        self._schema = schema
        #: ``valueFormat=avro``: the reader schema, found on the driver (picklable).
        self._value_schema = value_schema
        self._view: ClusterView | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_view"] = None  # connections and threads stay on the driver
        return state

    @property
    def view(self) -> ClusterView:
        if self._view is None:
            self._view = ClusterView(self._options)
        return self._view

    def _close_view(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None

    def _ranges(self, start: Positions, end: Positions) -> list[FluxInputPartition]:
        options = self._options
        pieces = split_ranges(
            start,
            end,
            options.max_records_per_partition,
            min_partitions=options.min_partitions or 1,
        )
        return [FluxInputPartition(offset_range) for offset_range in pieces]

    def _starting_positions(
        self, counts: dict[str, int], earliest: Positions, latest: Positions
    ) -> Positions:
        """Where the query starts: at the offsets of ``startingTimestamp`` /
        ``startingOffsetsByTimestamp`` (looked up now) when one is given, else at
        ``startingOffsets``."""
        options = self._options
        if options.starting_by_time is not None:
            return self._positions_at_times(
                options.starting_by_time,
                counts,
                latest,
                latest_if_none=options.starting_by_time_latest_if_none,
            )
        return resolve(
            options.starting,
            option="startingOffsets",
            partition_counts=counts,
            earliest=earliest,
            latest=latest,
        )

    def _positions_at_times(
        self,
        by_time: TimestampSpec,
        counts: dict[str, int],
        latest: Positions,
        *,
        latest_if_none: bool,
    ) -> Positions:
        times = timestamps_for(by_time, latest, partition_counts=counts)
        found = self.view.offsets_for_times(times)
        return offsets_at_times(
            times, found, latest, option=by_time.option, latest_if_none=latest_if_none
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, FluxInputPartition):
            # Spark runs a read that planned no partitions (every range empty) as one task
            # with a plain InputPartition: nothing to read.
            return
        options = self._options
        settings = ReadSettings(
            bootstrap=options.bootstrap,
            include_headers=options.include_headers,
            fail_on_data_loss=options.fail_on_data_loss,
            fetch_max_bytes=options.fetch_max_bytes,
            fetch_timeout_s=options.fetch_timeout_ms / 1000,
            read_committed=options.read_committed,
        )
        arrow_schema = to_arrow_schema(self._schema, timezone="UTC")
        yield from read_range(settings, partition.offset_range, arrow_schema, self._decoder())

    def _decoder(self) -> DecodeValues | None:
        """On the executor: a decoder for this task (it caches the writer schemas it meets)."""
        if self._value_schema is None:
            return None
        avro = self._options.avro
        assert avro is not None
        decoder = AvroValueDecoder(
            self._value_schema, permissive=avro.permissive, timeout_s=self._options.timeout_s
        )
        return decoder.decode


class FluxBatchReader(_Reading, DataSourceReader):
    """``spark.read.format("flux")``: ``startingOffsets`` (default earliest) to
    ``endingOffsets`` (default latest), or the offsets of the timestamp options, resolved once
    when the query is planned."""

    def partitions(self) -> Sequence[InputPartition]:
        try:
            counts = self.view.partition_counts(strict=True)
            earliest = self.view.offsets(counts, EARLIEST)
            latest = self.view.offsets(counts, LATEST)
            start = self._starting_positions(counts, earliest, latest)
            end = self._ending_positions(counts, earliest, latest)
        finally:
            self._close_view()
        options = self._options
        starting_by_time, ending_by_time = options.starting_by_time, options.ending_by_time
        starting_option = starting_by_time.option if starting_by_time else "startingOffsets"
        ending_option = ending_by_time.option if ending_by_time else "endingOffsets"
        for key in sorted(start):
            if start[key] > end[key]:
                raise FluxOptionError(
                    f"the starting offset {start[key]} (option {starting_option!r}) is after "
                    f"the ending offset {end[key]} (option {ending_option!r}) for "
                    f"{key[0]}-{key[1]}"
                )
        return self._ranges(start, end)

    def _ending_positions(
        self, counts: dict[str, int], earliest: Positions, latest: Positions
    ) -> Positions:
        """Where the read ends (exclusive): at the offsets of ``endingTimestamp`` /
        ``endingOffsetsByTimestamp`` (a timestamp no record reaches ends at the latest
        offset, as in Spark), else at ``endingOffsets``."""
        options = self._options
        if options.ending_by_time is not None:
            return self._positions_at_times(
                options.ending_by_time, counts, latest, latest_if_none=True
            )
        return resolve(
            options.ending,
            option="endingOffsets",
            partition_counts=counts,
            earliest=earliest,
            latest=latest,
            unnamed="latest",
        )


class FluxStreamReader(_Reading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("flux")``.

    Each micro-batch reads from the previous batch's end to the high watermarks found by
    ``latestOffset`` (bounded by the read limit). Partitions and topics that appear later
    (``CreatePartitions``, a new topic matching ``subscribePattern``) join the next batch,
    read from their log start.
    """

    def __init__(
        self, options: ReaderOptions, schema: StructType, value_schema: ValueSchema | None = None
    ) -> None:
        super().__init__(options, schema, value_schema)
        self._available_now_target: Positions | None = None
        self._latest: Positions | None = None

    # Offsets as Spark wants them --------------------------------------------------------------

    def initialOffset(self) -> dict:
        counts = self.view.partition_counts(strict=True)
        earliest = self.view.offsets(counts, EARLIEST)
        latest = self.view.offsets(counts, LATEST)
        return to_spark(self._starting_positions(counts, earliest, latest))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self._options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        counts = self.view.partition_counts(strict=True)
        self._available_now_target = self.view.offsets(counts, LATEST)

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else to_spark(self._latest)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_spark(start)
        counts = self.view.partition_counts(strict=False)
        latest = self.view.offsets(counts, LATEST)
        self._latest = latest
        self._check_lost_partitions(begin, latest)
        new = [key for key in latest if key not in begin]
        if new:  # partitions that appeared since: read them from their log start
            new_topics = {topic for topic, _ in new}
            earliest = self.view.offsets(
                {topic: count for topic, count in counts.items() if topic in new_topics}, EARLIEST
            )
            begin = {**{key: earliest[key] for key in new}, **begin}
        if self._available_now_target is not None:
            target = self._available_now_target
            latest = {
                key: min(offset, target[key]) for key, offset in latest.items() if key in target
            }
        latest = {key: max(offset, begin.get(key, offset)) for key, offset in latest.items()}
        if isinstance(limit, ReadMaxRows):
            end = limit_rows(begin, latest, limit.max_rows)
        else:
            end = dict(latest)
        # Partitions no longer visible keep their position, so "no new data" compares equal.
        for key, offset in begin.items():
            end.setdefault(key, offset)
        return to_spark(end)

    def _check_lost_partitions(self, begin: Positions, latest: Positions) -> None:
        for key, offset in begin.items():
            high_watermark = latest.get(key)
            if high_watermark is None:
                message = f"{key[0]}-{key[1]} disappeared (topic deleted?)"
            elif high_watermark < offset:
                message = (
                    f"{key[0]}-{key[1]}: the log ends at {high_watermark}, before offset {offset} "
                    "that this query already read up to (topic recreated, or records lost)"
                )
            else:
                continue
            if self._options.fail_on_data_loss:
                raise FluxDataLossError(
                    message + ". Set the option failOnDataLoss=false to go on without it."
                )
            log.warning("%s; going on (failOnDataLoss=false)", message)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = from_spark(start)
        finish = from_spark(end)
        new = [key for key in finish if key not in begin]
        if new:
            counts: dict[str, int] = {}
            for topic, partition in new:
                counts[topic] = max(counts.get(topic, 0), partition + 1)
            earliest = self.view.offsets(counts, EARLIEST)
            for key in new:
                begin[key] = min(earliest.get(key, 0), finish[key])
        ranges = {key: finish[key] for key in finish if finish[key] > begin[key]}
        return self._ranges(begin, ranges)

    def commit(self, end: dict) -> None:
        """Nothing to do: Spark's checkpoint records progress, and Flux keeps the records
        until retention removes them regardless of readers."""

    def stop(self) -> None:
        self._close_view()


# -- writers ---------------------------------------------------------------------------------


class FluxCommitMessage(WriterCommitMessage):
    """A task's outcome, sent to the driver's ``commit``."""

    def __init__(self, result: WriteResult, query_id: str | None, batch_id: int | None) -> None:
        self.result = result
        self.query_id = query_id
        self.batch_id = batch_id


class _Writing:
    def __init__(self, options: dict[str, str] | Any, schema: StructType) -> None:
        self._options = parse_writer_options(options)
        fields = {field.name: field.dataType.simpleString() for field in schema.fields}
        self._columns: SinkColumns = check_sink_schema(fields, self._options.topic)


class FluxBatchWriter(_Writing, DataSourceArrowWriter):
    """``df.write.format("flux")``: every task sends its rows with an idempotent producer
    (at-least-once if Spark retries a failed task)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> FluxCommitMessage:
        result = write_batches(iterator, self._options, self._columns)
        return FluxCommitMessage(result, None, None)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = sum(m.result.rows for m in messages if isinstance(m, FluxCommitMessage))
        log.info("wrote %d rows to Flux", rows)


class FluxStreamWriter(_Writing, DataSourceStreamArrowWriter):
    """``df.writeStream.format("flux")``: exactly-once per micro-batch through the commit
    markers of ``flux.spark.writing``."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> FluxCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None, "write() runs in a Spark task"
        query_id = context.getLocalProperty("sql.streaming.queryId")
        batch_text = context.getLocalProperty("streaming.sql.batchId")
        batch_id = None if batch_text is None else int(batch_text)
        result = write_batches(
            iterator,
            self._options,
            self._columns,
            query_id=query_id,
            batch_id=batch_id,
            task_partition=context.partitionId(),
        )
        return FluxCommitMessage(result, query_id, batch_id)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        query_ids = {m.query_id for m in messages if isinstance(m, FluxCommitMessage)}
        query_ids.discard(None)
        if not query_ids:
            return  # no task ran: nothing was written, nothing to mark
        assert len(query_ids) == 1, query_ids
        commit_batch(self._options, query_ids.pop(), batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("micro-batch %d aborted; Spark will run it again", batchId)
