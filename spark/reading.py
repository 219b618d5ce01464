"""Reading one ``OffsetRange`` on an executor: Fetch requests to the partition leader, decoded
into columns and handed to Spark as Arrow record batches.

How it runs: a thread owns an event loop and a ``ClusterClient`` and keeps **one fetch ahead**:
as soon as an answer arrives it asks for the next offsets, then decodes the answer, so the
broker prepares the next answer while this process decodes and while Spark consumes the
previous batch. Decoded chunks wait in a queue of ``_QUEUE_CHUNKS``; the generator that
Spark iterates turns them into Arrow batches. Closing the generator (Spark stopping early)
stops the thread.

Failures:

* routing errors and lost connections (a leader that died) are retried by
  ``ClusterClient.call_leader`` against the new leader, within ``fetchTimeoutMs``;
* a new leader's high watermark may lag the old one's for a moment after failover, so a
  fetch that returns nothing while the range is not done is repeated (each one long-polls
  ``FETCH_WAIT_MS`` at the broker) until ``fetchTimeoutMs`` passes without progress;
* offsets below the log start (retention) or never reached by the log (an unclean election
  truncated it) are **data loss**: ``FluxDataLossError`` with ``failOnDataLoss=true``,
  otherwise a warning and the records that exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flux.protocol.api import ApiKey
from flux.protocol.errors import CorruptRecordError, ErrorCode
from flux.protocol.records import iter_batches
from flux.sdk import ClusterClient, FluxConnectionError, FluxTimeoutError, RetryPolicy
from flux.sdk.admin import list_offsets
from flux.sdk.errors import OffsetOutOfRangeError, error_for
from flux.sdk.messages import AbortedTransaction

from . import limits
from .cluster import unreachable
from .columns import Columns, decode_into, to_arrow
from .errors import FluxDataLossError
from .offsets import OffsetRange
from .options import EARLIEST

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DecodeValues", "ReadSettings", "read_range"]

log = logging.getLogger("flux.spark")

#: Decoded fetch answers waiting for Spark: bounds memory to a few fetches per task.
_QUEUE_CHUNKS = 2
#: How often a blocked producer thread checks whether the consumer has gone.
_PUT_POLL_S = 0.2
_DONE = object()

#: ``(values, offsets, topic, partition) -> decoded values`` (``valueFormat=avro``).
DecodeValues = Callable[[Sequence[bytes | None], Sequence[int], str, int], list[Any]]


@dataclass(frozen=True)
class ReadSettings:
    """What a read task needs from the options (picklable, sent to executors)."""

    bootstrap: str
    include_headers: bool
    fail_on_data_loss: bool
    fetch_max_bytes: int
    fetch_timeout_s: float
    #: Fetch with isolation_level 1 and drop the records of aborted transactions.
    read_committed: bool = True


def read_range(
    settings: ReadSettings,
    offset_range: OffsetRange,
    schema: pa.Schema,
    decode_values: DecodeValues | None = None,
) -> Iterator[pa.RecordBatch]:
    """The records of ``offset_range`` as Arrow batches of ``schema``, in offset order;
    ``decode_values`` turns each batch's binary values into the ``value`` field's type."""
    chunks: queue.Queue[Any] = queue.Queue(maxsize=_QUEUE_CHUNKS)
    stop = threading.Event()
    thread = threading.Thread(
        target=_fetch_thread,
        args=(settings, offset_range, chunks, stop),
        name=f"flux-spark-fetch-{offset_range.topic}-{offset_range.partition}",
        daemon=True,
    )
    thread.start()
    try:
        while True:
            chunk = chunks.get()
            if chunk is _DONE:
                return
            if isinstance(chunk, BaseException):
                raise chunk
            for start in range(0, len(chunk), limits.ARROW_BATCH_ROWS_MAX):
                piece = _slice(chunk, start, start + limits.ARROW_BATCH_ROWS_MAX)
                topic, partition = offset_range.topic, offset_range.partition
                yield to_arrow(
                    piece,
                    topic,
                    partition,
                    schema,
                    values=None
                    if decode_values is None
                    else decode_values(piece.values, piece.offsets, topic, partition),
                )
    finally:
        stop.set()
        with contextlib.suppress(queue.Empty):
            chunks.get_nowait()  # unblock a put in progress
        thread.join(timeout=10)


def _slice(columns: Columns, start: int, end: int) -> Columns:
    if start == 0 and end >= len(columns):
        return columns
    return Columns(
        offsets=columns.offsets[start:end],
        timestamps_ms=columns.timestamps_ms[start:end],
        timestamp_types=columns.timestamp_types[start:end],
        keys=columns.keys[start:end],
        values=columns.values[start:end],
        headers=None if columns.headers is None else columns.headers[start:end],
    )


def _fetch_thread(
    settings: ReadSettings,
    offset_range: OffsetRange,
    chunks: queue.Queue[Any],
    stop: threading.Event,
) -> None:
    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                chunks.put(item, timeout=_PUT_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    try:
        asyncio.run(_fetch_range(settings, offset_range, put, stop))
    except (FluxConnectionError, FluxTimeoutError) as error:
        put(unreachable(settings.bootstrap, settings.fetch_timeout_s, error))
    except BaseException as error:  # every failure must reach the task, or it would hang
        put(error)
    else:
        put(_DONE)


async def _fetch_range(
    settings: ReadSettings, offset_range: OffsetRange, put: Any, stop: threading.Event
) -> None:
    topic, partition, end = offset_range.topic, offset_range.partition, offset_range.end
    client = ClusterClient(
        settings.bootstrap,
        client_id="flux-spark-reader",
        request_timeout_s=settings.fetch_timeout_s + limits.FETCH_WAIT_MS / 1000,
        retry=RetryPolicy(timeout_s=settings.fetch_timeout_s),
    )
    try:
        position = offset_range.start
        last_progress = time.monotonic()
        pending = asyncio.ensure_future(_fetch(client, settings, topic, partition, position))
        while position < end and not stop.is_set():
            try:
                result = await pending
            except OffsetOutOfRangeError:
                position = await _after_out_of_range(client, settings, offset_range, position)
                pending = asyncio.ensure_future(
                    _fetch(client, settings, topic, partition, position)
                )
                continue
            records = result["records"]
            next_position = _next_fetch_offset(records, position)
            if next_position < end:
                # One fetch ahead: the broker works on it while we decode this one.
                pending = asyncio.ensure_future(
                    _fetch(client, settings, topic, partition, next_position)
                )
            columns = Columns(headers=[] if settings.include_headers else None)
            aborted = (
                [
                    AbortedTransaction(entry["producer_id"], entry["first_offset"])
                    for entry in result.get("aborted_transactions") or ()
                ]
                if settings.read_committed
                else None
            )
            try:
                decode_into(columns, records, position, end, aborted)
            except CorruptRecordError as error:
                raise FluxDataLossError(
                    f"{topic}-{partition}: corrupt record batch at offset {position}: {error}"
                ) from error
            if next_position > position:
                position = next_position
                last_progress = time.monotonic()
                if len(columns) and not put(columns):
                    break
            elif time.monotonic() - last_progress > settings.fetch_timeout_s:
                _data_loss(
                    settings,
                    f"{topic}-{partition}: offsets {position}..{end - 1} were planned but the "
                    f"log ends at {_end_of(result, settings)} after waiting "
                    f"{settings.fetch_timeout_s:g} s (option 'fetchTimeoutMs'); the records "
                    "were lost (an unclean leader election or a deleted topic)",
                )
                return
        if not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pending
    finally:
        await client.close()


async def _after_out_of_range(
    client: ClusterClient, settings: ReadSettings, offset_range: OffsetRange, position: int
) -> int:
    """Where to continue after OFFSET_OUT_OF_RANGE at ``position``: the log start when the
    records there were deleted (data loss), else ``position`` again after a pause (the log
    has not reached it yet)."""
    topic, partition = offset_range.topic, offset_range.partition
    log_start = (await list_offsets(client, topic, EARLIEST)).get(partition, 0)
    if position >= log_start:
        await asyncio.sleep(limits.FETCH_WAIT_MS / 1000)
        return position
    _data_loss(
        settings,
        f"{topic}-{partition}: offsets {position}..{min(log_start, offset_range.end) - 1} were "
        f"deleted before they were read (the log now starts at {log_start}; retention?)",
    )
    return min(log_start, offset_range.end)


def _data_loss(settings: ReadSettings, message: str) -> None:
    if settings.fail_on_data_loss:
        raise FluxDataLossError(
            message + ". Set the option failOnDataLoss=false to skip lost records."
        )
    log.warning("%s; skipped (failOnDataLoss=false)", message)


def _end_of(result: dict[str, Any], settings: ReadSettings) -> int:
    """Where the partition's readable log ends for this reader."""
    return int(result["last_stable_offset" if settings.read_committed else "high_watermark"])


