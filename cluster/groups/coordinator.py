"""The group coordinator: consumer groups and committed offsets, stored in ``__consumer_offsets``.

The coordinator of group ``g`` is the leader of partition ``partition_for_group(g, N)`` of the
internal topic ``__consumer_offsets`` (created on the first FindCoordinator). Group metadata
and committed offsets are records in that partition, written like any produce with
``acks=all``, so they are replicated and survive a coordinator SIGKILL or a full restart: when
a broker becomes the leader of an offsets partition it replays the partition and rebuilds the
groups and offsets it holds; when it loses leadership it answers parked requests with
``NOT_COORDINATOR`` and forgets them.

The protocol rules live in the pure ``Group`` state machine (``state``); this module runs
it on the event loop: it parks JoinGroup/SyncGroup requests on futures, executes the
machine's effects (respond, persist, schedule a tick) in order, and writes offset commits.

**Compaction.** ``__consumer_offsets`` is compacted (``cleanup.policy=compact``, created so by
``create_offsets_topic``): each record is keyed by (group, topic, partition) or by group
(``offsets_records``), so the log cleaner keeps the newest commit of every partition of every
group however old it is, and a deleted offset or group is a tombstone (a null value) that
replay applies as a delete. Nothing is deleted by age: offsets go only through tombstones.
A cluster whose ``__consumer_offsets`` or ``__flux_spark_sink`` (the Spark sink's marker
topic, whose markers are group offsets) predates this is converted: the broker leading
partition 0 of such a topic whose ``cleanup.policy`` lacks ``compact`` calls
``create_offsets_topic`` (which asks the controller to set ``cleanup.policy=compact`` on them)
until its metadata image shows the change, retrying with backoff; a topic whose policy is
``compact,delete`` (an operator's choice) is left alone.

**Offset expiration** (``offsets.retention.minutes``, KIP-211; rules in ``expiration``).
Every ``check_interval_ms`` the coordinator writes tombstones for the expired offsets of the
groups it coordinates, and the group's tombstone when an EMPTY group has none left. Planning
and appending happen in one step of the event loop, so a commit that arrives meanwhile is
never deleted. The groups of live push subscriptions (``__flux_push.<id>`` whose subscription
is in the metadata image) never expire: the subscription is their member.

**OffsetDelete** (``delete_offsets``): tombstones for the named partitions of a group, with
Kafka's refusals (``Group.validate_offset_delete``, GROUP_SUBSCRIBED_TO_TOPIC per partition).

Thread-safety: one owner, the broker's event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from flux.controller.image import MetadataImage
from flux.protocol.control import COMMIT, control_type
from flux.protocol.errors import CorruptRecordError, ErrorCode
from flux.protocol.records import build_batch, decode_records, iter_batches

from ..config import NodeConfig
from ..replication.partition import Partition, ProducerRejectedError
from ..replication.replica_manager import ReplicaManager
from .expiration import plan_expiration
from .offsets_records import (
    PUSH_GROUP_PREFIX,
    OffsetCommitEntry,
    OffsetsRecordError,
    OffsetsState,
    group_metadata_record,
    offset_commit_record,
    parse_record,
    partition_for_group,
    tombstone_for_group,
    tombstone_for_offset,
)
from .state import (
    DEFAULT_MAX_SESSION_TIMEOUT_MS,
    DEFAULT_MIN_SESSION_TIMEOUT_MS,
    Effect,
    Group,
    GroupState,
    Persist,
    Respond,
    ScheduleTick,
    join_error_response,
    sync_error_response,
)

__all__ = [
    "COMPACTED_INTERNAL_TOPICS",
    "OFFSETS_TOPIC",
    "SPARK_SINK_MARKER_TOPIC",
    "GroupCoordinator",
    "OffsetsRetention",
]

log = logging.getLogger("flux.cluster.groups")

OFFSETS_TOPIC = "__consumer_offsets"
#: The Spark sink's marker topic (``flux.spark.limits.SINK_MARKER_TOPIC``; ``cluster`` does
#: not import ``spark``, a test keeps the two equal).
SPARK_SINK_MARKER_TOPIC = "__flux_spark_sink"
#: Internal topics whose data are group offsets, kept with ``cleanup.policy=compact``.
COMPACTED_INTERNAL_TOPICS = (OFFSETS_TOPIC, SPARK_SINK_MARKER_TOPIC)
MAX_METADATA_LENGTH = 4096
WRITE_TIMEOUT_S = 10.0
LOAD_READ_BYTES = 8 << 20
#: One batch of tombstones (OffsetDelete, expiration) holds at most this many records and
#: about this many key bytes; more go in further batches.
TOMBSTONES_PER_BATCH_MAX = 1000
TOMBSTONE_BATCH_BYTES_MAX = 512 << 10
#: Retries of the conversion of an internal topic to compaction back off between these.
COMPACT_RETRY_MIN_S = 1.0
COMPACT_RETRY_MAX_S = 30.0

Records = list[tuple[bytes, bytes | None]]
#: What may be written: records whose values are all bytes, all tombstones, or mixed.
RecordsIn = Sequence[tuple[bytes, bytes | None]]


#: The wall clock (ms) when this process started, less the monotonic clock then; see
#: ``_now_ms``.
_WALL_MINUS_MONOTONIC_MS = time.time() * 1000 - time.monotonic() * 1000


def _now_ms() -> int:
    """The group state machine's clock: the wall clock as of this process's start, advanced
    by the monotonic clock. Session, join and sync deadlines are computed with it, so a step
    of the system clock (NTP, an operator) neither expires every session at once (a step
    forward) nor postpones every deadline by the size of a step back: the chaos scenario of
    a coordinator whose clock jumped an hour ahead and back left a group without any
    assignment until the end of the run (an hour, had it run on). The times it writes (commit
    times, when a group emptied) differ from the wall clock only by steps made while this
    process runs."""
    return int(_WALL_MINUS_MONOTONIC_MS + time.monotonic() * 1000)


@dataclass(frozen=True)
class OffsetsRetention:
    """Kafka's ``offsets.retention.minutes`` (as ms) and ``offsets.retention.check.interval.ms``."""

    retention_ms: int = 7 * 24 * 3600 * 1000
    check_interval_ms: int = 600_000

    def __post_init__(self) -> None:
        assert self.retention_ms > 0 and self.check_interval_ms > 0, self

    @classmethod
    def from_config(cls, config: NodeConfig) -> OffsetsRetention:
        """``[broker] offsets_retention_ms`` when set (> 0), else ``offsets_retention_minutes``."""
        broker = config.broker
        retention_ms = broker.offsets_retention_ms or broker.offsets_retention_minutes * 60_000
        return cls(retention_ms, broker.offsets_retention_check_interval_ms)


