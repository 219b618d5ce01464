"""What each V1 command does on a Flux broker (docs/v1-protocol.md).

Served by the same partitions, coordinator and controller as the Kafka front door: a value
produced over V1 is a Kafka record (key and value as UTF-8 bytes, no headers) that any Kafka
client reads, and a Kafka record is readable over V1.

- ``PRODUCE topic key:value [acks=0|1|all]``: to partition ``fnv1a_32(key) % partitions`` (the
  FLUX service's partitioner; Kafka clients use murmur2, so the same key may land elsewhere from
  them). ``acks=all`` (the default) answers once the in-sync replicas have the record; ``1``
  once the leader appended it; ``0`` the same, as V1 answers every request.
- ``CONSUME topic partition offset [max]``: up to ``max`` (default 100, at most 1,000) committed
  records from ``offset``: ``messages=<offset>:<value>,... hw=<high watermark>``. Values are
  shown with ``%``, ``,``, ``|``, whitespace and control characters percent-encoded (``%2C``),
  so any value survives the line framing.
- ``OFFSET group topic partition`` -> ``offset=`` (-1 when nothing is committed);
  ``COMMIT group topic consumer_id generation partition offset`` -> ``committed=true``,
  checked against the member's generation; generation -1 commits without membership (refused
  while the group has members).
- ``ADMIN_CREATE_TOPIC topic partitions replication_factor``; ``ADMIN_GET_METADATA``.
- ``REPLICA_FETCH topic partition replica offset`` and ``BROKER_FETCH topic partition follower
  offset [max]``: a read of this broker's replica (leader or follower) below its high watermark,
  ``records=<offset>:<value>,... hw=``; they do not make the caller a follower (Flux replicates
  by itself).
- Commands for work Flux does itself answer ``ERR|NOT_SUPPORTED`` with the reason:
  ``ADMIN_REGISTER_BROKER``, ``ADMIN_BROKER_HEARTBEAT`` (brokers register with the controller
  quorum), ``ADMIN_SET_PARTITION_LEADER`` (the controller elects leaders; ``fluxctl partition``
  moves them), ``SET_PARTITION_ROLE`` (roles follow the metadata log).
- ``JOIN``, ``SYNC``, ``HEARTBEAT``, ``LEAVE`` and ``COMMIT`` with a generation: group membership
  (``groups.py``), served by the group's coordinator.

A partition led elsewhere answers ``ERR|NOT_LEADER|... led by broker <id> at <host:port>`` with
the leader's V1 address, so a client can go there.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

from flux.protocol.errors import CorruptRecordError, ErrorCode
from flux.protocol.records import build_batch

from ..groups.coordinator import GroupCoordinator
from ..groups.offsets_client import OffsetsClient, OffsetsUnavailableError
from ..kafka.apis import KafkaApis
from ..replication.partition import Partition, ProducerRejectedError
from ..replication.reads import committed_records
from ..replication.replica_manager import ReplicaManager
from ..topics import InvalidTopicError, validate_topic_name
from .groups import ASSIGNORS, V1Groups
from .protocol import V1Error, V1Request, fnv1a_32

__all__ = ["LISTENER_NAME", "V1Commands"]

#: The name the V1 listener is registered under (with the Kafka listeners), so every broker
#: knows every other's V1 address.
LISTENER_NAME = "V1"
DEFAULT_CONSUME_MAX = 100
CONSUME_MAX = 1000
READ_MAX_BYTES = 4 << 20
#: Characters of a value shown percent-encoded in CONSUME and BROKER_FETCH answers.
_SAFE = "".join(chr(c) for c in range(33, 127) if chr(c) not in "%,|")

_OWNED_BY_FLUX = {
    "ADMIN_REGISTER_BROKER": "Flux brokers register themselves with the controller quorum",
    "ADMIN_BROKER_HEARTBEAT": "Flux brokers heartbeat to the controller quorum by themselves",
    "ADMIN_SET_PARTITION_LEADER": "the controller elects partition leaders and ISRs; "
    "move leaders with fluxctl partition reassign or a preferred-leader election",
    "SET_PARTITION_ROLE": "a replica's role follows the metadata log, set by the controller",
}


def _int(text: str, name: str, low: int = 0) -> int:
    try:
        value = int(text)
    except ValueError:
        raise V1Error("BAD_REQUEST", f"{name} must be an integer, got {text[:32]!r}") from None
    if value < low:
        raise V1Error("BAD_REQUEST", f"{name} must be >= {low}")
    return value


def _arity(request: V1Request, low: int, high: int, usage: str) -> tuple[str, ...]:
    if not low <= len(request.args) <= high:
        raise V1Error("BAD_REQUEST", f"usage: {request.command} {usage}")
    return request.args


def show_value(value: bytes | None) -> str:
    """A record value as CONSUME shows it (see the module docstring)."""
    if value is None:
        return ""
    return urllib.parse.quote(value.decode("utf-8", "replace"), safe=_SAFE)


class V1Commands:
    """Runs one parsed request; its reply fields, or ``V1Error``."""

    def __init__(
        self,
        *,
        replicas: ReplicaManager,
        apis: KafkaApis,
        offsets: OffsetsClient,
        groups: GroupCoordinator,
        broker_id: int,
        produce_timeout_s: float = 30.0,
    ) -> None:
        self._replicas = replicas
        self._apis = apis
        self._offsets = offsets
        self._coordinator = groups
        self._groups = V1Groups(groups, broker_id=broker_id)
        self._broker_id = broker_id
        self._produce_timeout_s = produce_timeout_s
        self._commands: dict[str, Callable[[V1Request], Awaitable[dict[str, Any]]]] = {
            "PRODUCE": self._produce,
            "CONSUME": self._consume,
            "OFFSET": self._offset,
            "COMMIT": self._commit,
            "ADMIN_CREATE_TOPIC": self._create_topic,
            "ADMIN_GET_METADATA": self._metadata,
            "REPLICA_FETCH": self._replica_fetch,
            "BROKER_FETCH": self._broker_fetch,
            "JOIN": self._join,
            "SYNC": self._sync,
            "HEARTBEAT": self._heartbeat,
            "LEAVE": self._leave,
        }

    async def run(self, request: V1Request) -> dict[str, Any]:
        handler = self._commands.get(request.command)
        if handler is not None:
            return await handler(request)
        reason = _OWNED_BY_FLUX.get(request.command)
        if reason is not None:
            raise V1Error("NOT_SUPPORTED", f"{request.command}: {reason}")
        raise V1Error("UNKNOWN_COMMAND", f"unknown command {request.command[:40]}")

    # -- helpers ------------------------------------------------------------------------------

    async def _topic(self, name: str, *, create: bool = False) -> Any:
        try:
            validate_topic_name(name)
        except InvalidTopicError as error:
            raise V1Error("BAD_REQUEST", f"topic: {error}") from None
        topic = self._replicas.image.topics.get(name)
        if topic is None and create:
            await self._apis.auto_create_topics([name])
            topic = self._replicas.image.topics.get(name)
        if topic is None:
            raise V1Error("UNKNOWN_TOPIC", f"unknown topic {name}")
        return topic

    def _leader_partition(self, topic: Any, index: int) -> Partition:
        if not 0 <= index < len(topic.partitions):
            raise V1Error(
                "BAD_REQUEST", f"{topic.name} has partitions 0..{len(topic.partitions) - 1}"
            )
        found = self._replicas.partition_for_leader(topic.name, index)
        if isinstance(found, Partition):
            return found
        leader = topic.partitions[index].leader
        if found == ErrorCode.KAFKA_STORAGE_ERROR or leader < 0:
            raise V1Error("UNAVAILABLE", f"{topic.name}-{index} has no leader now")
        raise V1Error(
            "NOT_LEADER",
            f"{topic.name}-{index} is led by broker {leader} at {self._v1_address(leader)}",
        )

    def _v1_address(self, broker_id: int) -> str:
        broker = self._replicas.image.brokers.get(broker_id)
        if broker is None:
            return "an unknown address"
        for name, host, port in broker.listeners:
            if name == LISTENER_NAME:
                return f"{host}:{port}"
        return f"{broker.kafka_host} (no V1 listener)"

    # -- commands -----------------------------------------------------------------------------

    async def _produce(self, request: V1Request) -> dict[str, Any]:
        args = _arity(request, 2, 3, "topic key:value [acks=0|1|all]")
        key, found, value = args[1].partition(":")
        if not found:
            raise V1Error("BAD_REQUEST", "the record must be key:value")
        acks = "all"
        if len(args) == 3:
            name, _, acks = args[2].partition("=")
            if name != "acks" or acks not in ("0", "1", "all", "-1"):
                raise V1Error("BAD_REQUEST", "acks must be acks=0, acks=1 or acks=all")
        topic = await self._topic(args[0], create=True)
        index = fnv1a_32(key.encode()) % len(topic.partitions)
        partition = self._leader_partition(topic, index)
        if acks in ("all", "-1"):
            min_insync = partition.config.get("min.insync.replicas")
            if len(partition.state.isr) < min_insync:
                raise V1Error(
                    "UNAVAILABLE",
                    f"in-sync replicas {len(partition.state.isr)} < min.insync.replicas "
                    f"{min_insync}",
                )
        batch = build_batch([(key.encode(), value.encode(), [])])
        try:
            appended = self._replicas.append(partition, batch)
        except ProducerRejectedError as error:
            raise V1Error("BAD_REQUEST", str(error)) from None
        except OSError as error:
            raise V1Error("UNAVAILABLE", f"storage error: {error}") from None
        if acks in ("all", "-1"):
            waiting = partition.add_delayed_produce(appended.last_offset + 1)
            try:
                error = await asyncio.wait_for(asyncio.shield(waiting), self._produce_timeout_s)
            except TimeoutError:
                raise V1Error(
                    "REPLICATION_TIMEOUT", "the in-sync replicas did not acknowledge in time"
                ) from None
            if error != ErrorCode.NONE:
                raise V1Error("REPLICATION_TIMEOUT", f"not acknowledged: {error.name}")
        return {
            "partition": index,
            "offset": appended.base_offset,
            "hw": partition.high_watermark,
        }

    def _read(
        self, partition: Partition, offset: int, limit: int, *, upto: int
    ) -> list[tuple[int, bytes | None]]:
        start = partition.log.log_start_offset
        if not start <= offset <= upto:
            raise V1Error("BAD_REQUEST", f"offset {offset} is outside {start}..{upto}")
        try:
            records, _ = committed_records(
                partition, offset, limit, upto=upto, read_max_bytes=READ_MAX_BYTES
            )
        except OSError as error:
            raise V1Error("UNAVAILABLE", f"storage error: {error}") from None
        except CorruptRecordError as error:
            raise V1Error("UNAVAILABLE", f"unreadable batch: {error}") from None
        return [(record.offset, record.value) for record in records]

    async def _consume(self, request: V1Request) -> dict[str, Any]:
        args = _arity(request, 3, 4, "topic partition offset [max]")
        topic = await self._topic(args[0])
        partition = self._leader_partition(topic, _int(args[1], "partition"))
        limit = _limit(args[3] if len(args) == 4 else None)
        high_watermark = partition.high_watermark
        records = self._read(partition, _int(args[2], "offset"), limit, upto=high_watermark)
        return {
            "messages": ",".join(f"{offset}:{show_value(value)}" for offset, value in records),
            "hw": high_watermark,
        }

    async def _offset(self, request: V1Request) -> dict[str, Any]:
        args = _arity(request, 3, 3, "group topic partition")
        index = _int(args[2], "partition")
        try:
            committed = await self._offsets.fetch(args[0])
        except OffsetsUnavailableError as error:
            raise V1Error("UNAVAILABLE", str(error)) from None
        return {"offset": committed.get((args[1], index), -1)}

    async def _commit(self, request: V1Request) -> dict[str, Any]:
        args = _arity(request, 6, 6, "group topic consumer_id generation partition offset")
        group, name, _consumer_id = args[0], args[1], args[2]
        generation = _int(args[3], "generation", low=-1)
        index = _int(args[4], "partition")
        offset = _int(args[5], "offset")
        topic = await self._topic(name)
        if index >= len(topic.partitions):
            raise V1Error("BAD_REQUEST", f"{name} has partitions 0..{len(topic.partitions) - 1}")
        if generation >= 0:
            await self._coordinating(group)
            return await self._groups.commit(group, _consumer_id, generation, name, index, offset)
        try:
            await self._offsets.commit(group, [(name, index, offset)])
        except OffsetsUnavailableError as error:
            if ErrorCode.UNKNOWN_MEMBER_ID in error.errors:
                raise V1Error(
                    "GENERATION_MISMATCH", f"group {group} has members: commit as one of them"
                ) from None
            raise V1Error("UNAVAILABLE", str(error)) from None
        return {"committed": "true"}

    # -- group membership (groups.py) ----------------------------------------------------------

    async def _coordinating(self, group: str) -> None:
        """Membership commands are served by the group's coordinator only. The first one
        creates the offsets topic, as a Kafka client's FindCoordinator does."""
        coordinator = self._coordinator.coordinator_of(group)
        if coordinator is None:
            [found] = await self._coordinator.find_coordinator([(group, 0)], LISTENER_NAME)
            coordinator = found["node_id"] if found["node_id"] >= 0 else None
        if coordinator is None:
            raise V1Error("UNAVAILABLE", f"group {group} has no coordinator now: try again")
        if coordinator != self._broker_id:
            raise V1Error(
                "NOT_LEADER",
                f"group {group} is coordinated by broker {coordinator} at "
                f"{self._v1_address(coordinator)}",
            )

    async def _join(self, request: V1Request) -> dict[str, Any]:
        args = _arity(request, 3, 4, "group topic consumer_id [assignor=range|round_robin]")
        assignor = "range"
        if len(args) == 4:
            name, _, assignor = args[3].partition("=")
            if name != "assignor" or assignor not in ASSIGNORS:
                raise V1Error("BAD_REQUEST", "assignor must be assignor=range or round_robin")
        await self._topic(args[1])
        await self._coordinating(args[0])
        return await self._groups.join(args[0], args[1], args[2], assignor, "")

    async def _sync(self, request: V1Request) -> dict[str, Any]:
        args = _arity(request, 4, 4, "group topic consumer_id generation")
        await self._coordinating(args[0])
        generation = _int(args[3], "generation")
        return await self._groups.sync(args[0], args[1], args[2], generation)

    async def _heartbeat(self, request: V1Request) -> dict[str, Any]:
        args = _arity(request, 4, 4, "group topic consumer_id generation")
        await self._coordinating(args[0])
        return self._groups.heartbeat(args[0], args[2], _int(args[3], "generation"))

    async def _leave(self, request: V1Request) -> dict[str, Any]:
        args = _arity(request, 4, 4, "group topic consumer_id generation")
        await self._coordinating(args[0])
        _int(args[3], "generation")
        return await self._groups.leave(args[0], args[2])

    async def _create_topic(self, request: V1Request) -> dict[str, Any]:
        args = _arity(request, 3, 3, "topic partitions replication_factor")
        name = args[0]
        try:
            validate_topic_name(name)
        except InvalidTopicError as error:
            raise V1Error("BAD_REQUEST", f"topic: {error}") from None
        answer = await self._apis.controller_write(
            "POST",
            "/controller/topics",
            {
                "name": name,
                "num_partitions": _int(args[1], "partitions", low=1),
                "replication_factor": _int(args[2], "replication_factor", low=1),
                "configs": {},
            },
        )
        code = answer.get("error_code", ErrorCode.NONE)
        if code != ErrorCode.NONE:
            message = answer.get("error_message") or ErrorCode(code).name
            if code == ErrorCode.REQUEST_TIMED_OUT:
                raise V1Error("UNAVAILABLE", message)
            raise V1Error("BAD_REQUEST", f"{ErrorCode(code).name}: {message}")
        return {"topic": name, "partitions": args[1], "replication_factor": args[2]}

    async def _metadata(self, request: V1Request) -> dict[str, Any]:
        _arity(request, 0, 0, "(no arguments)")
        image = self._replicas.image
        brokers = ",".join(
            f"{broker_id}@{self._v1_address(broker_id)}"
            for broker_id in sorted(image.live_broker_ids())
        )
        topics = ",".join(
            f"{name}:{len(topic.partitions)}"
            for name, topic in sorted(image.topics.items())
            if not name.startswith("__")
        )
        leaders = ",".join(
            f"{name}/{index}={state.leader}"
            for name, topic in sorted(image.topics.items())
            if not name.startswith("__")
            for index, state in enumerate(topic.partitions)
        )
        return {"brokers": brokers, "topics": topics, "leaders": leaders}

    async def _replica_fetch(self, request: V1Request) -> dict[str, Any]:
        args = _arity(request, 4, 4, "topic partition replica offset")
        return self._local_read(args[0], args[1], args[3], None)

    async def _broker_fetch(self, request: V1Request) -> dict[str, Any]:
        args = _arity(request, 4, 5, "topic partition follower offset [max]")
        return self._local_read(args[0], args[1], args[3], args[4] if len(args) == 5 else None)

    def _local_read(
        self, name: str, index_text: str, offset_text: str, limit_text: str | None
    ) -> dict[str, Any]:
        index = _int(index_text, "partition")
        partition = self._replicas.partition(name, index)
        if partition is None or partition.offline:
            raise V1Error(
                "NOT_LEADER", f"broker {self._broker_id} has no replica of {name}-{index}"
            )
        high_watermark = partition.high_watermark
        records = self._read(
            partition, _int(offset_text, "offset"), _limit(limit_text), upto=high_watermark
        )
        return {
            "records": ",".join(f"{offset}:{show_value(value)}" for offset, value in records),
            "hw": high_watermark,
        }


def _limit(text: str | None) -> int:
    if text is None:
        return DEFAULT_CONSUME_MAX
    return min(_int(text, "max", low=1), CONSUME_MAX)
