"""Push subscriptions: the leader of each partition delivers its messages to every active
subscription on the topic, strictly in order, one unacknowledged delivery at a time.

A subscription is a metadata record (address, topics, readOld, active). For each (subscription,
partition) this broker leads, one ``_Delivery`` task:

1. reads the subscription's committed offset from group ``__flux_push.<id>`` (at that group's
   coordinator); with none it starts at the log start offset (``readOld``, and partitions
   created after the subscription; a ``readOld=false`` subscription had the partition ends
   committed when it was created);
2. reads messages below the high watermark, up to ``topic.buffer`` ahead, and sends them one at
   a time: a webhook gets ``POST <address>/poll {"id","payload","topic",...}`` and a 2xx answer
   is the acknowledgement; a WebSocket subscriber (``ws://`` address) gets the same JSON as a
   text frame and answers ``{"ack": "<id>"}``;
3. advances and commits the offset only after the acknowledgement (commits are coalesced: a
   SIGKILL between an acknowledgement and its commit redelivers that message, at least once);
4. retries a failed delivery (non-2xx, timeout, connection error) ``retry_count`` times,
   ``retry_interval`` apart, each attempt bounded by ``timeout``; then marks the subscription
   inactive through the controller and stops (its offsets are kept).

Deliveries of different subscriptions and partitions are independent tasks, so a subscriber that
hangs or fails never blocks another. When leadership moves, the old leader's tasks stop and the
new leader's start from the committed offset.

Every ``subscriber.cleanup_time`` one broker (the lowest live id) deletes the subscriptions
inactive for longer than ``inactive_time``, with their offsets.

Thread-safety: one owner, the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import aiohttp
from flux.controller.image import MetadataImage, SubscriptionImage
from flux.protocol.errors import CorruptRecordError
from flux.protocol.records import decode_records, iter_batches
from flux.storage import OffsetOutOfRangeError

from ..config import NodeConfig
from ..groups.offsets_client import OffsetsClient, OffsetsUnavailableError, push_group
from ..kafka.apis import KafkaApis
from ..replication.partition import Partition
from ..replication.replica_manager import ReplicaManager
from .common import message_json
from .metrics import BrokerMetrics

__all__ = ["PushManager", "PushSettings"]

log = logging.getLogger("flux.cluster.push")

RECONCILE_INTERVAL_S = 0.5
IDLE_WAIT_S = 1.0
READ_BYTES = 1 << 20
MAX_PUSH_CONNECTIONS = 1000
COMMIT_RETRY_S = 0.2
STOP_TIMEOUT_S = 2.0
WS_SCHEMES = ("ws://", "wss://")


@dataclass(frozen=True)
class PushSettings:
    retry_count: int
    retry_interval_s: float
    timeout_s: float
    inactive_time_ms: int
    cleanup_interval_s: float
    buffer: int

    @classmethod
    def from_config(cls, config: NodeConfig) -> PushSettings:
        subscriber = config.subscriber
        return cls(
            retry_count=subscriber.retry_count,
            retry_interval_s=subscriber.retry_interval_ms / 1000,
            timeout_s=subscriber.timeout_ms / 1000,
            inactive_time_ms=subscriber.inactive_time_ms,
            cleanup_interval_s=subscriber.cleanup_interval_ms / 1000,
            buffer=config.topic.buffer,
        )


class PushManager:
    def __init__(
        self,
        *,
        settings: PushSettings,
        replicas: ReplicaManager,
        offsets: OffsetsClient,
        apis: KafkaApis,
        metrics: BrokerMetrics,
        broker_id: int,
    ) -> None:
        self._settings = settings
        self._replicas = replicas
        self._offsets = offsets
        self._apis = apis
        self._metrics = metrics
        self._broker_id = broker_id
        self._deliveries: dict[tuple[str, str, int], _Delivery] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self._wake = asyncio.Event()
        # Subscriptions this broker marked inactive, with their ``changed_ms`` at that moment:
        # not restarted until the image shows a newer state (no retries beyond retry_count).
        self._marked_inactive: dict[str, int] = {}

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=MAX_PUSH_CONNECTIONS)
            )
        return self._session

    def start(self) -> None:
        self._replicas.add_image_listener(lambda image: self._wake.set())
        self._tasks.append(asyncio.create_task(self._reconcile_forever()))
        self._tasks.append(asyncio.create_task(self._clean_up_forever()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await asyncio.gather(*(d.stop() for d in self._deliveries.values()))
        self._deliveries.clear()
        if self._session is not None:
            await self._session.close()

    # -- which deliveries run here ------------------------------------------------------------

    async def _reconcile_forever(self) -> None:
        while True:
            try:
                await self._reconcile()
            except Exception:
                log.exception("push reconcile failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), RECONCILE_INTERVAL_S)
            self._wake.clear()

    async def _reconcile(self) -> None:
        image = self._replicas.image
        wanted: dict[tuple[str, str, int], SubscriptionImage] = {}
        for subscription in image.subscriptions.values():
            marked = self._marked_inactive.get(subscription.subscription_id)
            if marked is not None and marked != subscription.changed_ms:
                del self._marked_inactive[subscription.subscription_id]
                marked = None
            if not subscription.active or marked is not None:
                continue
            for name in subscription.topics:
                topic = image.topics.get(name)
                if topic is None:
                    continue
                for index in range(len(topic.partitions)):
                    partition = self._replicas.partition(name, index)
                    if partition is not None and partition.is_leader:
                        wanted[(subscription.subscription_id, name, index)] = subscription
        ended = [k for k, d in self._deliveries.items() if k not in wanted or d.finished]
        await asyncio.gather(*(self._deliveries.pop(key).stop() for key in ended))
        for key, subscription in wanted.items():
            if key not in self._deliveries:
                partition = self._replicas.partition(key[1], key[2])
                assert partition is not None
                delivery = _Delivery(self, subscription, partition)
                self._deliveries[key] = delivery
                delivery.start()

    def still_wanted(self, subscription_id: str, partition: Partition) -> bool:
        subscription = self._replicas.image.subscriptions.get(subscription_id)
        current = self._replicas.partition(partition.topic, partition.index)
        return (
            subscription is not None
            and subscription.active
            and subscription_id not in self._marked_inactive
            and current is partition
            and partition.is_leader
        )

    async def mark_inactive(self, subscription_id: str) -> None:
        current = self._replicas.image.subscriptions.get(subscription_id)
        if current is not None:
            self._marked_inactive[subscription_id] = current.changed_ms
        answer = await self._apis.controller_write(
            "POST", f"/controller/subscriptions/{subscription_id}/state", {"active": False}
        )
        if answer.get("error_code", 0) != 0:
            log.warning("cannot mark %s inactive: %s", subscription_id, answer)

    # -- cleanup of inactive subscribers ------------------------------------------------------

    async def _clean_up_forever(self) -> None:
        while True:
            await asyncio.sleep(self._settings.cleanup_interval_s)
            try:
                await self.clean_up_inactive(int(time.time() * 1000))
            except Exception:
                log.exception("subscriber cleanup failed")

    async def clean_up_inactive(self, now_ms: int) -> list[str]:
        image: MetadataImage = self._replicas.image
        live = image.live_broker_ids()
        if not live or live[0] != self._broker_id:
            return []  # one broker does it, so deletions are not raced
        deleted = []
        for subscription in list(image.subscriptions.values()):
            if subscription.active:
                continue
            if now_ms - subscription.changed_ms < self._settings.inactive_time_ms:
                continue
            answer = await self._apis.controller_write(
                "DELETE", f"/controller/subscriptions/{subscription.subscription_id}", None
            )
            if answer.get("error_code", 0) != 0:
                continue
            deleted.append(subscription.subscription_id)
            log.info("deleted inactive subscription %s", subscription.subscription_id)
            with contextlib.suppress(OffsetsUnavailableError):
                await self._offsets.delete(push_group(subscription.subscription_id))
        return deleted


class _Delivery:
    """Delivery of one partition to one subscription (see the module docstring)."""

    def __init__(
        self, manager: PushManager, subscription: SubscriptionImage, partition: Partition
    ) -> None:
        self._manager = manager
        self._subscription = subscription
        self._partition = partition
        self._group = push_group(subscription.subscription_id)
        self._task: asyncio.Task[None] | None = None
        self._acked: int | None = None
        self._committed: int | None = None
        self._commit_wanted = asyncio.Event()
        self._committer: asyncio.Task[None] | None = None
        self._websocket: aiohttp.ClientWebSocketResponse | None = None
        self.finished = False
        kind = "websocket" if subscription.address.startswith(WS_SCHEMES) else "webhook"
        self._kind = kind
        labels = (subscription.subscription_id, partition.topic)
        metrics = manager._metrics
        self._deliveries_metric = metrics.push_deliveries.labels(*labels)
        self._retries_metric = metrics.push_retries.labels(*labels)
        self._failures_metric = metrics.push_failures.labels(*labels)
        self._latency_metric = metrics.push_latency.labels(kind)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())
        self._committer = asyncio.create_task(self._commit_forever())

    async def stop(self) -> None:
        """Stop delivering; commit the last acknowledged offset (bounded: a coordinator that
        does not answer costs a redelivery, never a hung shutdown)."""
        for task in (self._task, self._committer):
            if task is not None:
                task.cancel()
        await asyncio.gather(
            *(t for t in (self._task, self._committer) if t is not None), return_exceptions=True
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._flush_commit(), STOP_TIMEOUT_S)
        if self._websocket is not None:
            with contextlib.suppress(TimeoutError, aiohttp.ClientError, OSError):
                await asyncio.wait_for(self._websocket.close(), STOP_TIMEOUT_S)
            self._websocket = None

    def _wanted(self) -> bool:
        return self._manager.still_wanted(self._subscription.subscription_id, self._partition)

    async def _run(self) -> None:
        try:
            offset = await self._starting_offset()
            if offset is None:
                return
            await self._deliver_from(offset)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("push %s %s-%d failed", self._group, *self._key())
        finally:
            self.finished = True
            self._manager._wake.set()

    def _key(self) -> tuple[str, int]:
        return self._partition.topic, self._partition.index

    async def _starting_offset(self) -> int | None:
        while self._wanted():
            try:
                committed = await self._offsets().fetch(self._group)
            except OffsetsUnavailableError as error:
                log.debug("push %s: offsets not readable yet: %s", self._group, error)
                await asyncio.sleep(COMMIT_RETRY_S)
                continue
            offset = committed.get(self._key(), -1)
            if offset < 0:
                offset = self._partition.log.log_start_offset
            self._committed = offset
            return offset
        return None

    def _offsets(self) -> OffsetsClient:
        return self._manager._offsets

    async def _deliver_from(self, offset: int) -> None:
        partition = self._partition
        pending: deque[Any] = deque()
        while self._wanted():
            if not pending:
                offset = max(offset, partition.log.log_start_offset)
                if offset >= partition.high_watermark:
                    await self._manager._replicas.wait_for_data([partition], IDLE_WAIT_S)
                    continue
                pending.extend(self._read(offset))
                if not pending:
                    await asyncio.sleep(0.01)
                    continue
            record = pending.popleft()
            if not await self._deliver_with_retries(record):
                return
            offset = record.offset + 1
            self._acked = offset
            self._commit_wanted.set()

    def _read(self, offset: int) -> list[Any]:
        partition = self._partition
        limit = self._manager._settings.buffer
        try:
            data = partition.log.read(offset, READ_BYTES, max_offset=partition.high_watermark)
        except OffsetOutOfRangeError:
            return []
        records = []
        for header, raw in iter_batches(data):
            if header.is_control:
                continue
            try:
                decoded = decode_records(bytes(raw), verify_crc=False)
            except CorruptRecordError as error:
                log.error("push %s: unreadable batch at %d: %s", self._group, offset, error)
                return []
            for record in decoded:
                if offset <= record.offset < partition.high_watermark:
                    records.append(record)
                    if len(records) >= limit:
                        return records
        return records

    async def _deliver_with_retries(self, record: Any) -> bool:
        settings = self._manager._settings
        message = message_json(record, self._partition.topic, self._partition.index)
        payload = {
            "id": message["id"],
            "payload": message["value"],
            "topic": message["topic"],
            "partition": message["partition"],
            "offset": message["offset"],
            "key": message["key"],
            "headers": message["headers"],
            "subscription": self._subscription.subscription_id,
        }
        if message.get("value_base64") is not None:
            payload["payload_base64"] = message["value_base64"]
        attempts = 0
        while self._wanted():
            started = time.perf_counter()
            if await self._send(payload):
                self._latency_metric.observe(time.perf_counter() - started)
                self._deliveries_metric.inc()
                return True
            attempts += 1
            if attempts > settings.retry_count:
                self._failures_metric.inc()
                log.warning(
                    "push %s: %s-%d offset %d not acknowledged after %d attempts: inactive",
                    self._group,
                    *self._key(),
                    record.offset,
                    attempts,
                )
                await self._manager.mark_inactive(self._subscription.subscription_id)
                return False
            self._retries_metric.inc()
            await asyncio.sleep(settings.retry_interval_s)
        return False

    async def _send(self, payload: dict[str, Any]) -> bool:
        timeout_s = self._manager._settings.timeout_s
        try:
            if self._kind == "websocket":
                return await asyncio.wait_for(self._send_websocket(payload), timeout_s)
            url = self._subscription.address.rstrip("/") + "/poll"
            async with self._manager.session().post(
                url, json=payload, timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as response:
                await response.read()
                return 200 <= response.status < 300
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as error:
            log.debug("push %s to %s failed: %r", self._group, self._subscription.address, error)
            if self._websocket is not None:
                websocket, self._websocket = self._websocket, None
                with contextlib.suppress(TimeoutError, aiohttp.ClientError, OSError):
                    await asyncio.wait_for(websocket.close(), STOP_TIMEOUT_S)
            return False

    async def _send_websocket(self, payload: dict[str, Any]) -> bool:
        if self._websocket is None or self._websocket.closed:
            self._websocket = await self._manager.session().ws_connect(self._subscription.address)
        await self._websocket.send_json(payload)
        while True:
            message = await self._websocket.receive()
            if message.type != aiohttp.WSMsgType.TEXT:
                raise ConnectionError(f"WebSocket closed: {message.type}")
            answer = message.json()
            if isinstance(answer, dict) and answer.get("ack") == payload["id"]:
                return True
            if isinstance(answer, dict) and answer.get("nack") == payload["id"]:
                return False

    # -- commits ------------------------------------------------------------------------------

    async def _commit_forever(self) -> None:
        while True:
            await self._commit_wanted.wait()
            self._commit_wanted.clear()
            if not await self._flush_commit():
                await asyncio.sleep(COMMIT_RETRY_S)
                self._commit_wanted.set()

    async def _flush_commit(self) -> bool:
        acked = self._acked
        if acked is None or acked == self._committed:
            return True
        try:
            await self._offsets().commit(self._group, [(*self._key(), acked)])
        except (TimeoutError, OffsetsUnavailableError) as error:
            log.debug("push %s: commit of %d failed: %s", self._group, acked, error)
            return False
        self._committed = acked
        return True
