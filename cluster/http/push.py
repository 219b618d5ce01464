"""Push subscriptions: the leader of each partition delivers its messages to every active
subscription on the topic, strictly in offset order, with at most the subscription's window
(``max_in_flight``, 1 by default) of them sent and not yet acknowledged.

A subscription is a metadata record (address, topics, readOld, maxInFlight, active). For each
(subscription, partition) this broker leads, one ``_Delivery`` task:

1. reads the subscription's committed offset from group ``__flux_push.<id>`` (at that group's
   coordinator); with none it starts at the log start offset (``readOld``, and partitions
   created after the subscription; a ``readOld=false`` subscription had the partition ends
   committed when it was created);
2. reads messages below the high watermark, up to ``topic.buffer`` ahead, and sends them in
   offset order while fewer than ``max_in_flight`` messages lie between the acknowledged
   position and the last one sent (a ``DeliveryWindow``): a webhook gets
   ``POST <address>/poll {"id","payload","topic",...}``, one concurrent request per message
   issued in offset order, and a 2xx answer is the acknowledgement; a WebSocket subscriber
   (``ws://`` address) gets the same JSON as text frames on one connection, without waiting
   for answers, and answers ``{"ack": "<id>"}`` or ``{"nack": "<id>"}`` in any order (matched
   by id; a message whose id is still unanswered waits, so an answer names one message);
3. advances the acknowledged position over the contiguous acknowledged prefix only, never past
   an unacknowledged message (control records, and messages that retention removed before
   they were sent, are passed over), and commits it (commits are coalesced: a SIGKILL between
   an acknowledgement and its commit redelivers that message, at least once);
4. on a failure (nack, non-2xx, timeout, connection error) sends nothing new and waits for
   the answers still outstanding (every attempt is bounded by ``timeout``: a webhook request
   gives up, a WebSocket whose answer is late is closed), then after ``retry_interval`` sends
   again from the first unacknowledged message, in order (go-back-N: the messages after it
   come again even if they were acknowledged, so the subscriber sees first deliveries in
   order and repeats only after a failure). After ``retry_count`` such retries without the
   position moving it marks the subscription inactive through the controller and stops (its
   offsets are kept).

With a window of 1 this is one unacknowledged delivery at a time: send, wait for the answer,
retry or move on. The window is read from the metadata image as delivery goes, so a
re-subscription with another ``maxInFlight`` takes effect without a restart.

Deliveries of different subscriptions and partitions are independent tasks, so a subscriber that
hangs or fails never blocks another. When leadership moves, the old leader's tasks stop and the
new leader's start from the committed offset.

Every ``subscriber.cleanup_time`` one broker (the lowest live id) deletes the subscriptions
inactive for longer than ``inactive_time``, with their offsets.

Thread-safety: one owner, the broker's event loop. A delivery's window and read-ahead belong to
its task; the WebSocket reader and the webhook requests only queue answers for it and wake it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import aiohttp
from flux.auth.signing import signature_headers
from flux.controller.image import MetadataImage, SubscriptionImage
from flux.controller.records import MAX_SUBSCRIPTION_IN_FLIGHT
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

__all__ = ["DeliveryWindow", "PushManager", "PushMessage", "PushSettings"]

log = logging.getLogger("flux.cluster.push")

RECONCILE_INTERVAL_S = 0.5
IDLE_WAIT_S = 1.0
READ_BYTES = 1 << 20
MAX_PUSH_CONNECTIONS = 1000
COMMIT_RETRY_S = 0.2
STOP_TIMEOUT_S = 2.0
WS_SCHEMES = ("ws://", "wss://")
#: A read that yields nothing below the high watermark (an unreadable batch) is retried after
#: this pause rather than at once.
READ_RETRY_S = 0.01
#: Answers a delivery holds before its task takes them: one per message in flight, with room
#: for repeated answers; a subscriber that sends more is cut off (a connection failure).
MAX_QUEUED_ANSWERS = 4 * MAX_SUBSCRIPTION_IN_FLIGHT
JSON_HEADERS = {"Content-Type": "application/json"}


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

    def deliveries(self, subscription_id: str) -> list[dict[str, Any]]:
        """How this broker delivers the subscription's partitions it leads: the offset
        acknowledged up to, and the retries spent on the message that keeps failing."""
        return [
            delivery.state()
            for (owner, _, _), delivery in sorted(self._deliveries.items())
            if owner == subscription_id
        ]

    def wanted_subscription(
        self, subscription_id: str, partition: Partition
    ) -> SubscriptionImage | None:
        """The subscription as the image has it now, if this broker should still push
        ``partition`` to it; else None."""
        subscription = self._replicas.image.subscriptions.get(subscription_id)
        if (
            subscription is None
            or not subscription.active
            or subscription_id in self._marked_inactive
            or not partition.is_leader
            or self._replicas.partition(partition.topic, partition.index) is not partition
        ):
            return None
        return subscription

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


@dataclass(frozen=True, slots=True)
class PushMessage:
    """One message as pushed: its offset, its id (what the subscriber answers with) and the
    JSON text sent (made once, sent again as is on a redelivery)."""

    offset: int
    message_id: str
    text: str


@dataclass(slots=True)
class _Sent:
    message: PushMessage
    sent_at: float  # time.perf_counter(), for the latency metric
    deadline: float  # event-loop time by which a WebSocket answer is due
    answered: bool = False
    acked: bool = False


class DeliveryWindow:
    """The go-back-N sender state of one (subscription, partition): the messages sent and not
    yet covered by the acknowledged position, in offset order, with their answers.

    Invariants: sent offsets strictly increase (``next_offset`` is the lowest offset the next
    send may have); ``position`` (every message below it is acknowledged) is the offset of the
    first entry, or ``next_offset`` when there is none, and never goes back; an acknowledgement
    moves it only over the contiguous acknowledged prefix; at most one unanswered entry per
    message id, so an answer names one message; after a failure nothing is sent until
    ``rewind``, once every entry is answered.

    Pure (times are passed in); not thread-safe: one owner, the delivery task.
    """

    def __init__(self, position: int) -> None:
        self.position = position
        self.next_offset = position
        #: The lowest offset that failed since the last rewind (None: no failure).
        self.failed_offset: int | None = None
        self._entries: deque[_Sent] = deque()
        self._unanswered: dict[str, _Sent] = {}

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def settled(self) -> bool:
        """Every message sent has an answer (or was failed)."""
        return not self._unanswered

    def can_send(self, message_id: str, max_in_flight: int) -> bool:
        return (
            self.failed_offset is None
            and len(self._entries) < max_in_flight
            and message_id not in self._unanswered
        )

    def send(self, message: PushMessage, *, sent_at: float, deadline: float) -> None:
        assert self.failed_offset is None, "nothing is sent between a failure and its rewind"
        assert message.offset >= self.next_offset, (message.offset, self.next_offset)
        assert message.message_id not in self._unanswered, message.message_id
        entry = _Sent(message, sent_at, deadline)
        self._entries.append(entry)
        self._unanswered[message.message_id] = entry
        self.next_offset = message.offset + 1

    def answer(self, message_id: str, *, ok: bool) -> _Sent | None:
        """Record the answer to the unanswered message ``message_id``; None (ignored) if no
        such message is waiting for one."""
        entry = self._unanswered.pop(message_id, None)
        if entry is None:
            return None
        entry.answered = True
        entry.acked = ok
        if not ok:
            self._failed(entry.message.offset)
        return entry

    def advance(self) -> int:
        """Move ``position`` over the acknowledged prefix; how many messages it passed."""
        passed = 0
        while self._entries and self._entries[0].acked:
            self._entries.popleft()
            passed += 1
        position = self._entries[0].message.offset if self._entries else self.next_offset
        assert position >= self.position, (position, self.position)
        self.position = position
        return passed

    def oldest_unanswered(self) -> _Sent | None:
        # Entries before the first unanswered one are answered but held back by a failure,
        # so this looks past more than one entry only between a failure and its rewind.
        for entry in self._entries:
            if not entry.answered:
                return entry
        return None

    def fail_unanswered(self) -> None:
        """The connection is gone or an answer is late: every unanswered message failed."""
        if not self._unanswered:
            return
        for entry in self._unanswered.values():
            entry.answered = True
        self._failed(min(e.message.offset for e in self._unanswered.values()))
        self._unanswered.clear()

    def skip_to(self, offset: int) -> None:
        """Nothing is in flight and nothing deliverable lies below ``offset`` (control
        records, messages removed by retention): the position moves there."""
        assert not self._entries and self.failed_offset is None
        if offset > self.next_offset:
            self.next_offset = self.position = offset

    def rewind(self) -> list[PushMessage]:
        """After a failure, once settled: the messages to send again, in order, from the first
        unacknowledged one (go-back-N); the window is then empty at ``position``."""
        assert self.failed_offset is not None and self.settled
        self.advance()
        again = [entry.message for entry in self._entries]
        self._entries.clear()
        self.next_offset = self.position
        self.failed_offset = None
        return again

    def _failed(self, offset: int) -> None:
        if self.failed_offset is None or offset < self.failed_offset:
            self.failed_offset = offset


class _Delivery:
    """Delivery of one partition to one subscription (see the module docstring).

    Invariants: messages go out in strictly increasing offsets between rewinds, at most the
    subscription's ``max_in_flight`` past the window's position; the offset committed is a
    position the window reached, so it never passes an unacknowledged message.

    Thread-safety: one owner, the delivery task (the broker's event loop); its WebSocket reader
    and webhook request tasks only append to ``_answers`` and set ``_wake``.
    """

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
        self.finished = False
        kind = "websocket" if subscription.address.startswith(WS_SCHEMES) else "webhook"
        self._kind = kind
        self._url = subscription.address.rstrip("/") + "/poll"
        # Answers ``(message id, ok, perf_counter at arrival)`` queued for the delivery task,
        # which ``_wake`` wakes (answers, new data, a broken connection).
        self._answers: deque[tuple[str, bool, float]] = deque()
        self._wake = asyncio.Event()
        self._websocket: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        # The connection failed (a send, or the subscriber closed or broke it): the messages
        # in flight on it fail.
        self._broken = False
        self._posts: set[asyncio.Task[None]] = set()
        # The position whose message failed last, and how many rounds failed there in a row.
        self._failing_position = -1
        self._attempts = 0
        labels = (subscription.subscription_id, partition.topic)
        metrics = manager._metrics
        self._deliveries_metric = metrics.push_deliveries.labels(*labels)
        self._retries_metric = metrics.push_retries.labels(*labels)
        self._failures_metric = metrics.push_failures.labels(*labels)
        self._latency_metric = metrics.push_latency.labels(kind)

    def state(self) -> dict[str, Any]:
        """For ``GET /subscriptions/{id}``: where this delivery stands."""
        # Retries count until the message that failed is acknowledged (the position passes it).
        failing = self._attempts > 0 and (
            self._acked is None or self._acked <= self._failing_position
        )
        return {
            "topic": self._partition.topic,
            "partition": self._partition.index,
            "broker": self._manager._broker_id,
            "kind": self._kind,
            "acknowledged": self._acked,
            "retries": self._attempts if failing else 0,
            "retrying_offset": self._failing_position if failing else None,
            "retry_count": self._manager._settings.retry_count,
        }

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
        await self._abort_in_flight()

    def _current(self) -> SubscriptionImage | None:
        return self._manager.wanted_subscription(
            self._subscription.subscription_id, self._partition
        )

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
        while self._current() is not None:
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

    # -- the delivery loop --------------------------------------------------------------------

    async def _deliver_from(self, offset: int) -> None:
        window = DeliveryWindow(offset)
        pending: deque[PushMessage] = deque()  # read ahead, not yet sent, in offset order
        read_offset = offset  # where the next read starts
        while (subscription := self._current()) is not None:
            self._take_answers(window)
            if self._broken or self._answer_overdue(window):
                await self._abort_in_flight()
                self._take_answers(window)  # what arrived before the connection went
                window.fail_unanswered()
            if window.failed_offset is not None:
                if not window.settled:
                    await self._wait(window, read_offset=None)
                elif not await self._go_back(window, pending):
                    return
                continue
            if not pending:
                read_offset = self._read_more(window, pending, read_offset)
                if not pending and read_offset < self._partition.high_watermark:
                    await asyncio.sleep(READ_RETRY_S)  # an unreadable batch: do not spin
                    continue
            await self._send_window(window, pending, subscription.max_in_flight)
            await self._wait(window, read_offset=None if pending else read_offset)

    async def _go_back(self, window: DeliveryWindow, pending: deque[PushMessage]) -> bool:
        """A failed round is settled: after ``retry_interval``, delivery resumes from the first
        unacknowledged message. False, with the subscription marked inactive, once
        ``retry_count`` retries have not moved the position."""
        settings = self._manager._settings
        pending.extendleft(reversed(window.rewind()))
        self._note_position(window)
        if window.position != self._failing_position:
            self._failing_position, self._attempts = window.position, 0
        self._attempts += 1
        if self._attempts > settings.retry_count:
            self._failures_metric.inc()
            log.warning(
                "push %s: %s-%d offset %d not acknowledged after %d attempts: inactive",
                self._group,
                *self._key(),
                window.position,
                self._attempts,
            )
            await self._manager.mark_inactive(self._subscription.subscription_id)
            return False
        self._retries_metric.inc()
        await asyncio.sleep(settings.retry_interval_s)
        return True

    def _read_more(self, window: DeliveryWindow, pending: deque[PushMessage], offset: int) -> int:
        """Read ahead from ``offset`` into ``pending``; the offset the next read starts at."""
        offset = max(offset, self._partition.log.log_start_offset)  # retention moved on
        if offset < self._partition.high_watermark:
            messages, offset = self._read(offset)
            pending.extend(messages)
        if not pending and not window and window.failed_offset is None:
            window.skip_to(offset)
            self._note_position(window)
        return offset

    def _read(self, offset: int) -> tuple[list[PushMessage], int]:
        """Up to ``topic.buffer`` messages from ``offset`` below the high watermark, and the
        offset after the last record read (control records included)."""
        partition = self._partition
        high_watermark = partition.high_watermark
        limit = self._manager._settings.buffer
        try:
            data = partition.log.read(offset, READ_BYTES, max_offset=high_watermark)
        except OffsetOutOfRangeError:
            return [], offset
        messages: list[PushMessage] = []
        for header, raw in iter_batches(data):
            batch_end = min(header.base_offset + header.last_offset_delta + 1, high_watermark)
            if not header.is_control:
                try:
                    decoded = decode_records(bytes(raw), verify_crc=False)
                except CorruptRecordError as error:
                    log.error("push %s: unreadable batch at %d: %s", self._group, offset, error)
                    return messages, offset
                for record in decoded:
                    if offset <= record.offset < high_watermark:
                        messages.append(self._message(record))
                        offset = record.offset + 1
                        if len(messages) >= limit:
                            return messages, offset
            offset = max(offset, batch_end)
        return messages, offset

    def _message(self, record: Any) -> PushMessage:
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
        return PushMessage(record.offset, message["id"], json.dumps(payload))

    def _take_answers(self, window: DeliveryWindow) -> None:
        answers = self._answers
        if not answers:
            return
        acked = 0
        while answers:
            message_id, ok, arrived = answers.popleft()
            entry = window.answer(message_id, ok=ok)
            if entry is None:
                continue  # an answer to nothing in flight (a repeat): ignored
            if ok:
                acked += 1
                self._latency_metric.observe(arrived - entry.sent_at)
            else:
                log.debug(
                    "push %s: %s-%d offset %d failed",
                    self._group,
                    *self._key(),
                    entry.message.offset,
                )
        if acked:
            self._deliveries_metric.inc(acked)
        if window.advance():
            self._note_position(window)

    def _note_position(self, window: DeliveryWindow) -> None:
        if window.position != self._acked:
            self._acked = window.position
            self._commit_wanted.set()

    def _answer_overdue(self, window: DeliveryWindow) -> bool:
        """A WebSocket answer is past its deadline. (A webhook request bounds itself and
        always answers, so its entries are never failed from here.)"""
        if self._kind != "websocket":
            return False
        oldest = window.oldest_unanswered()
        return oldest is not None and asyncio.get_running_loop().time() >= oldest.deadline

    async def _wait(self, window: DeliveryWindow, *, read_offset: int | None) -> None:
        """Until an answer, a broken connection, the next answer deadline, data at or past
        ``read_offset`` (None: not waiting for data) or ``IDLE_WAIT_S``."""
        if self._answers or self._broken:
            return
        partition = self._partition
        if read_offset is not None and partition.high_watermark > read_offset:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + IDLE_WAIT_S
        if self._kind == "websocket" and (oldest := window.oldest_unanswered()) is not None:
            until = min(until, oldest.deadline)
        self._wake.clear()
        data: asyncio.Future[None] | None = None
        if read_offset is not None:
            # As ReplicaManager.wait_for_data, without a task: the partition completes its
            # waiters when its high watermark moves or its role changes.
            data = loop.create_future()
            data.add_done_callback(lambda _: self._wake.set())
            partition.waiters.add(data)
        try:
            async with asyncio.timeout_at(until):
                await self._wake.wait()
        except TimeoutError:
            pass
        finally:
            if data is not None:
                partition.waiters.discard(data)

    # -- sending ------------------------------------------------------------------------------

    async def _send_window(
        self, window: DeliveryWindow, pending: deque[PushMessage], max_in_flight: int
    ) -> None:
        """Send pending messages in order while the window has room."""
        if not pending or not window.can_send(pending[0].message_id, max_in_flight):
            return
        timeout_s = self._manager._settings.timeout_s
        loop = asyncio.get_running_loop()
        if self._kind == "webhook":
            while pending and window.can_send(pending[0].message_id, max_in_flight):
                message = pending.popleft()
                window.send(message, sent_at=time.perf_counter(), deadline=loop.time() + timeout_s)
                post = asyncio.create_task(self._post(message))
                self._posts.add(post)
                post.add_done_callback(self._posts.discard)
            return
        try:
            # Bounds the connect and the socket's backpressure; answers have their deadlines.
            async with asyncio.timeout(timeout_s):
                while pending and window.can_send(pending[0].message_id, max_in_flight):
                    message = pending.popleft()
                    window.send(
                        message, sent_at=time.perf_counter(), deadline=loop.time() + timeout_s
                    )
                    if self._websocket is None:
                        self._websocket = await self._manager.session().ws_connect(
                            self._subscription.address,
                            headers=self._signed(self._subscription.subscription_id.encode()),
                        )
                        self._reader = asyncio.create_task(self._read_answers(self._websocket))
                    await self._websocket.send_str(message.text)
        except (TimeoutError, aiohttp.ClientError, OSError, RuntimeError) as error:
            # RuntimeError: aiohttp's "cannot write to closing transport". The message being
            # sent is in the window already, so it fails with the connection.
            log.debug("push %s to %s failed: %r", self._group, self._subscription.address, error)
            self._broken = True

    async def _read_answers(self, websocket: aiohttp.ClientWebSocketResponse) -> None:
        """Queue the subscriber's answers until the connection ends; anything but a JSON text
        frame ends it (the unanswered messages then fail)."""
        answers = self._answers
        try:
            async for frame in websocket:
                if frame.type != aiohttp.WSMsgType.TEXT:
                    raise ConnectionError(f"WebSocket frame {frame.type!r}")
                answer = json.loads(frame.data)
                if not isinstance(answer, dict):
                    continue
                if isinstance(acked := answer.get("ack"), str):
                    answers.append((acked, True, time.perf_counter()))
                elif isinstance(nacked := answer.get("nack"), str):
                    answers.append((nacked, False, time.perf_counter()))
                else:
                    continue
                if len(answers) > MAX_QUEUED_ANSWERS:
                    raise ConnectionError(f"more than {MAX_QUEUED_ANSWERS} answers queued")
                self._wake.set()
        except (aiohttp.ClientError, OSError, ValueError, RuntimeError) as error:
            log.debug("push %s: WebSocket answers ended: %r", self._group, error)
        finally:
            if websocket is self._websocket:
                self._broken = True
                self._wake.set()

    async def _post(self, message: PushMessage) -> None:
        """One webhook request; its answer is queued unless the request is cancelled."""
        timeout_s = self._manager._settings.timeout_s
        ok = False
        try:
            async with asyncio.timeout(timeout_s):
                payload = message.text.encode()
                async with self._manager.session().post(
                    self._url,
                    data=payload,
                    headers={**JSON_HEADERS, **self._signed(payload)},
                    timeout=aiohttp.ClientTimeout(total=timeout_s),
                ) as response:
                    await response.read()
                    ok = 200 <= response.status < 300
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as error:
            log.debug("push %s to %s failed: %r", self._group, self._subscription.address, error)
        self._answers.append((message.message_id, ok, time.perf_counter()))
        self._wake.set()

    def _signed(self, payload: bytes) -> dict[str, str]:
        """The signature headers of ``payload`` (none for a subscription without a secret)."""
        secret = self._subscription.signing_secret
        if not secret:
            return {}
        return signature_headers(secret, int(time.time() * 1000), payload)

    async def _abort_in_flight(self) -> None:
        """Drop the connection and the requests in flight (their messages count as failed);
        afterwards no answer from them can arrive."""
        posts = list(self._posts)
        for post in posts:
            post.cancel()
        await asyncio.gather(*posts, return_exceptions=True)
        websocket, self._websocket = self._websocket, None
        if websocket is not None:
            with contextlib.suppress(TimeoutError, aiohttp.ClientError, OSError):
                await asyncio.wait_for(websocket.close(), STOP_TIMEOUT_S)
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None
        self._broken = False

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
