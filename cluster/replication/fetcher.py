"""Follower side of replication: one fetch session per leader broker, over an aiohttp WebSocket.

For every broker that leads partitions this broker follows, a ``_LeaderLink`` keeps one
WebSocket open to ``GET /replication/session`` on the leader's HTTP port and runs a fetch
session on it (the leader's side and the rules are in ``session.py``). The first request on a
connection names every partition followed there with its position (this replica's log end, the
epoch of its last batch, the leader epoch it follows, its topic id); later requests name only
partitions whose position moved (batches appended, a truncation, a new leader epoch), newly
followed ones, and ``forgotten`` ones. So a round costs what moved, not what exists.

Each answer is applied partition by partition: append the batches as they are (offsets and
epochs from the leader), follow the leader's high watermark and log start, truncate a
divergent tail to where the leader says the common history ends, or restart an empty log when
the leader no longer has what this replica needs. A partition answered with an error is named
again after ``ERROR_BACKOFF_S`` (the request then waits no longer than that). An offline
replica (its log directory failed: ``ReplicaManager.fail_log_directory``) is not fetched: it
leaves every session at once, and the leader drops it from the ISR (the controller does, as
this broker asks to be fenced).

The partitions followed from each leader are regrouped on every metadata image that moved a
leader or a replica of this broker (a pass over this broker's partitions then, never per round;
an ISR or config change costs nothing here). A change for a leader whose
request is parked is sent at once as a second request, which ends the parked one's wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import aiohttp
from flux.controller.image import MetadataImage
from flux.protocol.errors import CorruptRecordError, ErrorCode
from flux.storage import StorageError

from .partition import Partition
from .replica_manager import ReplicaManager
from .wire import (
    FetchEntry,
    FetchRequest,
    PartitionData,
    ReplicationWireError,
    decode_fetch_response,
    encode_fetch_request,
)

__all__ = ["ReplicaFetcherManager"]

log = logging.getLogger("flux.cluster.fetcher")

FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 16 << 20
PARTITION_FETCH_MAX_BYTES = 4 << 20
#: An answer later than its request's wait plus this margin means the connection is dead.
FETCH_TIMEOUT_MARGIN_S = 2.0
CONNECT_TIMEOUT_S = 2.0
ERROR_BACKOFF_S = 0.1
MAX_ERROR_BACKOFF_S = 1.0
#: ``stop`` waits this long for the fetcher tasks, then leaves them (the process is exiting).
STOP_TIMEOUT_S = 5.0
#: A leader whose connection keeps breaking is reported at most this often.
REPORT_INTERVAL_S = 0.5

TopicPartition = tuple[str, int]
#: What the leader's session holds for a partition: topic id, fetch offset, last fetched
#: epoch, leader epoch.
Position = tuple[str, int, int, int]


class _LeaderClosedError(ReplicationWireError):
    """The leader closed the session (it stops, or refused a request)."""


class ReplicaFetcherManager:
    """Starts one ``_LeaderLink`` per leader broker and regroups partitions on every image."""

    def __init__(
        self,
        replicas: ReplicaManager,
        *,
        broker_id: int,
        incarnation_id: str,
        internal: Any = None,
    ) -> None:
        self._replicas = replicas
        #: ``cluster.internal_security.InternalSecurity``: scheme, TLS and node credential.
        self.internal = internal
        self.broker_id = broker_id
        self.incarnation_id = incarnation_id
        self._links: dict[int, _LeaderLink] = {}
        self._client: aiohttp.ClientSession | None = None
        self.stopping = False
        #: Called with (leader id, its incarnation) when the connection to a leader breaks or
        #: is refused: the node tells the controller, which probes that broker at once
        #: (``flux.controller.liveness``) instead of waiting for its session to end.
        self.on_leader_lost: Callable[[int, str], None] | None = None
        self._reported: dict[tuple[int, str], float] = {}
        replicas.add_image_listener(self._on_image)
        replicas.add_offline_listener(lambda _failure: self._regroup_all())

    @property
    def image(self) -> MetadataImage:
        return self._replicas.image

    def _on_image(self, image: MetadataImage) -> None:
        if self.stopping or not self._replicas.roles_changed:
            return  # an ISR or config change: every partition follows the same leader as before
        self._regroup_all()

    def _regroup_all(self) -> None:
        """Group the followed partitions by leader and hand each link its group."""
        if self.stopping:
            return
        groups: dict[int, dict[TopicPartition, Partition]] = {}
        for partition in self._replicas.partitions():
            leader = partition.state.leader
            if (
                not partition.is_leader
                and not partition.offline
                and leader >= 0
                and leader != self.broker_id
            ):
                groups.setdefault(leader, {})[(partition.topic, partition.index)] = partition
        for leader, link in self._links.items():
            link.follow(groups.pop(leader, {}))
        for leader, partitions in groups.items():
            link = _LeaderLink(self, leader)
            self._links[leader] = link
            link.follow(partitions)
            link.start()

    def client(self) -> aiohttp.ClientSession:
        if self._client is None or self._client.closed:
            self._client = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=1.0)
            )
        return self._client

    async def stop(self) -> None:
        """Cancel every link, close the connections, wait (bounded) for the tasks."""
        self.stopping = True
        tasks = [link.task for link in self._links.values() if link.task is not None]
        self._links.clear()
        for task in tasks:
            task.cancel()
        if self._client is not None:
            await self._client.close()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)
            if pending:
                log.warning(
                    "%d replica fetchers did not stop in %.0f s", len(pending), STOP_TIMEOUT_S
                )

    def leader_lost(self, leader: int, incarnation_id: str) -> None:
        if self.on_leader_lost is None or self.stopping:
            return
        now = time.monotonic()
        if now - self._reported.get((leader, incarnation_id), float("-inf")) < REPORT_INTERVAL_S:
            return
        self._reported[(leader, incarnation_id)] = now
        self.on_leader_lost(leader, incarnation_id)

    def batched_epoch_writes(self) -> contextlib.AbstractContextManager[None]:
        """One LMDB transaction for the leader epochs that one fetch answer starts."""
        return self._replicas.batched_epoch_writes()

    def apply(self, leader: int, answer: PartitionData) -> bool:
        """Apply one partition's answer; False if it carried an error or could not be stored."""
        partition = self._replicas.partition(answer.topic, answer.partition)
        if (
            partition is None
            or partition.is_leader
            or partition.offline
            or partition.state.leader != leader
        ):
            return True  # the role changed (or the disk failed) while the fetch was in flight
        name = f"{answer.topic}-{answer.partition}"
        try:
            problem = partition.apply_fetch_answer(answer)
        except OSError as error:  # LogDirectoryError included: the disk failed
            log.error("%s: cannot store batches from leader %d: %s", name, leader, error)
            self._replicas.fail_log_directory(error, what=f"replicating {name}")
            return False
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