def _next_fetch_offset(records: bytes | None, position: int) -> int:
    """The offset after the last whole batch of a fetch answer (``position`` if none)."""
    next_offset = position
    for header, _ in iter_batches(records or b""):
        next_offset = max(next_offset, header.next_offset)
    return next_offset


async def _fetch(
    client: ClusterClient, settings: ReadSettings, topic: str, partition: int, position: int
) -> dict[str, Any]:
    body = {
        "replica_id": -1,
        "max_wait_ms": limits.FETCH_WAIT_MS,
        "min_bytes": 1,
        "max_bytes": settings.fetch_max_bytes,
        "isolation_level": 1 if settings.read_committed else 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": position,
                        "log_start_offset": -1,
                        "partition_max_bytes": settings.fetch_max_bytes,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }

    def read(response: dict[str, Any], _: int) -> dict[str, Any]:
        code = ErrorCode.from_code(response.get("error_code", 0))
        if code is not ErrorCode.NONE:
            raise error_for(code, f"fetch of {topic}-{partition}: {code.message}")
        for topic_result in response["responses"]:
            for result in topic_result["partitions"]:
                if result["partition_index"] != partition:
                    continue
                code = ErrorCode.from_code(result["error_code"])
                if code is not ErrorCode.NONE:
                    raise error_for(
                        code, f"fetch of {topic}-{partition} at offset {position}: {code.message}"
                    )
                return result
        raise error_for(ErrorCode.UNKNOWN_SERVER_ERROR, f"no fetch answer for {topic}-{partition}")

    return await client.call_leader(topic, partition, ApiKey.FETCH, body, read)
