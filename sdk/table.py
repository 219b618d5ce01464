"""``AsyncTableView`` and its synchronous twin ``TableView``: the latest value of every key of a
topic, kept up to date by a background reader — a changelog or compacted topic read as a table,
as Kafka Streams reads a ``GlobalKTable``.

    async with AsyncTableView("127.0.0.1:9092", "profiles") as view:  # loaded when entered
        print(view.get(b"user-1"), len(view), view.snapshot())
        await view.wait_caught_up()  # everything produced before this call is in the table

    with TableView("127.0.0.1:9092", "profiles", on_change=print) as view:
        for key, value in view:
            print(key, value)

How it works:

* **Reading**: the view owns an ``AsyncConsumer`` without a group. It assigns every partition
  of the topic and reads each from its log start offset; the consumer re-routes its fetches
  when a partition's leader moves. Every ``metadata_refresh_interval_ms`` the view refreshes
  the topic's metadata and reads partitions added since, from their start. A topic that is
  deleted stops the view.
* **Applying**, in offset order per partition: a record with a value sets ``table[key] =
  value``; a record with a null value (a tombstone) deletes the key; a record **without a key
  is ignored** (it names no row). Keys and values are ``bytes``, or what ``key_deserializer`` /
  ``value_deserializer`` make of them (a tombstone's None is never deserialized). A key is
  expected to live in one partition, as the producer's key partitioner arranges; a key written
  to several partitions holds whichever of its records the view applied last.
* **Loading**: ``start()`` (or ``async with``) notes the high watermark of every partition and
  returns once the view has applied every record below them, so a caller sees the complete
  table, never a partial one. Those records are *the initial load*. ``wait_caught_up()`` waits
  the same way, later, for the high watermarks at the time it is called (read your writes).
* **Changes**: ``on_change(key, old_value, new_value)`` is called after the table changed:
  ``old_value`` is None for a new key, ``new_value`` None for a deleted one. Setting a key to
  an equal (``==``) value, or deleting an absent key, is no change. It is called for the
  initial load too (so it can build state of its own from nothing);
  ``on_change_during_load=False`` leaves out the records below the start-time high watermarks.
  It runs on the view's event loop, in offset order per partition: a plain function must not
  block, an ``async`` one is awaited before the next record is applied.
* **Security**: ``security=`` is the consumer's (``flux.sdk.security``); a refused login
  (``FluxAuthenticationError``) stops the view like any error that is not transient.
* **Failures**: lost connections, timeouts and partitions without a leader are retried with
  backoff for as long as the view runs. Anything else — ``on_change`` or a deserializer
  raised, the topic was deleted, the table would exceed ``max_keys`` — stops the view: every
  later call but ``close`` raises ``TableViewError`` with the cause chained, so a stopped view
  never serves a table that silently went stale.

On a topic with ``cleanup.policy=compact`` the log cleaner keeps only the latest record of each
key (and drops tombstones after ``delete.retention.ms``), so loading reads about one record per
live key plus the tail not compacted yet.

Thread-safety: an ``AsyncTableView`` belongs to one event loop; only its background task
changes the table. A ``TableView`` runs one on its own event-loop thread and may be called from
any thread except from inside its ``on_change`` (which runs on that loop thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, NamedTuple, TypeVar

from . import limits
from ._sync import LoopThread
from .admin import list_offsets
from .consumer import AsyncConsumer
from .errors import (
    ConfigurationError,
    FluxConnectionError,
    FluxError,
    FluxProtocolError,
    FluxTimeoutError,
    KafkaError,
    TableViewError,
    UnknownTopicError,
)
from .messages import ConsumedRecord, TopicPartition
from .security import ClientSecurity

__all__ = ["AsyncTableView", "TableView", "TableViewError"]

log = logging.getLogger("flux.sdk.table")

T = TypeVar("T")
#: ``on_change(key, old_value, new_value)``, plain or ``async``.
ChangeCallback = Callable[[Any, Any, Any], Any]
Deserializer = Callable[[bytes], Any]

METADATA_REFRESH_INTERVAL_MS_DEFAULT = 30_000
METADATA_REFRESH_INTERVAL_MS_RANGE = (10, int(limits.METADATA_MAX_AGE_S * 1000))
_LATEST_TIMESTAMP = -1
#: One read of the background reader returns at most this many records, so waiters hear of
#: progress between reads of a long initial load.
_READ_RECORDS_MAX = 10_000
#: A read waits at most this long for records before the reader does its periodic work.
_READ_WAIT_S = 1.0
#: The reader backs off this long (doubling up to the max) while the cluster is unavailable.
_BACKOFF_INITIAL_S = 0.1
_BACKOFF_MAX_S = 5.0
_TRANSPORT_ERRORS = (FluxConnectionError, FluxTimeoutError, FluxProtocolError)
_ABSENT: Any = object()


class _Change(NamedTuple):
    """One change of the table: ``old_value`` None for a new key, ``new_value`` None for a
    deleted one."""

    key: Any
    old_value: Any
    new_value: Any


class AsyncTableView:
    """See the module docstring.

    Invariants: only the background task (``_run``) changes the table and ``_positions`` (the
    next offset the view applies, per partition); the table holds at most ``max_keys`` keys;
    once ``_failure`` is set or the view is closed, the table is never read again.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        on_change: ChangeCallback | None = None,
        on_change_during_load: bool = True,
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        max_keys: int = limits.TABLE_KEYS_DEFAULT,
        metadata_refresh_interval_ms: int = METADATA_REFRESH_INTERVAL_MS_DEFAULT,
        client_id: str = "flux-table-view",
        fetch_max_bytes: int = 1 << 20,
        fetch_max_wait_ms: int = 500,
        timeout_s: float = limits.RETRY_TIMEOUT_S,
        security: ClientSecurity | Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(topic, str) or not topic:
            raise ConfigurationError("topic must be a non-empty topic name")
        for name, function in (
            ("on_change", on_change),
            ("key_deserializer", key_deserializer),
            ("value_deserializer", value_deserializer),
        ):
            if function is not None and not callable(function):
                raise ConfigurationError(f"{name} must be callable (or None)")
        if not 1 <= max_keys <= limits.TABLE_KEYS_MAX:
            raise ConfigurationError(f"max_keys must be in 1..{limits.TABLE_KEYS_MAX}")
        low, high = METADATA_REFRESH_INTERVAL_MS_RANGE
        if not low <= metadata_refresh_interval_ms <= high:
            raise ConfigurationError(f"metadata_refresh_interval_ms must be in {low}..{high}")
        self.topic = topic
        self._on_change = on_change
        self._on_change_during_load = on_change_during_load
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._max_keys = max_keys
        self._metadata_refresh_interval_s = metadata_refresh_interval_ms / 1000
        # The consumer checks the fetch and retry settings (ConfigurationError naming them).
        self._consumer = AsyncConsumer(
            bootstrap,
            client_id=client_id,
            read_old=True,
            fetch_max_bytes=fetch_max_bytes,
            fetch_max_wait_ms=fetch_max_wait_ms,
            max_poll_records=_READ_RECORDS_MAX,
            timeout_s=timeout_s,
            security=security,
        )
        self._table: dict[Any, Any] = {}
        self._positions: dict[int, int] = {}
        # Partition -> its high watermark when start() began: records below are the load.
        self._load_ends: dict[int, int] = {}
        self._partition_count = 0
        self._refresh_partitions_now = False
        # Replaced and set whenever positions move or the view stops (see _pulse).
        self._progress = asyncio.Event()
        self._started = False
        self._task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._closed = False

    async def __aenter__(self) -> AsyncTableView:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- reading the table -----------------------------------------------------------------

    def get(self, key: Any, default: Any = None) -> Any:
        """The latest value of ``key``, or ``default`` if the table has no such key."""
        self._check_following()
        return self._table.get(key, default)

    def __contains__(self, key: object) -> bool:
        self._check_following()
        return key in self._table

    def __len__(self) -> int:
        self._check_following()
        return len(self._table)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` items of the table as it is when iteration starts."""
        self._check_following()
        return iter(list(self._table.items()))

    def snapshot(self) -> dict[Any, Any]:
        """A copy of the table (key -> latest value) that later changes leave alone."""
        self._check_following()
        return dict(self._table)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, timeout_s: float | None = None) -> None:
        """Assign every partition, start the background reader and return once the records
        below the current high watermarks are applied. ``UnknownTopicError`` names a topic
        that does not exist; ``FluxTimeoutError`` if loading takes longer than ``timeout_s``
        (None: as long as it takes). A start that fails closes the view."""
        _check_timeout(timeout_s)
        if self._closed:
            raise ConfigurationError(f"the table view of {self.topic!r} is closed")
        if self._started:
            raise ConfigurationError(f"the table view of {self.topic!r} is already started")
        self._started = True
        try:
            await self._within(timeout_s, self._load(), "loading")
        except BaseException:
            await self.close()
            raise

    async def _load(self) -> None:
        partitions = await self._consumer.assign_topic(self.topic)
        self._partition_count = len(partitions)
        self._load_ends = await self._consumer.end_offsets(self.topic)
        self._task = asyncio.ensure_future(self._run())
        await self._wait_reached(self._load_ends)
        log.info(
            "table view of %r loaded: %d keys from %d partitions",
            self.topic,
            len(self._table),
            self._partition_count,
        )

    async def wait_caught_up(self, timeout_s: float | None = None) -> None:
        """Return once the view has applied every record below the high watermarks of now
        (including partitions added since it started): whatever was acknowledged before
        this call is in the table. ``FluxTimeoutError`` after ``timeout_s`` (None: no limit);
        ``ConfigurationError`` if the view is closed meanwhile."""
        _check_timeout(timeout_s)
        self._check_following()
        try:
            await self._within(timeout_s, self._catch_up(), "catching up")
        except FluxError as error:
            if self._closed and not isinstance(error, ConfigurationError):
                # Closed meanwhile: say so, not which request the close cut short.
                raise ConfigurationError(f"the table view of {self.topic!r} is closed") from error
            raise

    async def _catch_up(self) -> None:
        client = self._consumer.client
        await client.refresh()  # so that partitions added since are waited for too
        await self._wait_reached(await list_offsets(client, self.topic, _LATEST_TIMESTAMP))

    async def close(self) -> None:
        """Stop the background reader and close its connections; later calls (but ``close``)
        raise ``ConfigurationError``."""
        if self._closed:
            return
        self._closed = True
        self._consumer.stop()
        task, self._task = self._task, None
        try:
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            await self._consumer.close()
        finally:
            self._pulse()

    # -- waiting ---------------------------------------------------------------------------

    async def _within(self, timeout_s: float | None, work: Awaitable[T], what: str) -> T:
        deadline = asyncio.timeout(timeout_s)
        try:
            async with deadline:
                return await work
        except TimeoutError:
            if not deadline.expired():
                raise
            behind = {p: self._positions.get(p) for p in range(self._partition_count)}
            raise FluxTimeoutError(
                f"table view of {self.topic!r}: {what} took longer than {timeout_s} s "
                f"(next offsets per partition: {behind})"
            ) from None

    async def _wait_reached(self, targets: Mapping[int, int]) -> None:
        """Wait until every partition's position reaches its target offset (or the view
        stops: then raise why)."""
        while True:
            progress = self._progress
            self._check_following()
            if self._reached(targets):
                return
            await progress.wait()

    def _reached(self, targets: Mapping[int, int]) -> bool:
        behind = [p for p, end in targets.items() if end > 0 and self._positions.get(p, -1) < end]
        if any(p >= self._partition_count for p in behind):
            self._refresh_partitions_now = True  # a partition the reader has not seen yet
        return not behind

    def _pulse(self) -> None:
        """Wake every waiter: positions moved, or the view stopped."""
        progress, self._progress = self._progress, asyncio.Event()
        progress.set()

    def _check_following(self) -> None:
        if self._closed:
            raise ConfigurationError(f"the table view of {self.topic!r} is closed")
        if self._failure is not None:
            raise TableViewError(
                f"the table view of {self.topic!r} stopped: {self._failure!r}"
            ) from self._failure
        if not self._started:
            raise ConfigurationError(
                f"the table view of {self.topic!r} is not started: call start() (or use "
                "async with) first"
            )

    # -- the background reader -------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._follow()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self._failure = error
            log.error("table view of %r stopped: %r", self.topic, error, exc_info=error)
        finally:
            self._pulse()

    async def _follow(self) -> None:
        """Read, apply, report progress; forever. Transient errors back off and go on; any
        other error (of the cluster, of a callback) ends the view."""
        backoff_s = _BACKOFF_INITIAL_S
        read_wait_s = min(_READ_WAIT_S, self._metadata_refresh_interval_s)
        refresh_at = time.monotonic() + self._metadata_refresh_interval_s
        while True:
            try:
                if self._refresh_partitions_now or time.monotonic() >= refresh_at:
                    self._refresh_partitions_now = False
                    refresh_at = time.monotonic() + self._metadata_refresh_interval_s
                    await self._follow_new_partitions()
                await self._note_positions()
                batches = await self._consumer.getmany(timeout_s=read_wait_s)
            except Exception as error:
                if not _is_transient(error):
                    raise
                log.info("table view of %r: %s; retrying in %.1f s", self.topic, error, backoff_s)
                await asyncio.sleep(backoff_s)
                backoff_s = min(_BACKOFF_MAX_S, backoff_s * 2)
                continue
            backoff_s = _BACKOFF_INITIAL_S
            for tp, records in batches.items():
                await self._apply(tp, records)

    async def _note_positions(self) -> None:
        for tp in self._consumer.assignment():
            self._positions[tp.partition] = await self._consumer.position(tp)
        self._pulse()

    async def _follow_new_partitions(self) -> None:
        client = self._consumer.client
        await client.refresh()
        count = await client.partition_count(self.topic)
        if count < self._partition_count:
            raise TableViewError(
                f"topic {self.topic!r} now has {count} partitions, fewer than the "
                f"{self._partition_count} the view reads (was it deleted and created again?)"
            )
        if count > self._partition_count:
            log.info(
                "table view of %r: partitions %d..%d added, reading them",
                self.topic,
                self._partition_count,
                count - 1,
            )
            self._consumer.assign([(self.topic, p) for p in range(count)])
            self._partition_count = count

    async def _apply(self, tp: TopicPartition, records: list[ConsumedRecord]) -> None:
        load_end = self._load_ends.get(tp.partition, 0)
        for record in records:
            if record.key is None:
                continue  # no key, no row (see the module docstring)
            key = record.key
            if self._key_deserializer is not None:
                key = self._key_deserializer(key)
            change = _apply_record(
                self._table,
                key,
                record.value,
                deserialize=self._value_deserializer,
                max_keys=self._max_keys,
            )
            if change is None or self._on_change is None:
                continue
            if record.offset < load_end and not self._on_change_during_load:
                continue
            result = self._on_change(*change)
            if inspect.isawaitable(result):
                await result


def _apply_record(
    table: dict[Any, Any],
    key: Any,
    value: bytes | None,
    *,
    deserialize: Deserializer | None = None,
    max_keys: int = limits.TABLE_KEYS_DEFAULT,
) -> _Change | None:
    """Apply one keyed record to ``table``: a value sets the key, None (a tombstone) deletes
    it. Returns the change, or None if the table is unchanged. ``TableViewError`` (table
    unchanged) if a new key would make it hold more than ``max_keys``."""
    old = table.get(key, _ABSENT)
    if value is None:
        if old is _ABSENT:
            return None
        del table[key]
        return _Change(key, old, None)
    new = value if deserialize is None else deserialize(value)
    if old is _ABSENT:
        if len(table) >= max_keys:
            raise TableViewError(f"the table would hold more than max_keys={max_keys} keys")
        table[key] = new
        return _Change(key, None, new)
    if old == new:
        return None
    table[key] = new
    return _Change(key, old, new)


def _is_transient(error: Exception) -> bool:
    """Worth retrying while the view runs: the cluster is unreachable or busy electing. An
    unknown topic is not: the consumer already waited for a just-created one."""
    if isinstance(error, _TRANSPORT_ERRORS):
        return True
    return (
        isinstance(error, KafkaError)
        and error.retriable
        and not isinstance(error, UnknownTopicError)
    )


def _check_timeout(timeout_s: float | None) -> None:
    if timeout_s is not None and not timeout_s > 0:
        raise ConfigurationError(f"timeout_s must be positive (or None), got {timeout_s}")


# -- the synchronous twin ---------------------------------------------------------------------


class TableView:
    """The blocking twin of ``AsyncTableView`` (same arguments, same methods), running it on
    its own event-loop thread. ``on_change`` runs on that thread: it must not block, nor call
    this view's methods (the loop would wait for itself; they raise ``RuntimeError``)."""

    def __init__(self, bootstrap: str, topic: str, **options: Any) -> None:
        self._async = AsyncTableView(bootstrap, topic, **options)
        self._loop = LoopThread("flux-table-view")

    def __enter__(self) -> TableView:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def topic(self) -> str:
        return self._async.topic

    def start(self, timeout_s: float | None = None) -> None:
        """``AsyncTableView.start``, blocking; a start that fails closes the view."""
        try:
            self._loop.run(self._async.start(timeout_s))
        except BaseException:
            self._loop.close()
            raise

    def wait_caught_up(self, timeout_s: float | None = None) -> None:
        self._loop.run(self._async.wait_caught_up(timeout_s))

    def get(self, key: Any, default: Any = None) -> Any:
        return self._loop.run(_call(self._async.get, key, default))

    def __contains__(self, key: object) -> bool:
        return self._loop.run(_call(self._async.__contains__, key))

    def __len__(self) -> int:
        return self._loop.run(_call(self._async.__len__))

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` items of the table as it is when iteration starts."""
        return iter(self.snapshot().items())

    def snapshot(self) -> dict[Any, Any]:
        return self._loop.run(_call(self._async.snapshot))

    def close(self) -> None:
        try:
            with contextlib.suppress(ConfigurationError):  # the loop is gone: a failed start
                self._loop.run(self._async.close())
        finally:
            self._loop.close()


async def _call(function: Callable[..., T], *args: Any) -> T:
    """Run a plain method of the async view on its loop (the loop owns the table)."""
    return function(*args)
