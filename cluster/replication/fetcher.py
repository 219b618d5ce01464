"""Follower side of replication: one fetcher per leader broker, over aiohttp.

For every broker that leads partitions this broker follows, one task long-polls
``POST /replication/fetch`` on the leader's HTTP port with all those partitions: each with its
fetch offset (this replica's log end), the epoch of its last batch, the leader epoch it
follows, and its topic id. It applies the binary answer partition by partition: append the
batches as they are (offsets and epochs from the leader), follow the leader's high watermark
and log start, truncate a divergent tail to where the leader says the common history ends,
or restart an empty log when the leader no longer has what this replica needs.

The set of partitions per leader is read from the ``ReplicaManager`` on every round, so role
changes take effect at the next fetch; an image change also wakes idle fetchers.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
from flux.controller.image import MetadataImage
from flux.protocol.errors import CorruptRecordError, ErrorCode
from flux.storage import StorageError

from .partition import Partition
from .replica_manager import ReplicaManager
from .wire import PartitionData, ReplicationWireError, decode_fetch_response

__all__ = ["ReplicaFetcherManager"]

log = logging.getLogger("flux.cluster.fetcher")

FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 16 << 20
PARTITION_FETCH_MAX_BYTES = 4 << 20
FETCH_TIMEOUT_MARGIN_S = 2.0
ERROR_BACKOFF_S = 0.1
MAX_ERROR_BACKOFF_S = 1.0
#: ``stop`` waits this long for the fetcher tasks, then leaves them (the process is exiting).
STOP_TIMEOUT_S = 5.0


class ReplicaFetcherManager:
    """Starts and stops one fetcher task per leader broker, as the metadata image changes."""

    def __init__(self, replicas: ReplicaManager, *, broker_id: int, incarnation_id: str) -> None:
        self._replicas = replicas
        self._broker_id = broker_id
        self._incarnation_id = incarnation_id
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._image_changed = asyncio.Event()
        # One HTTP session (connection pool) per leader, like Kafka's fetcher threads: a slow
        # or dead leader never holds up the fetches from the others.
        self._sessions: dict[int, aiohttp.ClientSession] = {}
        self._stopping = False
        replicas.add_image_listener(self._on_image)

    def _on_image(self, image: MetadataImage) -> None:
        if self._stopping:
            return
        leaders = {p.state.leader for p in self._followed()}
        for leader in leaders - set(self._tasks):
            if leader >= 0 and leader != self._broker_id:
                self._tasks[leader] = asyncio.create_task(self._fetch_forever(leader))
        self._image_changed.set()
        self._image_changed = asyncio.Event()

    def _followed(self, leader: int | None = None) -> list[Partition]:
        return [
            p
            for p in self._replicas.partitions()
            if not p.is_leader and (leader is None or p.state.leader == leader)
        ]

    async def stop(self) -> None:
        """Cancel every fetcher, close the connection pools, wait (bounded) for the tasks.

        The pools are closed before waiting: a fetch cancelled while aiohttp was inside its
        request could keep its task waiting on the connection, and a node's SIGTERM then never
        finished (1 restart in 4 to 13 under the chaos suite's rolling restarts). Closing the
        pools aborts those requests; ``_stopping`` keeps a loop that still wakes up from
        opening a new pool, and the bounded wait keeps shutdown from hanging regardless.
        """
        self._stopping = True
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        sessions = list(self._sessions.values())
        self._sessions.clear()
        for session in sessions:
            await session.close()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)
            if pending:
                log.warning(
                    "%d replica fetchers did not stop in %.0f s", len(pending), STOP_TIMEOUT_S
                )

    async def _reset_client(self, leader: int) -> None:
        """Drop the leader's connection pool after a failure: its connections may be dead."""
        session = self._sessions.pop(leader, None)
        if session is not None:
            await session.close()

    def _client(self, leader: int) -> aiohttp.ClientSession:
        session = self._sessions.get(leader)
        if session is None:
            session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=1.0)
            )
            self._sessions[leader] = session
        return session

    async def _fetch_forever(self, leader: int) -> None:
        """One leader's fetch loop; it never dies on an unexpected error (logged, retried)."""
        while not self._stopping:
            try:
                await self._fetch_rounds(leader)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("fetcher for leader %d failed; restarting it", leader)
                await asyncio.sleep(MAX_ERROR_BACKOFF_S)

    async def _fetch_rounds(self, leader: int) -> None:
        backoff = ERROR_BACKOFF_S
        while not self._stopping:
            partitions = self._followed(leader)
            registration = self._replicas.image.brokers.get(leader)
            if not partitions or registration is None or registration.fenced:
                log.debug("fetcher for broker %d idle (%d partitions)", leader, len(partitions))
                await self._image_changed.wait()
                continue
            try:
                # Our own bound, on top of aiohttp's: a request stuck on a pooled connection
                # must end well before the leader counts this follower as lagging.
                answers = await asyncio.wait_for(
                    self._fetch(leader, registration.http_host, registration.http_port, partitions),
                    FETCH_MAX_WAIT_MS / 1000 + FETCH_TIMEOUT_MARGIN_S,
                )
            except (aiohttp.ClientError, TimeoutError, OSError, ReplicationWireError) as error:
                log.debug("fetch from broker %d failed: %r", leader, error)
                await self._reset_client(leader)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_ERROR_BACKOFF_S)
                continue
            backoff = ERROR_BACKOFF_S
            had_error = False
            for answer in answers:
                had_error |= not self._apply(leader, answer)
            if had_error:
                await asyncio.sleep(ERROR_BACKOFF_S)

    async def _fetch(
        self, leader: int, host: str, port: int, partitions: list[Partition]
    ) -> list[PartitionData]:
        body: dict[str, Any] = {
            "replica_id": self._broker_id,
            "broker_epoch": self._incarnation_id,
            "max_wait_ms": FETCH_MAX_WAIT_MS,
            "min_bytes": 1,
            "max_bytes": FETCH_MAX_BYTES,
            "partitions": [
                {
                    "topic": p.topic,
                    "topic_id": p.topic_id,
                    "partition": p.index,
                    "fetch_offset": p.log_end_offset,
                    "last_fetched_epoch": p.epochs.latest_epoch,
                    "leader_epoch": p.leader_epoch,
                    "partition_max_bytes": PARTITION_FETCH_MAX_BYTES,
                }
                for p in partitions
            ],
        }
        # Well under replica_lag_time_max_ms: a hung request must fail and be retried before the
        # leader counts this follower as lagging.
        timeout = aiohttp.ClientTimeout(
            total=FETCH_MAX_WAIT_MS / 1000 + FETCH_TIMEOUT_MARGIN_S, sock_connect=1.0
        )
        async with self._client(leader).post(
            f"http://{host}:{port}/replication/fetch", json=body, timeout=timeout
        ) as response:
            payload = await response.read()
            if response.status != 200:
                raise ReplicationWireError(f"HTTP {response.status}: {payload[:200]!r}")
        return decode_fetch_response(payload)

    def _apply(self, leader: int, answer: PartitionData) -> bool:
        """Apply one partition's answer; False if it carried an error."""
        partition = self._replicas.partition(answer.topic, answer.partition)
        if partition is None or partition.is_leader or partition.state.leader != leader:
            return True  # the role changed while the fetch was in flight
        name = f"{answer.topic}-{answer.partition}"
        try:
            problem = partition.apply_fetch_answer(answer)
        except (StorageError, CorruptRecordError) as error:
            log.error("%s: cannot append batches from leader %d: %s", name, leader, error)
            return False
        if problem is not None:
            level = (
                logging.DEBUG
                if answer.error_code not in (0, ErrorCode.OFFSET_OUT_OF_RANGE)
                else logging.WARNING
            )
            log.log(level, "%s (leader %d): %s", name, leader, problem)
        return answer.error_code in (0, ErrorCode.OFFSET_OUT_OF_RANGE)
