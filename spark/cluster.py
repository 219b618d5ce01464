"""``ClusterView``: the driver's questions to Flux — which partitions a subscription covers,
where their logs start and end, and which offsets record timestamps map to — answered through
the SDK's ``ClusterClient``.

It runs the async client on its own loop thread (``LoopThread``) and keeps its connections
between calls, because the streaming driver asks every micro-batch. SDK errors that mean
"fix your options" are translated here, in one place: no broker answering becomes
``FluxClusterUnreachableError`` naming ``bootstrap.servers``; a subscribed topic that does not
exist becomes ``FluxTopicNotFoundError``.

Thread-safety: calls may come from any thread; they are serialized on the loop. ``close``
once, from the owner.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from flux.protocol.errors import ErrorCode
from flux.sdk import ClusterClient, FluxConnectionError, FluxTimeoutError, RetryPolicy
from flux.sdk.admin import list_offsets

from ._loop import LoopThread
from .errors import FluxClusterUnreachableError, FluxOptionError, FluxTopicNotFoundError
from .offsets import Positions, TopicPartitionKey
from .options import EARLIEST, LATEST, ReaderOptions

__all__ = ["ClusterView", "unreachable"]

log = logging.getLogger("flux.spark")
T = TypeVar("T")


def unreachable(bootstrap: str, timeout_s: float, error: Exception) -> FluxClusterUnreachableError:
    return FluxClusterUnreachableError(
        f"cannot reach the Flux cluster at bootstrap.servers={bootstrap!r} within "
        f"{timeout_s:g} s (option 'timeoutMs'): {error}"
    )


class ClusterView:
    """Subscription metadata and log offsets, for the reader's driver side."""

    def __init__(self, options: ReaderOptions) -> None:
        self._options = options
        self._loop = LoopThread("flux-spark-driver")
        self._client = ClusterClient(
            options.bootstrap,
            client_id="flux-spark-driver",
            request_timeout_s=options.timeout_s,
            retry=RetryPolicy(timeout_s=options.timeout_s),
        )

    def close(self) -> None:
        try:
            self._loop.run(self._client.close())
        finally:
            self._loop.close()

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        try:
            return self._loop.run(coroutine)
        except (FluxConnectionError, FluxTimeoutError) as error:
            raise unreachable(self._options.bootstrap, self._options.timeout_s, error) from error

    # -- subscription -------------------------------------------------------------------------

    def partition_counts(self, *, strict: bool) -> dict[str, int]:
        """Topic -> partition count of every subscribed topic that exists. With ``strict``,
        a topic named in ``subscribe`` or ``assign`` that does not exist, or a partition
        ``assign`` names that its topic lacks, is an error (a typo should fail the query at
        once); without, it is left out (the topic was deleted mid-query, which the caller
        reports as data loss)."""
        return self._run(self._partition_counts(strict=strict))

    async def _partition_counts(self, *, strict: bool) -> dict[str, int]:
        requested = None if self._options.topics is None else list(self._options.topics)

        def read(response: dict[str, Any], _: int) -> dict[str, int]:
            counts: dict[str, int] = {}
            missing: list[str] = []
            for topic in response["topics"]:
                name = topic["name"]
                code = ErrorCode.from_code(topic["error_code"])
                if code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    missing.append(name)
                elif code is ErrorCode.NONE and self._options.matches(name):
                    counts[name] = len(topic["partitions"])
            if missing and strict:
                raise FluxTopicNotFoundError(
                    f"subscribed topic(s) {', '.join(sorted(missing))} do not exist in the "
                    f"Flux cluster at {self._options.bootstrap} (option "
                    f"'{self._options.subscription_option}'); create them first, or use "
                    "'subscribePattern' to pick topics up as they appear"
                )
            if strict:
                self._check_assigned(counts)
            return dict(sorted(counts.items()))

        return await self._client.call_metadata(requested, read)

    def _check_assigned(self, counts: Mapping[str, int]) -> None:
        for topic, partitions in (self._options.assign or {}).items():
            lacking = [p for p in partitions if topic in counts and p >= counts[topic]]
            if lacking:
                raise FluxOptionError(
                    f"option 'assign' names partition(s) {', '.join(map(str, lacking))} of "
                    f"{topic!r}, which has {counts[topic]} partitions"
                )

    # -- offsets ------------------------------------------------------------------------------

    def offsets(self, counts: dict[str, int], which: int) -> Positions:
        """Log start (``EARLIEST``) or end (``LATEST``) of every partition: the high
        watermark, or with read_committed the last stable offset (a transaction still open
        holds the range back there)."""
        assert which in (EARLIEST, LATEST)
        return self._run(self._offsets(counts.keys(), which))

    async def _offsets(self, topics: Iterable[str], which: int) -> Positions:
        positions: Positions = {}
        isolation = 1 if self._options.read_committed else 0
        for topic in topics:
            found = await list_offsets(self._client, topic, which, isolation_level=isolation)
            for partition, offset in found.items():
                if self._options.covers(topic, partition):
                    positions[(topic, partition)] = offset
        return positions

    def offsets_for_times(self, times: Mapping[TopicPartitionKey, int]) -> Positions:
        """Per partition of ``times``, the first offset whose record timestamp is >= the
        partition's time (ms), or -1 when no record's is: Kafka's ListOffsets with a
        timestamp (any value but the sentinels -1 latest, -2 earliest)."""
        assert all(timestamp >= 0 for timestamp in times.values()), times
        return self._run(self._offsets_for_times(times))

    async def _offsets_for_times(self, times: Mapping[TopicPartitionKey, int]) -> Positions:
        # The SDK asks one timestamp for all partitions of a topic: one request per topic
        # and distinct timestamp (one per topic for startingTimestamp), keeping the answers
        # of the partitions that wanted it.
        wanted: dict[tuple[str, int], set[int]] = {}
        for (topic, partition), timestamp in times.items():
            wanted.setdefault((topic, timestamp), set()).add(partition)
        positions: Positions = {}
        isolation = 1 if self._options.read_committed else 0
        for (topic, timestamp), partitions in sorted(wanted.items()):
            found = await list_offsets(self._client, topic, timestamp, isolation_level=isolation)
            for partition in partitions:
                positions[(topic, partition)] = found.get(partition, -1)
        return positions