class GroupCoordinator:
    """Groups and offsets of the ``__consumer_offsets`` partitions this broker leads."""

    def __init__(
        self,
        replicas: ReplicaManager,
        *,
        initial_rebalance_delay_ms: int,
        create_offsets_topic: Callable[[], Awaitable[None]],
        retention: OffsetsRetention | None = None,
        min_session_timeout_ms: int = DEFAULT_MIN_SESSION_TIMEOUT_MS,
        max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS,
    ) -> None:
        """``create_offsets_topic`` creates ``__consumer_offsets`` when it is missing and sets
        ``cleanup.policy=compact`` on the ``COMPACTED_INTERNAL_TOPICS`` that lack it
        (``GroupApis.create_offsets_topic``). ``retention``: the node assembly passes the
        node's (``OffsetsRetention.from_config``); by default Kafka's."""
        self._replicas = replicas
        if not 0 < min_session_timeout_ms <= max_session_timeout_ms:
            raise ValueError(
                f"group session timeouts: min {min_session_timeout_ms} ms must be positive and"
                f" at most max {max_session_timeout_ms} ms"
            )
        #: The constructor options every ``Group`` of this coordinator gets.
        self._group_options: dict[str, int] = {
            "initial_rebalance_delay_ms": initial_rebalance_delay_ms,
            "min_session_timeout_ms": min_session_timeout_ms,
            "max_session_timeout_ms": max_session_timeout_ms,
        }
        self._create_offsets_topic = create_offsets_topic
        self._retention = retention or OffsetsRetention()
        self._loaded: dict[int, OffsetsState] = {}
        #: Offsets committed inside running transactions, per offsets partition and producer
        #: id: records applied when the producer's commit marker is written, dropped on abort.
        self._pending_txn: dict[int, dict[int, Records]] = {}
        self._groups: dict[str, Group] = {}
        self._pending: dict[Hashable, asyncio.Future[dict[str, Any]]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tokens = itertools.count()
        self._expiration_task: asyncio.Task[None] | None = None
        self._compaction_task: asyncio.Task[None] | None = None
        self._compaction_logged: set[str] = set()
        replicas.add_image_listener(self._on_image)

    # -- ownership ----------------------------------------------------------------------------

    def _offsets_partition_count(self) -> int:
        topic = self._replicas.image.topics.get(OFFSETS_TOPIC)
        return len(topic.partitions) if topic is not None else 0

    def partition_of(self, group_id: str) -> int | None:
        count = self._offsets_partition_count()
        return partition_for_group(group_id, count) if count else None

    def _on_image(self, image: MetadataImage) -> None:
        for index in range(self._offsets_partition_count()):
            partition = self._replicas.partition(OFFSETS_TOPIC, index)
            leads = partition is not None and partition.is_leader
            if leads and index not in self._loaded:
                assert partition is not None
                self._load(partition)
            elif not leads and index in self._loaded:
                self._unload(index)
        for index in [i for i in self._loaded if i >= self._offsets_partition_count()]:
            self._unload(index)
        if self._topics_to_compact() and (
            self._compaction_task is None or self._compaction_task.done()
        ):
            self._compaction_task = asyncio.get_running_loop().create_task(
                self._compact_internal_topics()
            )

    def _load(self, partition: Partition) -> None:
        """Rebuild the groups and offsets of one offsets partition from its log."""
        state = OffsetsState()
        pending: dict[int, Records] = {}
        offset = partition.log.log_start_offset
        while offset < partition.log_end_offset:
            data = partition.log.read(offset, LOAD_READ_BYTES)
            if not data:
                break
            for header, raw in iter_batches(data):
                try:
                    records = decode_records(bytes(raw))
                except CorruptRecordError as error:
                    log.error("offsets partition %d: skipping a batch: %s", partition.index, error)
                    records = []
                if header.is_control:
                    # A transaction's marker: its offsets count from here on, or never.
                    held = pending.pop(header.producer_id, [])
                    if records and _control_type(raw) == COMMIT:
                        self._replay(partition.index, state, held)
                else:
                    fresh = [
                        (r.key, r.value)
                        for r in records
                        if r.offset >= offset and r.key is not None
                    ]
                    if header.is_transactional:
                        pending.setdefault(header.producer_id, []).extend(fresh)
                    else:
                        self._replay(partition.index, state, fresh)
                offset = max(offset, header.last_offset + 1)
        self._loaded[partition.index] = state
        self._pending_txn[partition.index] = pending
        now = _now_ms()
        for group_id in state.groups():
            record = state.group_record(group_id)
            if record is not None:
                group = Group.from_record(
                    group_id,
                    record,
                    now_ms=now,
                    **self._group_options,
                )
                self._groups[group_id] = group
                self._execute_sync(group_id, group.tick(now))
        log.info(
            "coordinating offsets partition %d: %d groups loaded",
            partition.index,
            len(state.groups()),
        )
        if self._expiration_task is None or self._expiration_task.done():
            self._expiration_task = asyncio.get_running_loop().create_task(
                self._expire_offsets_forever()
            )

    @staticmethod
    def _replay(index: int, state: OffsetsState, records: RecordsIn) -> None:
        for key, value in records:
            try:
                state.replay(key, value)
            except ValueError as error:
                log.error("offsets partition %d: bad record: %s", index, error)

    def _unload(self, index: int) -> None:
        self._loaded.pop(index, None)
        self._pending_txn.pop(index, None)
        now = _now_ms()
        for group_id in [g for g in self._groups if self.partition_of(g) in (index, None)]:
            self._drop_group(group_id, now_ms=now, error=ErrorCode.NOT_COORDINATOR)
        if not self._loaded and self._expiration_task is not None:
            self._expiration_task.cancel()
            self._expiration_task = None
        log.info("no longer coordinating offsets partition %d", index)

    def _drop_group(self, group_id: str, *, now_ms: int, error: ErrorCode) -> None:
        """Forget a group: its parked requests are answered ``error``, its timer stops."""
        group = self._groups.pop(group_id, None)
        if group is not None:
            self._execute_sync(group_id, group.mark_dead(now_ms=now_ms, error=error))
        timer = self._timers.pop(group_id, None)
        if timer is not None:
            timer.cancel()

    async def stop(self) -> None:
        """Stop the background tasks (offset expiration, conversion to compaction)."""
        tasks = [t for t in (self._expiration_task, self._compaction_task) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._expiration_task = self._compaction_task = None

    # -- compaction of the internal topics ----------------------------------------------------

    def _topics_to_compact(self) -> list[str]:
        """The internal offset topics whose ``cleanup.policy`` lacks ``compact`` and whose
        partition 0 this broker leads (one broker asks, not all of them). None before
        ``__consumer_offsets`` exists: the conversion must not create it (and without it no
        marker of ``__flux_spark_sink`` was ever written)."""
        image = self._replicas.image
        if OFFSETS_TOPIC not in image.topics:
            return []
        names = []
        for name in COMPACTED_INTERNAL_TOPICS:
            topic = image.topics.get(name)
            partition = self._replicas.partition(name, 0)
            if topic is None or partition is None or not partition.is_leader:
                continue
            policy = self._replicas.topic_config(dict(topic.config_dict())).get("cleanup.policy")
            if "compact" not in policy:
                names.append(name)
        return names

    async def _compact_internal_topics(self) -> None:
        """Ask for ``cleanup.policy=compact`` until the image shows it (idempotent: the
        controller writes no record for a value a topic already has)."""
        delay_s = COMPACT_RETRY_MIN_S
        while names := self._topics_to_compact():
            for name in names:
                if name not in self._compaction_logged:
                    self._compaction_logged.add(name)
                    log.info(
                        "%s is not compacted: asking the controller for cleanup.policy=compact "
                        "(so that the newest committed offset of every group stays)",
                        name,
                    )
            try:
                await self._create_offsets_topic()
            except Exception as error:  # any failure is retried below
                log.debug("converting %s to compaction failed: %r", names, error)
            if not self._topics_to_compact():
                return
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, COMPACT_RETRY_MAX_S)

    # -- offset expiration --------------------------------------------------------------------

    async def _expire_offsets_forever(self) -> None:
        while True:
            await asyncio.sleep(self._retention.check_interval_ms / 1000)
            try:
                removed = await self.expire_offsets()
            except Exception:
                log.exception("offset expiration failed; trying again next time")
                continue
            if removed:
                log.info("expired %d committed offsets", removed)

    async def expire_offsets(self, now_ms: int | None = None) -> int:
        """Write tombstones for the offsets (and empty groups) that expired by ``now_ms`` in
        every offsets partition this broker leads; returns how many offsets expired."""
        now = _now_ms() if now_ms is None else now_ms
        writes: list[asyncio.Future[ErrorCode]] = []
        expired_offsets = 0
        for index, state in list(self._loaded.items()):
            partition = self._replicas.partition(OFFSETS_TOPIC, index)
            if partition is None or not partition.is_leader:
                continue
            records, count = self._plan_partition_expiration(index, state, now)
            expired_offsets += count
            appended = self._append(partition, state, _batches(records))
            if isinstance(appended, ErrorCode):
                log.warning("offsets partition %d: expiration not written: %s", index, appended)
            else:
                writes.extend(appended)
        for code in await asyncio.gather(*(self._await_write(w) for w in writes)):
            if code != ErrorCode.NONE:
                # The tombstones are in the leader's log; a new leader's next check rewrites
                # what did not replicate.
                log.warning("offset expiration tombstones not acknowledged: %s", code.name)
        return expired_offsets

    def _plan_partition_expiration(
        self, index: int, state: OffsetsState, now_ms: int
    ) -> tuple[Records, int]:
        """The tombstones of one offsets partition's expiration, and how many offsets expire.
        Groups that go are forgotten here, in the same step as the planning."""
        image = self._replicas.image
        names = set(state.groups())
        names.update(g for g in self._groups if self.partition_of(g) == index)
        records: Records = []
        count = 0
        for group_id in sorted(names):
            if _is_live_push_group(group_id, image):
                continue
            group = self._groups.get(group_id)
            plan = plan_expiration(
                offsets=state.offsets(group_id),
                group=group,
                now_ms=now_ms,
                retention_ms=self._retention.retention_ms,
            )
            records += [tombstone_for_offset(group_id, t, p) for t, p in plan.offsets]
            count += len(plan.offsets)
            if plan.delete_group:
                if state.group_record(group_id) is not None:
                    records.append(tombstone_for_group(group_id))
                self._drop_group(group_id, now_ms=now_ms, error=ErrorCode.GROUP_ID_NOT_FOUND)
            if plan.offsets or plan.delete_group:
                log.info(
                    "group %s: %d committed offsets expired%s",
                    group_id,
                    len(plan.offsets),
                    ", group deleted" if plan.delete_group else "",
                )
        return records, count

    def _owner(self, group_id: str) -> tuple[Partition, OffsetsState] | ErrorCode:
        index = self.partition_of(group_id)
        if index is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        partition = self._replicas.partition(OFFSETS_TOPIC, index)
        state = self._loaded.get(index)
        if partition is None or not partition.is_leader or state is None:
            return ErrorCode.NOT_COORDINATOR
        return partition, state

    def _group(self, group_id: str) -> Group:
        group = self._groups.get(group_id)
        if group is None:
            group = Group(group_id, now_ms=_now_ms(), **self._group_options)
            self._groups[group_id] = group
        return group

    # -- effects ------------------------------------------------------------------------------

    def _execute_sync(self, group_id: str, effects: list[Effect]) -> None:
        """Run effects from a context that cannot await (loading, unloading, timers)."""
        if any(isinstance(effect, Persist) for effect in effects):
            asyncio.get_running_loop().create_task(self._execute(group_id, effects))
            return
        for effect in effects:
            self._apply_effect(group_id, effect)

    async def _execute(self, group_id: str, effects: list[Effect]) -> None:
        """Effects in order; a Persist is written (acks=all) before the effects after it.

        When the write fails, the answers held back behind it become that error (as Kafka
        answers a SyncGroup whose assignment it could not store), so no caller waits forever,
        and the group starts a new rebalance."""
        for index, effect in enumerate(effects):
            if isinstance(effect, Persist):
                error = await self._write(
                    group_id, [group_metadata_record(group_id, effect.record)]
                )
                if error != ErrorCode.NONE:
                    answer_error = _persist_error(error)
                    for held in effects[index + 1 :]:
                        if isinstance(held, Respond):
                            self._apply_effect(
                                group_id,
                                Respond(held.token, _error_like(held.response, answer_error)),
                            )
                    group = self._groups.get(group_id)
                    if group is not None:
                        failed = group.persist_failed(
                            generation_id=int(effect.record.get("generation", group.generation_id)),
                            now_ms=_now_ms(),
                        )
                        await self._execute(group_id, failed)
                    return
            else:
                self._apply_effect(group_id, effect)

    def _apply_effect(self, group_id: str, effect: Effect) -> None:
        if isinstance(effect, Respond):
            future = self._pending.pop(effect.token, None)
            if future is not None and not future.done():
                future.set_result(effect.response)
        elif isinstance(effect, ScheduleTick):
            timer = self._timers.pop(group_id, None)
            if timer is not None:
                timer.cancel()
            delay_s = max(effect.at_ms - _now_ms(), 0) / 1000
            loop = asyncio.get_running_loop()
            self._timers[group_id] = loop.call_later(delay_s, self._tick, group_id)

    def _tick(self, group_id: str) -> None:
        self._timers.pop(group_id, None)
        group = self._groups.get(group_id)
        if group is not None:
            self._execute_sync(group_id, group.tick(_now_ms()))

    async def _write(self, group_id: str, records: RecordsIn) -> ErrorCode:
        """Append records to the group's offsets partition and wait for the ISR (acks=all)."""
        owner = self._owner(group_id)
        if isinstance(owner, ErrorCode):
            return owner
        partition, state = owner
        return await self._append_and_wait(partition, state, [records])

    async def _append_and_wait(
        self, partition: Partition, state: OffsetsState, batches: Iterable[RecordsIn]
    ) -> ErrorCode:
        appended = self._append(partition, state, batches)
        if isinstance(appended, ErrorCode):
            return appended
        for code in await asyncio.gather(*(self._await_write(w) for w in appended)):
            if code != ErrorCode.NONE:
                return code
        return ErrorCode.NONE

    def _append(
        self, partition: Partition, state: OffsetsState, batches: Iterable[RecordsIn]
    ) -> list[asyncio.Future[ErrorCode]] | ErrorCode:
        """Append each list of records as one batch now and replay them into ``state``; the
        futures complete when the ISR has them. Synchronous, so callers plan and append in
        one step of the event loop."""
        writes = []
        for chunk in batches:
            batch = build_batch([(key, value, ()) for key, value in chunk])
            try:
                result = partition.append_as_leader(batch)
            except (ProducerRejectedError, CorruptRecordError, OSError) as error:
                log.error("cannot write to offsets partition %d: %s", partition.index, error)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            for key, value in chunk:
                state.replay(key, value)
            writes.append(partition.add_delayed_produce(result.last_offset + 1))
        return writes

    @staticmethod
    async def _await_write(future: asyncio.Future[ErrorCode]) -> ErrorCode:
        try:
            code = await asyncio.wait_for(future, WRITE_TIMEOUT_S)
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT
        return _persist_error(code) if code != ErrorCode.NONE else ErrorCode.NONE

    async def _park(
        self, group_id: str, effects_for: Callable[[Hashable], list[Effect]]
    ) -> dict[str, Any]:
        token = next(self._tokens)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[token] = future
        await self._execute(group_id, effects_for(token))
        return await future

    # -- APIs ---------------------------------------------------------------------------------

    async def find_coordinator(
        self, keys: list[tuple[str, int]], listener: str | None = None
    ) -> list[dict[str, Any]]:
        """(key, key_type) -> coordinator entries (node id, host, port, error); the address is
        the coordinator's on ``listener`` (the one the asking client connected to)."""
        if self._offsets_partition_count() == 0:
            await self._create_offsets_topic()
        image = self._replicas.image
        answers = []
        for key, key_type in keys:
            entry: dict[str, Any] = {
                "key": key, "node_id": -1, "host": "", "port": -1,
                "error_code": ErrorCode.NONE, "error_message": None,
            }  # fmt: skip
            index = self.partition_of(key)
            topic = image.topics.get(OFFSETS_TOPIC)
            leader = (
                topic.partitions[index].leader if topic is not None and index is not None else -1
            )
            registration = image.brokers.get(leader)
            if key_type != 0:
                entry["error_code"] = ErrorCode.INVALID_REQUEST
                entry["error_message"] = "only group coordinators are supported"
            elif registration is None or registration.fenced:
                entry["error_code"] = ErrorCode.COORDINATOR_NOT_AVAILABLE
            else:
                host, port = registration.endpoint(listener)
                entry.update(node_id=leader, host=host, port=port)
            answers.append(entry)
        return answers

    async def join_group(
        self, body: dict[str, Any], *, version: int, client_id: str, client_host: str
    ) -> dict[str, Any]:
        group_id = body["group_id"]
        owner = self._owner(group_id)
        if isinstance(owner, ErrorCode):
            return _join_error(body.get("member_id", ""), owner)
        group = self._group(group_id)
        session_timeout_ms = body["session_timeout_ms"]
        rebalance_timeout_ms = body.get("rebalance_timeout_ms", -1)
        return await self._park(
            group_id,
            lambda token: group.join(
                token=token,
                member_id=body["member_id"],
                group_instance_id=body.get("group_instance_id"),
                client_id=client_id,
                client_host=client_host,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms
                if rebalance_timeout_ms > 0
                else session_timeout_ms,
                protocol_type=body["protocol_type"],
                protocols=[(p["name"], bytes(p["metadata"])) for p in body["protocols"]],
                now_ms=_now_ms(),
                require_known_member_id=version >= 4,
            ),
        )

    async def sync_group(self, body: dict[str, Any]) -> dict[str, Any]:
        group_id = body["group_id"]
        owner = self._owner(group_id)
        group = self._groups.get(group_id)
        if isinstance(owner, ErrorCode) or group is None:
            code = owner if isinstance(owner, ErrorCode) else ErrorCode.UNKNOWN_MEMBER_ID
            return {"error_code": code, "assignment": b""}
        return await self._park(
            group_id,
            lambda token: group.sync(
                token=token,
                member_id=body["member_id"],
                generation_id=body["generation_id"],
                group_instance_id=body.get("group_instance_id"),
                protocol_type=body.get("protocol_type"),
                protocol_name=body.get("protocol_name"),
                assignments=[(a["member_id"], bytes(a["assignment"])) for a in body["assignments"]],
                now_ms=_now_ms(),
            ),
        )

    def heartbeat(self, body: dict[str, Any]) -> ErrorCode:
        owner = self._owner(body["group_id"])
        if isinstance(owner, ErrorCode):
            return owner
        group = self._groups.get(body["group_id"])
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return group.heartbeat(
            member_id=body["member_id"],
            generation_id=body["generation_id"],
            group_instance_id=body.get("group_instance_id"),
            now_ms=_now_ms(),
        )

    async def leave_group(self, body: dict[str, Any], *, version: int) -> dict[str, Any]:
        group_id = body["group_id"]
        if version >= 3:
            members = [(m["member_id"], m.get("group_instance_id")) for m in body["members"]]
        else:
            members = [(body["member_id"], None)]
        owner = self._owner(group_id)
        group = self._groups.get(group_id)
        if isinstance(owner, ErrorCode) or group is None:
            code = owner if isinstance(owner, ErrorCode) else ErrorCode.UNKNOWN_MEMBER_ID
            return {"error_code": code, "members": []}
        code, results, effects = group.leave(members=members, now_ms=_now_ms())
        await self._execute(group_id, effects)
        return {
            "error_code": code,
            "members": [
                {"member_id": m, "group_instance_id": i, "error_code": e} for m, i, e in results
            ],
        }

    async def commit_offsets(self, body: dict[str, Any]) -> dict[str, Any]:
        group_id = body["group_id"]
        generation = body.get("generation_id_or_member_epoch", -1)
        owner = self._owner(group_id)
        if isinstance(owner, ErrorCode):
            error = owner
        else:
            group = self._groups.get(group_id)
            if group is None:
                # Kafka: a commit that names a generation needs a group to match it.
                error = ErrorCode.ILLEGAL_GENERATION if generation >= 0 else ErrorCode.NONE
            else:
                error = group.validate_commit(
                    member_id=body.get("member_id", ""),
                    generation_id=generation,
                    group_instance_id=body.get("group_instance_id"),
                    now_ms=_now_ms(),
                )
        records, results = _plan_commit(group_id, body["topics"], error)
        written = await self._write(group_id, records) if records else ErrorCode.NONE
        return _commit_answer(results, written)

    async def txn_commit_offsets(self, body: dict[str, Any]) -> dict[str, Any]:
        """TxnOffsetCommit: the offsets are written to the group's offsets partition in a
        transactional batch of the producer and held apart; they become the group's committed
        offsets when the transaction's commit marker reaches that partition
        (``complete_transaction``), and are dropped on abort."""
        group_id = body["group_id"]
        producer_id, producer_epoch = body["producer_id"], body["producer_epoch"]
        owner = self._owner(group_id)
        generation = body.get("generation_id", -1)
        if not isinstance(owner, ErrorCode) and generation >= 0:
            # v3+ (KIP-447): a member's commit is checked like OffsetCommit's, so a producer
            # left over from an older generation is fenced.
            group = self._groups.get(group_id)
            checked = (
                ErrorCode.ILLEGAL_GENERATION
                if group is None
                else group.validate_commit(
                    member_id=body.get("member_id", ""),
                    generation_id=generation,
                    group_instance_id=body.get("group_instance_id"),
                    now_ms=_now_ms(),
                )
            )
            if checked != ErrorCode.NONE:
                owner = checked
        error = owner if isinstance(owner, ErrorCode) else ErrorCode.NONE
        records, results = _plan_commit(group_id, body["topics"], error)
        written = ErrorCode.NONE
        if records and not isinstance(owner, ErrorCode):
            partition, _state = owner
            written = await self._append_transactional(
                partition, producer_id, producer_epoch, records
            )
        return _commit_answer(results, written)

    async def _append_transactional(
        self, partition: Partition, producer_id: int, producer_epoch: int, records: Records
    ) -> ErrorCode:
        batch = build_batch(
            [(key, value, ()) for key, value in records],
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_transactional=True,
        )
        try:
            result = partition.append_as_leader(batch, coordinator=True)
        except ProducerRejectedError as error:
            return error.error
        except (CorruptRecordError, OSError) as error:
            log.error("cannot write to offsets partition %d: %s", partition.index, error)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        self._pending_txn.setdefault(partition.index, {}).setdefault(producer_id, []).extend(
            records
        )
        return await self._await_write(partition.add_delayed_produce(result.last_offset + 1))

    def complete_transaction(self, index: int, producer_id: int, commit: bool) -> None:
        """A transaction's marker was written to offsets partition ``index`` (this broker
        leads it): its offsets become committed, or are dropped."""
        held = self._pending_txn.get(index, {}).pop(producer_id, [])
        state = self._loaded.get(index)
        if commit and state is not None:
            self._replay(index, state, held)

    def fetch_offsets(
        self, group_id: str, topics: list[dict[str, Any]] | None, *, require_stable: bool = False
    ) -> tuple[ErrorCode, list[dict[str, Any]]]:
        """The group's committed offsets. ``require_stable`` (OffsetFetch v7+, KIP-447): a
        partition with offsets committed in a transaction that has not ended yet is answered
        ``UNSTABLE_OFFSET_COMMIT`` (the client retries), not with the older offset."""
        owner = self._owner(group_id)
        if isinstance(owner, ErrorCode):
            return owner, []
        partition, state = owner
        committed = state.offsets(group_id)
        unstable = self._pending_partitions(partition.index, group_id) if require_stable else set()
        if topics is None:
            wanted: dict[str, list[int]] = {}
            for name, index in sorted(committed):
                wanted.setdefault(name, []).append(index)
        else:
            wanted = {t["name"]: list(t["partition_indexes"]) for t in topics}
        answer = []
        for name, indexes in wanted.items():
            partitions = []
            for index in indexes:
                entry = committed.get((name, index))
                partitions.append(
                    {
                        "partition_index": index,
                        "committed_offset": entry.offset if entry else -1,
                        "committed_leader_epoch": entry.leader_epoch if entry else -1,
                        "metadata": entry.metadata if entry else "",
                        "error_code": ErrorCode.UNSTABLE_OFFSET_COMMIT
                        if (name, index) in unstable
                        else ErrorCode.NONE,
                    }
                )
            answer.append({"name": name, "partitions": partitions})
        return ErrorCode.NONE, answer

    def _pending_partitions(self, index: int, group_id: str) -> set[tuple[str, int]]:
        """(topic, partition) of ``group_id`` with offsets in transactions still open."""
        pending = set()
        for records in self._pending_txn.get(index, {}).values():
            for key, value in records:
                try:
                    entry = parse_record(key, value)
                except ValueError:
                    continue
                if isinstance(entry, OffsetCommitEntry) and entry.group == group_id:
                    pending.add((entry.topic, entry.partition))
        return pending

    def describe_group(self, group_id: str) -> dict[str, Any]:
        owner = self._owner(group_id)
        if isinstance(owner, ErrorCode):
            return {"error_code": owner, "group_id": group_id, "group_state": "", "protocol_type": "",
                    "protocol_data": "", "members": []}  # fmt: skip
        group = self._groups.get(group_id)
        if group is None:
            return {"error_code": ErrorCode.NONE, "group_id": group_id, "group_state": "Dead",
                    "protocol_type": "", "protocol_data": "", "members": []}  # fmt: skip
        return {"error_code": ErrorCode.NONE, **group.describe()}

    def committed_snapshot(self) -> dict[str, Any]:
        """What this broker coordinates: the offsets partitions it has loaded and every offset
        committed in them, ``[group, topic, partition, offset]`` (for lag metrics and the
        memory-topic cleanup, which need every group's position wherever it is coordinated)."""
        committed = [
            [group, topic, index, entry.offset]
            for state in self._loaded.values()
            for group in state.groups()
            for (topic, index), entry in sorted(state.offsets(group).items())
        ]
        return {
            "offsets_partitions": sorted(self._loaded),
            "offsets_partition_count": self._offsets_partition_count(),
            "committed": committed,
        }

    def image(self) -> MetadataImage:
        return self._replicas.image

    def coordinator_of(self, group_id: str) -> int | None:
        """The broker id coordinating ``group_id`` per this broker's metadata, if any."""
        index = self.partition_of(group_id)
        topic = self._replicas.image.topics.get(OFFSETS_TOPIC)
        if index is None or topic is None:
            return None
        leader = topic.partitions[index].leader
        return leader if leader >= 0 else None

    def list_groups(self) -> list[dict[str, Any]]:
        names = set(self._groups)
        for state in self._loaded.values():
            names.update(state.groups())
        answer = []
        for name in sorted(names):
            group = self._groups.get(name)
            if group is not None:
                answer.append(group.overview())
            else:
                answer.append(
                    {"group_id": name, "protocol_type": "consumer", "group_state": "Empty"}
                )
        return answer

    async def delete_group(self, group_id: str) -> ErrorCode:
        owner = self._owner(group_id)
        if isinstance(owner, ErrorCode):
            return owner
        _, state = owner
        group = self._groups.get(group_id)
        if group is not None:
            error = group.validate_delete()
            if error != ErrorCode.NONE:
                return error
        elif group_id not in state.groups():
            return ErrorCode.GROUP_ID_NOT_FOUND
        records = [tombstone_for_offset(group_id, t, p) for t, p in state.offsets(group_id)]
        records.append(tombstone_for_group(group_id))
        error = await self._write(group_id, records)
        if error == ErrorCode.NONE and group is not None:
            self._groups.pop(group_id, None)
            self._execute_sync(
                group_id, group.mark_dead(now_ms=_now_ms(), error=ErrorCode.GROUP_ID_NOT_FOUND)
            )
        return error

    async def delete_offsets(
        self, group_id: str, topics: list[dict[str, Any]]
    ) -> tuple[ErrorCode, list[dict[str, Any]]]:
        """OffsetDelete: the group's error and, without one, a result per partition asked for
        (``[{"name", "partitions": [{"partition_index", "error_code"}]}]``, in request order,
        each partition once).

        Group errors (no partition results, as Kafka): INVALID_GROUP_ID (empty id),
        NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE, GROUP_ID_NOT_FOUND (no members, offsets
        or record), NON_EMPTY_GROUP (members of a non-consumer protocol). Per partition:
        GROUP_SUBSCRIBED_TO_TOPIC when a live member subscribes to its topic, else NONE
        (deleted, or there was nothing to delete), or the write's error. An EMPTY group left
        without offsets is deleted as well, as Kafka does."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, []
        owner = self._owner(group_id)
        if isinstance(owner, ErrorCode):
            return owner, []
        partition, state = owner
        group = self._groups.get(group_id)
        if group is None and group_id not in state.groups():
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        if group is not None:
            error = group.validate_offset_delete()
            if error != ErrorCode.NONE:
                return error, []
        committed = state.offsets(group_id)
        results: dict[str, dict[int, ErrorCode]] = {}
        deleted: dict[tuple[str, int], None] = {}  # ordered set
        for topic in topics:
            name = topic["name"]
            refused = group is not None and group.is_subscribed_to_topic(name)
            answers = results.setdefault(name, {})
            for item in topic["partitions"]:
                index = item["partition_index"]
                answers[index] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if refused else ErrorCode.NONE
                if not refused and (name, index) in committed:
                    deleted[(name, index)] = None
        if deleted:
            records: Records = [tombstone_for_offset(group_id, t, p) for t, p in deleted]
            empty = group is None or (
                group.state is GroupState.EMPTY and not group.pending_member_ids
            )
            if empty and len(deleted) == len(committed):
                if state.group_record(group_id) is not None:
                    records.append(tombstone_for_group(group_id))
                self._drop_group(group_id, now_ms=_now_ms(), error=ErrorCode.GROUP_ID_NOT_FOUND)
            written = await self._append_and_wait(partition, state, _batches(records))
            if written != ErrorCode.NONE:
                for name, index in deleted:
                    results[name][index] = written
        return ErrorCode.NONE, [
            {
                "name": name,
                "partitions": [
                    {"partition_index": index, "error_code": code} for index, code in codes.items()
                ],
            }
            for name, codes in results.items()
        ]


def _is_live_push_group(group_id: str, image: MetadataImage) -> bool:
    """A push subscription's group whose subscription still exists."""
    return (
        group_id.startswith(PUSH_GROUP_PREFIX)
        and group_id[len(PUSH_GROUP_PREFIX) :] in image.subscriptions
    )


def _batches(records: RecordsIn) -> Iterator[Records]:
    """``records`` in runs of at most ``TOMBSTONES_PER_BATCH_MAX`` records and about
    ``TOMBSTONE_BATCH_BYTES_MAX`` bytes (a record larger than that goes alone)."""
    chunk: Records = []
    size = 0
    for key, value in records:
        record_size = len(key) + (len(value) if value is not None else 0)
        if chunk and (
            len(chunk) >= TOMBSTONES_PER_BATCH_MAX or size + record_size > TOMBSTONE_BATCH_BYTES_MAX
        ):
            yield chunk
            chunk, size = [], 0
        chunk.append((key, value))
        size += record_size
    if chunk:
        yield chunk


def _persist_error(error: ErrorCode) -> ErrorCode:
    """The error a group member sees when a write to its offsets partition failed, as Kafka's
    group coordinator maps the append's error (and as the transaction coordinator does here):
    a slow or short ISR means the coordinator is not available for now, a lost leadership or a
    failed log directory (the partition moves to another broker) that it is not the
    coordinator."""
    if error in (
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.KAFKA_STORAGE_ERROR,
    ):
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


def _error_like(response: dict[str, Any], error: ErrorCode) -> dict[str, Any]:
    """``error`` in the shape of ``response`` (a JoinGroup or a SyncGroup answer)."""
    if "assignment" in response:
        return sync_error_response(error)
    return join_error_response(str(response.get("member_id", "")), error)


def _join_error(member_id: str, error: ErrorCode) -> dict[str, Any]:
    return join_error_response(member_id, error)


def _plan_commit(
    group_id: str, topics: list[dict[str, Any]], error: ErrorCode
) -> tuple[Records, dict[tuple[str, int], ErrorCode]]:
    """The offset-commit records of an OffsetCommit / TxnOffsetCommit request, and each
    partition's result so far (``error`` for all when the request is refused)."""
    now = _now_ms()
    results: dict[tuple[str, int], ErrorCode] = {}
    records: Records = []
    for topic in topics:
        for item in topic["partitions"]:
            key = (topic["name"], item["partition_index"])
            metadata = item.get("committed_metadata")
            if error != ErrorCode.NONE:
                results[key] = error
            elif metadata is not None and len(metadata) > MAX_METADATA_LENGTH:
                results[key] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                try:
                    record = offset_commit_record(
                        group_id,
                        key[0],
                        key[1],
                        item["committed_offset"],
                        item.get("committed_leader_epoch", -1),
                        metadata,
                        now,
                    )  # fmt: skip
                except OffsetsRecordError:
                    # A partition -1 or an empty topic name cannot be a commit record: that
                    # partition's error, not an exception out of the handler (the fuzzer's
                    # TxnOffsetCommit with partition -1 closed the connection).
                    results[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                records.append(record)
                results[key] = ErrorCode.NONE
    return records, results


def _commit_answer(results: dict[tuple[str, int], ErrorCode], written: ErrorCode) -> dict[str, Any]:
    """The per-topic answer; a failed write turns every planned partition's NONE into it."""
    if written != ErrorCode.NONE:
        results = {k: (written if v == ErrorCode.NONE else v) for k, v in results.items()}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (name, index), code in results.items():
        by_topic.setdefault(name, []).append({"partition_index": index, "error_code": code})
    return {"topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()]}


def _control_type(batch: bytes | memoryview) -> int | None:
    try:
        return control_type(batch)
    except CorruptRecordError as error:
        log.error("unreadable transaction marker in an offsets partition: %s", error)
        return None
