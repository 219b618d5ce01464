"""``GroupConsumer``: a member of a Kafka consumer group (synchronous, classic protocol).

    with GroupConsumer("127.0.0.1:9092", "billing", topics=["orders"]) as consumer:
        while True:
            for record in consumer.poll(timeout_s=1.0):
                handle(record)
            consumer.commit()

How it works:

* **Membership**: ``poll`` joins the group when it has to: JoinGroup (first without a member id;
  the coordinator answers MEMBER_ID_REQUIRED with one, and the member joins again with it),
  then SyncGroup. The leader the coordinator picks assigns partitions with the range assignor
  (``flux.sdk.consumer_protocol.range_assign``) over the members' subscriptions, so Flux,
  Java, librdkafka and kafka-python members can share a group that uses ``range``.
* **Heartbeats** run on a background thread with its own ``ClusterClient`` (its own
  connections). It reports REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID and
  FENCED_INSTANCE_ID to the consumer, whose next ``poll`` revokes the assignment
  (``on_revoke``), joins again and calls ``on_assign``. A ``commit`` refused with one of those
  codes raises ``GroupMembershipError`` and makes the next ``poll`` rejoin too.
* **Positions** start at the group's committed offsets, or per ``auto_offset_reset``
  (``"earliest"``, ``"latest"``, or ``"none"``: raise ``OffsetOutOfRangeError``). A record's
  position advances when ``poll`` returns it; ``commit`` commits the positions of every
  assigned partition. With ``enable_auto_commit`` positions are also committed every
  ``auto_commit_interval_ms`` (at the start of a poll), before a rebalance revokes partitions
  and on ``close``. Without it, commit in ``on_revoke`` to hand partitions over exactly where
  you stopped.
* **Fetching** asks each partition leader for all of its assigned partitions at once.

Thread-safety: a ``GroupConsumer`` belongs to one thread (the one calling ``poll``, ``commit``
and ``close``; the callbacks run on it, inside ``poll``). The heartbeat thread shares only two
values with it, each guarded by one lock: the membership to heartbeat for (written by the
consumer thread) and the last problem a heartbeat met (written by the heartbeat thread).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode

from . import limits
from ._group_requests import (
    offset_commit_body,
    offset_fetch_body,
    read_offset_commit,
    read_offset_fetch,
)
from .admin import list_offsets
from .cluster_client import COORDINATOR_RETRY_CODES, LEADER_RETRY_CODES, ClusterClient
from .consumer_protocol import (
    RANGE_ASSIGNOR,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)
from .errors import (
    ConfigurationError,
    FluxConnectionError,
    FluxError,
    FluxTimeoutError,
    GroupMembershipError,
    KafkaError,
    OffsetOutOfRangeError,
    UnknownTopicError,
    error_for,
)
from .metadata import RetryBudget, RetryPolicy
from .simple import ConsumedRecord, decode_fetched

__all__ = ["GroupConsumer", "TopicPartition"]

log = logging.getLogger("flux.sdk.groups")

TopicPartition = tuple[str, int]
Callback = Callable[[list[TopicPartition]], None]

#: Heartbeat or commit answers that mean "this member must join again".
REJOIN_CODES = frozenset(
    {
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.ILLEGAL_GENERATION,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.FENCED_INSTANCE_ID,
    }
)
#: ... of which these mean the member id itself is gone.
_MEMBER_LOST_CODES = frozenset({ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID})
_PROTOCOL_TYPE = "consumer"
_EARLIEST_TIMESTAMP = -2
_LATEST_TIMESTAMP = -1
#: A poll waits at most this long in one fetch, so a rebalance is noticed soon.
_POLL_SLICE_MS = 500
#: Bounds of the consumer's settings (the broker enforces its own session limits too).
POLL_RECORDS_MAX = 100_000
SESSION_TIMEOUT_MS_RANGE = (1_000, 3_600_000)
HEARTBEAT_INTERVAL_MS_DEFAULT_MAX = 3_000


@dataclass(frozen=True, slots=True)
class _Membership:
    member_id: str
    generation_id: int


class _Heartbeater:
    """Sends Heartbeat every ``interval_s`` for the published membership, on its own thread.

    Thread-safety: ``publish`` and ``take_problem`` are called by the consumer thread; the
    thread itself only reads the membership and writes the problem, both under ``_lock``. Its
    ``ClusterClient`` is used and closed by the thread alone.
    """

    def __init__(
        self, bootstrap: str, group_id: str, *, client_id: str, interval_s: float, timeout_s: float
    ) -> None:
        self._group_id = group_id
        self._interval_s = interval_s
        self._client = ClusterClient(
            bootstrap,
            client_id=client_id,
            request_timeout_s=timeout_s,
            retry=RetryPolicy(timeout_s=timeout_s),
        )
        self._lock = threading.Lock()
        self._membership: _Membership | None = None
        self._problem: tuple[_Membership, ErrorCode] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"flux-heartbeat-{group_id}", daemon=True
        )
        self._thread.start()

    def publish(self, membership: _Membership | None) -> None:
        with self._lock:
            self._membership = membership
            self._problem = None

    def take_problem(self, membership: _Membership | None) -> ErrorCode | None:
        """The error a heartbeat for ``membership`` met since the last call, if any."""
        with self._lock:
            problem, self._problem = self._problem, None
        if problem is None or problem[0] != membership:
            return None
        return problem[1]

    def close(self, timeout_s: float) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._interval_s):
                with self._lock:
                    membership = self._membership
                if membership is not None:
                    self._beat(membership)
        finally:
            self._client.close()

    def _beat(self, membership: _Membership) -> None:
        body = {
            "group_id": self._group_id,
            "generation_id": membership.generation_id,
            "member_id": membership.member_id,
            "group_instance_id": None,
        }
        try:
            code = self._client.call_coordinator(
                self._group_id, ApiKey.HEARTBEAT, body, _read_heartbeat
            )
        except FluxError as error:  # transient or not, the next beat tries again
            log.debug("heartbeat of group %r failed: %s", self._group_id, error)
            return
        if code in REJOIN_CODES:
            with self._lock:
                if self._membership == membership:
                    self._problem = (membership, code)
        elif code is not ErrorCode.NONE:
            log.warning("heartbeat of group %r: %s", self._group_id, code.name)


def _read_heartbeat(response: dict[str, Any], version: int) -> ErrorCode:
    code = ErrorCode.from_code(response["error_code"])
    if code in COORDINATOR_RETRY_CODES:
        raise error_for(code)
    return code


class GroupConsumer:
    """A consumer-group member: ``poll``, ``commit``, ``close``. See the module docstring."""

    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        *,
        topics: Sequence[str],
        client_id: str = "flux-consumer",
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        heartbeat_interval_ms: int | None = None,
        auto_offset_reset: str = "earliest",
        enable_auto_commit: bool = False,
        auto_commit_interval_ms: int = 5_000,
        on_assign: Callback | None = None,
        on_revoke: Callback | None = None,
        timeout_s: float = limits.RETRY_TIMEOUT_S,
        fetch_max_bytes: int = 1 << 20,
    ) -> None:
        if not group_id:
            raise ConfigurationError("group_id must not be empty")
        if isinstance(topics, str) or not topics or not all(isinstance(t, str) for t in topics):
            raise ConfigurationError("topics must be a non-empty list of topic names")
        low, high = SESSION_TIMEOUT_MS_RANGE
        if not low <= session_timeout_ms <= high:
            raise ConfigurationError(f"session_timeout_ms must be in {low}..{high}")
        if not session_timeout_ms <= rebalance_timeout_ms <= high:
            raise ConfigurationError(f"rebalance_timeout_ms must be in session_timeout_ms..{high}")
        if heartbeat_interval_ms is None:
            heartbeat_interval_ms = min(HEARTBEAT_INTERVAL_MS_DEFAULT_MAX, session_timeout_ms // 3)
        if not 1 <= heartbeat_interval_ms < session_timeout_ms:
            raise ConfigurationError("heartbeat_interval_ms must be below session_timeout_ms")
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ConfigurationError("auto_offset_reset must be 'earliest', 'latest' or 'none'")
        if not 1 <= fetch_max_bytes <= limits.FETCH_BYTES_MAX:
            raise ConfigurationError(f"fetch_max_bytes must be in 1..{limits.FETCH_BYTES_MAX}")
        self.group_id = group_id
        self.topics = list(dict.fromkeys(topics))
        self._bootstrap = bootstrap
        self._client_id = client_id
        self._session_timeout_ms = session_timeout_ms
        self._rebalance_timeout_ms = rebalance_timeout_ms
        self._heartbeat_interval_s = heartbeat_interval_ms / 1000
        self._auto_offset_reset = auto_offset_reset
        self._auto_commit_interval_s = (
            auto_commit_interval_ms / 1000 if enable_auto_commit else None
        )
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._fetch_max_bytes = fetch_max_bytes
        self.client = ClusterClient(
            bootstrap,
            client_id=client_id,
            # A JoinGroup is answered only when the rebalance completes, and a fetch long-polls.
            request_timeout_s=max(limits.REQUEST_TIMEOUT_S, rebalance_timeout_ms / 1000 + 5),
            retry=RetryPolicy(timeout_s=timeout_s),
        )
        self.client.metadata.track(self.topics)
        self._member_id = ""
        self._generation_id = -1
        self._needs_join = True
        self._assignment: dict[str, list[int]] = {}
        self._positions: dict[TopicPartition, int] = {}
        self._buffer: deque[ConsumedRecord] = deque()
        self._last_auto_commit = time.monotonic()
        self._heartbeater: _Heartbeater | None = None
        self._closed = False

    def __enter__(self) -> GroupConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- public ----------------------------------------------------------------------------

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def generation_id(self) -> int:
        return self._generation_id

    def assignment(self) -> list[TopicPartition]:
        """The partitions assigned to this member in the current generation."""
        return sorted(self._positions)

    def position(self, topic: str, partition: int) -> int:
        """The offset of the next record ``poll`` returns for an assigned partition."""
        return self._positions[(topic, partition)]

    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> list[ConsumedRecord]:
        """Up to ``max_records`` records of the assigned partitions, waiting up to ``timeout_s``
        for some (a join or rebalance may take longer: up to the rebalance timeout)."""
        self._check_open()
        if not 1 <= max_records <= POLL_RECORDS_MAX:
            raise ConfigurationError(f"max_records must be in 1..{POLL_RECORDS_MAX}")
        if timeout_s < 0:
            raise ConfigurationError("timeout_s must not be negative")
        deadline = time.monotonic() + timeout_s
        while True:
            self._ensure_member()
            self._maybe_auto_commit()
            if not self._buffer:
                remaining_ms = int(max(0.0, deadline - time.monotonic()) * 1000)
                self._fetch(min(remaining_ms, _POLL_SLICE_MS))
            if self._buffer or time.monotonic() >= deadline:
                return self._take(max_records)

    def commit(self) -> None:
        """Commit the positions of every assigned partition (synchronously).

        ``GroupMembershipError`` if the group has moved on (the next ``poll`` rejoins)."""
        self._check_open()
        if self._generation_id < 0 or not self._positions:
            return
        body = offset_commit_body(
            self.group_id,
            generation_id=self._generation_id,
            member_id=self._member_id,
            offsets=self._positions,
        )
        try:
            self.client.call_coordinator(
                self.group_id, ApiKey.OFFSET_COMMIT, body, read_offset_commit
            )
        except GroupMembershipError as error:
            self._note_membership_problem(error.code)
            raise

    def close(self) -> None:
        """Commit (with auto-commit), stop heartbeating and leave the group."""
        if self._closed:
            return
        try:
            if self._auto_commit_interval_s is not None:
                self.commit()
        finally:
            self._closed = True
            if self._heartbeater is not None:
                self._heartbeater.close(timeout_s=self._session_timeout_ms / 1000)
            self._leave()
            self.client.close()

    # -- membership ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigurationError("the consumer is closed")

    def _membership(self) -> _Membership | None:
        if self._generation_id < 0:
            return None
        return _Membership(self._member_id, self._generation_id)

    def _note_membership_problem(self, code: ErrorCode) -> None:
        if code in REJOIN_CODES:
            self._needs_join = True
        if code in _MEMBER_LOST_CODES:
            self._member_id = ""

    def _ensure_member(self) -> None:
        if self._heartbeater is not None:
            problem = self._heartbeater.take_problem(self._membership())
            if problem is not None:
                log.info("group %r: %s, rejoining", self.group_id, problem.name)
                self._note_membership_problem(problem)
        if not self._needs_join:
            return
        self._revoke()
        generation_id, assigned = self._join_and_sync()
        self._generation_id = generation_id
        self._assignment = assigned
        self._positions = self._starting_positions(assigned)
        self._needs_join = False
        if self._heartbeater is None:
            self._heartbeater = _Heartbeater(
                self._bootstrap,
                self.group_id,
                client_id=f"{self._client_id}-heartbeat",
                interval_s=self._heartbeat_interval_s,
                timeout_s=max(1.0, self._session_timeout_ms / 2000),
            )
        self._heartbeater.publish(self._membership())
        if self._on_assign is not None:
            self._on_assign(self.assignment())

    def _revoke(self) -> None:
        """Give up the current assignment: auto-commit, ``on_revoke``, forget positions."""
        if self._heartbeater is not None:
            self._heartbeater.publish(None)
        if self._generation_id < 0:
            return
        revoked = self.assignment()
        try:
            if self._auto_commit_interval_s is not None and self._member_id:
                try:
                    self.commit()
                except GroupMembershipError:
                    pass  # the generation is gone; the next owner starts at the last commit
            if self._on_revoke is not None:
                self._on_revoke(revoked)
        finally:
            self._generation_id = -1
            self._assignment = {}
            self._positions = {}
            self._buffer.clear()
            self._needs_join = True

    def _join_and_sync(self) -> tuple[int, dict[str, list[int]]]:
        """Join until a generation's SyncGroup succeeds; return (generation, assignment).

        Rebalances that restart the round are retried within the retry policy's time plus
        the rebalance timeout."""
        budget = RetryBudget(
            RetryPolicy(
                max_attempts=limits.RETRY_ATTEMPTS_MAX,
                timeout_s=self.client.retry.timeout_s + self._rebalance_timeout_ms / 1000,
            )
        )
        while True:
            joined = self.client.call_coordinator(
                self.group_id, ApiKey.JOIN_GROUP, self._join_body(), _read_group_answer
            )
            code = ErrorCode.from_code(joined["error_code"])
            if code is ErrorCode.MEMBER_ID_REQUIRED:
                self._member_id = joined["member_id"]
                continue  # not a failure: the protocol's second step
            if code is ErrorCode.NONE:
                self._member_id = joined["member_id"]
                synced = self._sync(joined)
                code = ErrorCode.from_code(synced["error_code"])
                if code is ErrorCode.NONE:
                    assignment = decode_assignment(synced["assignment"])
                    return joined["generation_id"], _own_topics(assignment, self.topics)
            if code not in REJOIN_CODES:
                raise error_for(code, f"joining group {self.group_id!r}: {code.message}")
            if code in _MEMBER_LOST_CODES:
                self._member_id = ""
            delay_s = budget.next_delay_s()
            if delay_s is None:
                raise FluxTimeoutError(
                    f"could not join group {self.group_id!r} in {budget.elapsed_s:.1f} s "
                    f"(last answer: {code.name})"
                )
            time.sleep(delay_s)

    def _join_body(self) -> dict[str, Any]:
        subscription = encode_subscription(Subscription(topics=self.topics, version=0))
        return {
            "group_id": self.group_id,
            "session_timeout_ms": self._session_timeout_ms,
            "rebalance_timeout_ms": self._rebalance_timeout_ms,
            "member_id": self._member_id,
            "group_instance_id": None,
            "protocol_type": _PROTOCOL_TYPE,
            "protocols": [{"name": RANGE_ASSIGNOR, "metadata": subscription}],
            "reason": None,
        }

    def _sync(self, joined: dict[str, Any]) -> dict[str, Any]:
        assignments = []
        if joined["leader"] == joined["member_id"]:
            assignments = [
                {"member_id": member_id, "assignment": encode_assignment(Assignment(assigned))}
                for member_id, assigned in self._assign(joined["members"]).items()
            ]
        body = {
            "group_id": self.group_id,
            "generation_id": joined["generation_id"],
            "member_id": joined["member_id"],
            "group_instance_id": None,
            "protocol_type": _PROTOCOL_TYPE,
            "protocol_name": RANGE_ASSIGNOR,
            "assignments": assignments,
        }
        return self.client.call_coordinator(
            self.group_id, ApiKey.SYNC_GROUP, body, _read_group_answer
        )

    def _assign(self, members: list[dict[str, Any]]) -> dict[str, dict[str, list[int]]]:
        """The leader's job: range-assign every member's subscribed topics."""
        subscriptions = {
            member["member_id"]: decode_subscription(member["metadata"]) for member in members
        }
        counts: dict[str, int] = {}
        for topic in sorted({t for s in subscriptions.values() for t in s.topics}):
            try:
                counts[topic] = self.client.partition_count(topic)
            except UnknownTopicError:
                log.warning("group %r: subscribed topic %r does not exist", self.group_id, topic)
        return range_assign(subscriptions, counts)

    def _leave(self) -> None:
        if not self._member_id:
            return
        member = {"member_id": self._member_id, "group_instance_id": None, "reason": None}
        body = {"group_id": self.group_id, "member_id": self._member_id, "members": [member]}
        try:
            self.client.call_coordinator(
                self.group_id, ApiKey.LEAVE_GROUP, body, lambda response, _: None
            )
        except FluxError as error:  # the session timeout removes the member anyway
            log.info("leaving group %r failed: %s", self.group_id, error)
        self._member_id = ""
        self._generation_id = -1

    # -- positions -------------------------------------------------------------------------

    def _starting_positions(self, assigned: dict[str, list[int]]) -> dict[TopicPartition, int]:
        if not assigned:
            return {}
        committed = self.client.call_coordinator(
            self.group_id,
            ApiKey.OFFSET_FETCH,
            offset_fetch_body(self.group_id, assigned),
            read_offset_fetch,
        )
        positions: dict[TopicPartition, int] = {}
        for topic, partitions in sorted(assigned.items()):
            missing = [p for p in partitions if (topic, p) not in committed]
            reset = self._reset_offsets(topic) if missing else {}
            for partition in sorted(partitions):
                key = (topic, partition)
                positions[key] = committed[key] if key in committed else reset[partition]
        return positions

    def _reset_offsets(self, topic: str) -> dict[int, int]:
        if self._auto_offset_reset == "none":
            raise OffsetOutOfRangeError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"group {self.group_id!r} has no committed offset for {topic!r} and "
                "auto_offset_reset is 'none'",
            )
        timestamp = (
            _EARLIEST_TIMESTAMP if self._auto_offset_reset == "earliest" else (_LATEST_TIMESTAMP)
        )
        return list_offsets(self.client, topic, timestamp)

    def _maybe_auto_commit(self) -> None:
        interval_s = self._auto_commit_interval_s
        if interval_s is None or time.monotonic() - self._last_auto_commit < interval_s:
            return
        self._last_auto_commit = time.monotonic()
        try:
            self.commit()
        except GroupMembershipError:
            pass  # the next poll rejoins

    def _take(self, max_records: int) -> list[ConsumedRecord]:
        taken = []
        while self._buffer and len(taken) < max_records:
            record = self._buffer.popleft()
            key = (record.topic, record.partition)
            if key not in self._positions:
                continue
            taken.append(record)
            self._positions[key] = record.offset + 1
        return taken

    # -- fetching --------------------------------------------------------------------------

    def _fetch(self, wait_ms: int) -> None:
        """One Fetch per partition leader, from the current positions, into the buffer."""
        by_leader: dict[int, list[TopicPartition]] = {}
        stale = False
        for topic, partition in self._positions:
            try:
                leader = self.client.leader_for(topic, partition).node_id
            except KafkaError:
                stale = True
                continue
            by_leader.setdefault(leader, []).append((topic, partition))
        wait_per_leader_ms = wait_ms // max(1, len(by_leader))
        for leader, partitions in sorted(by_leader.items()):
            try:
                response = self.client.send_once(
                    leader,
                    ApiKey.FETCH,
                    self._fetch_body(partitions, wait_per_leader_ms),
                    lambda answer, _: answer,
                )
            except (FluxConnectionError, FluxTimeoutError):
                stale = True
                continue
            stale = self._read_fetch(response) or stale
        if stale:
            try:
                self.client.refresh()
            except FluxConnectionError:
                pass  # the next poll tries again
        if not by_leader and wait_ms:
            time.sleep(min(wait_ms, _POLL_SLICE_MS) / 1000)  # nothing to fetch (yet): no spin

    def _fetch_body(self, partitions: list[TopicPartition], wait_ms: int) -> dict[str, Any]:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(
                {
                    "partition": partition,
                    "current_leader_epoch": -1,
                    "fetch_offset": self._positions[(topic, partition)],
                    "log_start_offset": -1,
                    "partition_max_bytes": self._fetch_max_bytes,
                }
            )
        return {
            "replica_id": -1,
            "max_wait_ms": wait_ms,
            "min_bytes": 1,
            "max_bytes": self._fetch_max_bytes,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        }

    def _read_fetch(self, response: dict[str, Any]) -> bool:
        """Buffer the fetched records; True if metadata looks stale (a routing error)."""
        code = ErrorCode.from_code(response.get("error_code", 0))
        if code is not ErrorCode.NONE:
            raise error_for(code, f"fetch for group {self.group_id!r}: {code.message}")
        stale = False
        for topic_result in response["responses"]:
            topic = topic_result["topic"]
            for result in topic_result["partitions"]:
                key = (topic, result["partition_index"])
                position = self._positions.get(key)
                if position is None:
                    continue
                code = ErrorCode.from_code(result["error_code"])
                if code is ErrorCode.NONE:
                    self._buffer.extend(decode_fetched(result["records"], *key, position))
                elif code is ErrorCode.OFFSET_OUT_OF_RANGE:
                    self._positions[key] = self._reset_offsets(topic)[key[1]]
                elif code in LEADER_RETRY_CODES:
                    stale = True
                else:
                    raise error_for(code, f"{topic}-{key[1]} at offset {position}: {code.message}")
        return stale


def _read_group_answer(response: dict[str, Any], version: int) -> dict[str, Any]:
    """A JoinGroup or SyncGroup answer; only coordinator errors raise (to be retried)."""
    code = ErrorCode.from_code(response["error_code"])
    if code in COORDINATOR_RETRY_CODES:
        raise error_for(code)
    return response


def _own_topics(assignment: Assignment, topics: list[str]) -> dict[str, list[int]]:
    """The assigned partitions of the topics this member subscribed to (a leader of another
    client could hand out more; Kafka's consumers ignore those too)."""
    wanted = set(topics)
    return {t: sorted(set(ps)) for t, ps in sorted(assignment.assigned.items()) if t in wanted}