class _LeaderLink:
    """The fetch session with one leader: reconnects with backoff, never dies on an error."""

    def __init__(self, manager: ReplicaFetcherManager, leader: int) -> None:
        self._manager = manager
        self.leader = leader
        self.wanted: dict[TopicPartition, Partition] = {}
        self._regrouped = True
        self._changed = asyncio.Event()
        # The running session's wait (for an answer, a change or a deadline): one plain
        # future resolved by ``_wake``, not a task per receive and ``asyncio.wait`` per round.
        self._waiter: asyncio.Future[None] | None = None
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    def follow(self, wanted: dict[TopicPartition, Partition]) -> None:
        self.wanted = wanted
        self._regrouped = True
        self._changed.set()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _run(self) -> None:
        backoff = ERROR_BACKOFF_S
        while not self._manager.stopping:
            registration = self._manager.image.brokers.get(self.leader)
            if not self.wanted or registration is None or registration.fenced:
                log.debug(
                    "fetcher for broker %d idle (%d partitions)", self.leader, len(self.wanted)
                )
                self._changed.clear()
                await self._changed.wait()
                continue
            address = (registration.http_host, registration.http_port)
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    internal = self._manager.internal
                    where = f"{address[0]}:{address[1]}"
                    socket = await self._manager.client().ws_connect(
                        internal.url(where, "/replication/session")
                        if internal is not None
                        else f"http://{where}/replication/session",
                        headers=internal.headers if internal is not None else None,
                        ssl=internal.ssl if internal is not None else True,
                        params={
                            "replica_id": str(self._manager.broker_id),
                            "broker_epoch": self._manager.incarnation_id,
                        },
                        compress=0,
                        max_msg_size=0,
                        timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=1.0),
                    )
                try:
                    if await self._session(socket, address):
                        backoff = ERROR_BACKOFF_S
                finally:
                    await socket.close()
            except asyncio.CancelledError:
                raise
            except (aiohttp.ClientError, TimeoutError, OSError, ReplicationWireError) as error:
                log.debug("replication session with broker %d failed: %r", self.leader, error)
                if not isinstance(error, TimeoutError) and (
                    isinstance(error, _LeaderClosedError)
                    or not isinstance(error, ReplicationWireError)
                ):
                    # Broken or refused (a timeout says nothing: the leader may be busy).
                    self._manager.leader_lost(self.leader, registration.incarnation_id)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_ERROR_BACKOFF_S)
            except Exception:
                log.exception("fetcher for leader %d failed; restarting it", self.leader)
                await asyncio.sleep(MAX_ERROR_BACKOFF_S)

    async def _session(
        self, socket: aiohttp.ClientWebSocketResponse, address: tuple[str, int]
    ) -> bool:
        """Run the session until the leader moves or has nothing for us; raises on a broken
        connection. True once at least one answer arrived.

        A reader task (one per connection) queues what arrives on ``inbox`` and wakes this
        loop, which otherwise sleeps on one future that an image change (``follow``) or the
        oldest request's deadline also ends."""
        loop = asyncio.get_running_loop()
        sent: dict[TopicPartition, Position] = {}
        pending: set[TopicPartition] = set()
        forgotten: list[TopicPartition] = []
        retry_at: dict[TopicPartition, float] = {}
        in_flight: deque[float] = deque()  # deadlines of the requests awaiting answers
        inbox: deque[aiohttp.WSMessage] = deque()
        reader = asyncio.create_task(self._read(socket, inbox))
        answered = False
        self._regrouped = True
        try:
            while not self._manager.stopping:
                registration = self._manager.image.brokers.get(self.leader)
                if (
                    registration is None
                    or registration.fenced
                    or (registration.http_host, registration.http_port) != address
                    or not self.wanted
                ):
                    return answered
                if self._regrouped:
                    self._regrouped = False
                    self._regroup(sent, pending, forgotten, retry_at)
                now = loop.time()
                for key, at in list(retry_at.items()):
                    if at <= now:
                        del retry_at[key]
                        pending.add(key)
                if not in_flight or (len(in_flight) == 1 and (pending or forgotten)):
                    max_wait_ms = FETCH_MAX_WAIT_MS
                    if retry_at:
                        soonest = min(retry_at.values()) - now
                        max_wait_ms = max(0, min(max_wait_ms, int(soonest * 1000) + 1))
                    request = FetchRequest(
                        max_wait_ms, FETCH_MAX_BYTES, self._entries(pending, sent), forgotten
                    )
                    pending.clear()
                    forgotten = []
                    await socket.send_bytes(encode_fetch_request(request))
                    in_flight.append(now + max_wait_ms / 1000 + FETCH_TIMEOUT_MARGIN_S)
                if not inbox:
                    if reader.done():
                        reader.result()  # raises what ended the reader
                        raise _LeaderClosedError("the leader's session ended")
                    timeout = in_flight[0] - loop.time()
                    if timeout <= 0:
                        raise TimeoutError(f"broker {self.leader} did not answer a fetch")
                    waiter = self._waiter = loop.create_future()
                    timer = loop.call_later(timeout, self._wake)
                    try:
                        await waiter
                    finally:
                        self._waiter = None
                        timer.cancel()
                    continue
                message = inbox.popleft()
                if message.type is not aiohttp.WSMsgType.BINARY:
                    raise _LeaderClosedError(f"leader closed the session ({message.type.name})")
                in_flight.popleft()
                answered = True
                self._apply(decode_fetch_response(message.data), sent, pending, retry_at)
            return answered
        finally:
            reader.cancel()

    async def _read(
        self, socket: aiohttp.ClientWebSocketResponse, inbox: deque[aiohttp.WSMessage]
    ) -> None:
        """Queue every message of ``socket`` on ``inbox`` until one that is not an answer;
        wakes the session for each, and when it ends (with an error too)."""
        try:
            while True:
                message = await socket.receive()
                inbox.append(message)
                self._wake()
                if message.type is not aiohttp.WSMsgType.BINARY:
                    return
        finally:
            self._wake()

    def _regroup(
        self,
        sent: dict[TopicPartition, Position],
        pending: set[TopicPartition],
        forgotten: list[TopicPartition],
        retry_at: dict[TopicPartition, float],
    ) -> None:
        """After an image change: forget what we no longer follow here, name what is new or
        follows a new leader epoch."""
        for key in [key for key in sent if key not in self.wanted]:
            del sent[key]
            forgotten.append(key)
        for key in [key for key in retry_at if key not in self.wanted]:
            del retry_at[key]
        for key, partition in self.wanted.items():
            held = sent.get(key)
            if key in retry_at:
                continue
            if held is None or held[0] != partition.topic_id or held[3] != partition.leader_epoch:
                pending.add(key)

    def _entries(
        self, pending: set[TopicPartition], sent: dict[TopicPartition, Position]
    ) -> list[FetchEntry]:
        entries = []
        for key in pending:
            partition = self.wanted.get(key)
            if (
                partition is None
                or partition.is_leader
                or partition.offline
                or partition.state.leader != self.leader
            ):
                continue
            position = (
                partition.topic_id,
                partition.log_end_offset,
                partition.epochs.latest_epoch,
                partition.leader_epoch,
            )
            sent[key] = position
            entries.append(FetchEntry(key[0], key[1], *position, PARTITION_FETCH_MAX_BYTES))
        return entries

    def _apply(
        self,
        answers: list[PartitionData],
        sent: dict[TopicPartition, Position],
        pending: set[TopicPartition],
        retry_at: dict[TopicPartition, float],
    ) -> None:
        now = asyncio.get_running_loop().time()
        with self._manager.batched_epoch_writes():
            stored_all = [self._manager.apply(self.leader, answer) for answer in answers]
        for answer, stored in zip(answers, stored_all, strict=True):
            key = (answer.topic, answer.partition)
            if answer.error_code == ErrorCode.NONE and answer.diverging_epoch < 0:
                if not stored:
                    # The leader moved its position past batches we could not store: name
                    # our real position again, after a pause.
                    retry_at[key] = now + ERROR_BACKOFF_S
                elif answer.records:
                    pending.add(key)  # confirm the new position (it moves the high watermark)
                continue
            sent.pop(key, None)  # the leader dropped it from the session
            if answer.error_code in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE) and stored:
                pending.add(key)  # truncated or restarted: fetch from the new position
            else:
                retry_at[key] = now + ERROR_BACKOFF_S
