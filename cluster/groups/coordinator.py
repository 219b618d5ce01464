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

Thread-safety: one owner, the broker's event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from flux.controller.image import MetadataImage
from flux.protocol.errors import CorruptRecordError, ErrorCode
from flux.protocol.records import build_batch, decode_records, iter_batches

from ..replication.partition import Partition, ProducerRejectedError
from ..replication.replica_manager import ReplicaManager
from .offsets_records import (
    OffsetsState,
    group_metadata_record,
    offset_commit_record,
    partition_for_group,
    tombstone_for_group,
    tombstone_for_offset,
)
from .state import Effect, Group, Persist, Respond, ScheduleTick

__all__ = ["OFFSETS_TOPIC", "GroupCoordinator"]

log = logging.getLogger("flux.cluster.groups")

OFFSETS_TOPIC = "__consumer_offsets"
MAX_METADATA_LENGTH = 4096
WRITE_TIMEOUT_S = 10.0
LOAD_READ_BYTES = 8 << 20


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinator:
    """Groups and offsets of the ``__consumer_offsets`` partitions this broker leads."""

    def __init__(
        self,
        replicas: ReplicaManager,
        *,
        initial_rebalance_delay_ms: int,
        create_offsets_topic: Callable[[], Awaitable[None]],
    ) -> None:
        self._replicas = replicas
        self._initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self._create_offsets_topic = create_offsets_topic
        self._loaded: dict[int, OffsetsState] = {}
        self._groups: dict[str, Group] = {}
        self._pending: dict[Hashable, asyncio.Future[dict[str, Any]]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tokens = itertools.count()
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

    def _load(self, partition: Partition) -> None:
        """Rebuild the groups and offsets of one offsets partition from its log."""
        state = OffsetsState()
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
                for record in records:
                    if record.offset >= offset and record.key is not None:
                        try:
                            state.replay(record.key, record.value)
                        except ValueError as error:
                            log.error(
                                "offsets partition %d: bad record: %s", partition.index, error
                            )
                offset = max(offset, header.last_offset + 1)
        self._loaded[partition.index] = state
        now = _now_ms()
        for group_id in state.groups():
            record = state.group_record(group_id)
            if record is not None:
                group = Group.from_record(
                    group_id,
                    record,
                    now_ms=now,
                    initial_rebalance_delay_ms=self._initial_rebalance_delay_ms,
                )
                self._groups[group_id] = group
                self._execute_sync(group_id, group.tick(now))
        log.info(
            "coordinating offsets partition %d: %d groups loaded",
            partition.index,
            len(state.groups()),
        )

    def _unload(self, index: int) -> None:
        self._loaded.pop(index, None)
        now = _now_ms()
        for group_id in [g for g in self._groups if self.partition_of(g) in (index, None)]:
            group = self._groups.pop(group_id)
            self._execute_sync(group_id, group.mark_dead(now_ms=now))
            timer = self._timers.pop(group_id, None)
            if timer is not None:
                timer.cancel()
        log.info("no longer coordinating offsets partition %d", index)

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
            group = Group(
                group_id,
                initial_rebalance_delay_ms=self._initial_rebalance_delay_ms,
                now_ms=_now_ms(),
            )
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
        """Effects in order; a Persist is written (acks=all) before the effects after it."""
        for effect in effects:
            if isinstance(effect, Persist):
                error = await self._write(
                    group_id, [group_metadata_record(group_id, effect.record)]
                )
                if error != ErrorCode.NONE:
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

    async def _write(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        """Append records to the group's offsets partition and wait for the ISR (acks=all)."""
        owner = self._owner(group_id)
        if isinstance(owner, ErrorCode):
            return owner
        partition, state = owner
        batch = build_batch([(key, value, ()) for key, value in records])
        try:
            result = partition.append_as_leader(batch)
        except (ProducerRejectedError, CorruptRecordError, OSError) as error:
            log.error("cannot write to offsets partition %d: %s", partition.index, error)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        for key, value in records:
            state.replay(key, value)
        future = partition.add_delayed_produce(result.last_offset + 1)
        try:
            code = await asyncio.wait_for(future, WRITE_TIMEOUT_S)
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT
        return ErrorCode.NONE if code == ErrorCode.NONE else ErrorCode.NOT_COORDINATOR

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
        now = _now_ms()
        results: dict[tuple[str, int], ErrorCode] = {}
        records = []
        for topic in body["topics"]:
            for item in topic["partitions"]:
                key = (topic["name"], item["partition_index"])
                metadata = item.get("committed_metadata")
                if error != ErrorCode.NONE:
                    results[key] = error
                elif metadata is not None and len(metadata) > MAX_METADATA_LENGTH:
                    results[key] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                else:
                    records.append(
                        offset_commit_record(
                            group_id,
                            key[0],
                            key[1],
                            item["committed_offset"],
                            item.get("committed_leader_epoch", -1),
                            metadata,
                            now,
                        )  # fmt: skip
                    )
                    results[key] = ErrorCode.NONE
        if records:
            written = await self._write(group_id, records)
            if written != ErrorCode.NONE:
                results = {k: (written if v == ErrorCode.NONE else v) for k, v in results.items()}
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (name, index), code in results.items():
            by_topic.setdefault(name, []).append({"partition_index": index, "error_code": code})
        return {"topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()]}

    def fetch_offsets(
        self, group_id: str, topics: list[dict[str, Any]] | None
    ) -> tuple[ErrorCode, list[dict[str, Any]]]:
        owner = self._owner(group_id)
        if isinstance(owner, ErrorCode):
            return owner, []
        _, state = owner
        committed = state.offsets(group_id)
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
                        "error_code": ErrorCode.NONE,
                    }
                )
            answer.append({"name": name, "partitions": partitions})
        return ErrorCode.NONE, answer

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


def _join_error(member_id: str, error: ErrorCode) -> dict[str, Any]:
    from .state import join_error_response

    return join_error_response(member_id, error)
