"""The SDK's consumer groups and idempotent producer against real nodes: two ``GroupConsumer``s
share a topic and read it exactly once, a restarted member resumes at the committed offset,
``Admin`` lists, describes, resets and deletes groups, and a retried idempotent batch is
written once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from flux.protocol.api import ApiKey
from flux.sdk import (
    Admin,
    AsyncProducer,
    ClusterClient,
    ConsumedRecord,
    GroupConsumer,
    GroupNotEmptyError,
    Message,
    SimpleConsumer,
    SimpleProducer,
)
from flux.sdk.errors import FluxConnectionError

from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration

GROUP_SETTINGS = {"broker": {"group_initial_rebalance_delay_ms": 0}}
FAST_MEMBER = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 200}


def _produce(bootstrap: str, topic: str, count: int, *, partitions: int, tag: str) -> None:
    with SimpleProducer(bootstrap) as producer:
        for index in range(count):
            producer.send(topic, f"{tag}-{index}", partition=index % partitions)


class _Member:
    """A ``GroupConsumer`` polling and committing on its own thread (the thread owns it)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.records: list[ConsumedRecord] = []
        self.assignments: list[list[tuple[str, int]]] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._consumer = GroupConsumer(
            bootstrap,
            group,
            topics=[topic],
            on_assign=self._on_assign,
            on_revoke=lambda _: self._consumer.commit(),  # hand over exactly where we stopped
            **FAST_MEMBER,
        )
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_assign(self, partitions: list[tuple[str, int]]) -> None:
        with self._lock:
            self.assignments.append(partitions)

    def latest_assignment(self) -> list[tuple[str, int]] | None:
        with self._lock:
            return self.assignments[-1] if self.assignments else None

    def consumed(self) -> list[ConsumedRecord]:
        with self._lock:
            return list(self.records)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                records = self._consumer.poll(timeout_s=0.2)
                with self._lock:
                    self.records.extend(records)
                if records:
                    self._consumer.commit()
        except BaseException as error:  # reported by stop()
            self.error = error
        finally:
            self._consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()
        if self.error is not None:
            raise self.error


def _values(records: list[ConsumedRecord]) -> list[str]:
    return [(r.value or b"").decode() for r in records]


def test_two_consumers_share_a_topic_exactly_once_and_hand_over_on_leave(node_factory) -> None:
    node = node_factory(**GROUP_SETTINGS)
    bootstrap = node.bootstrap_servers
    with Admin(bootstrap) as admin:
        admin.create_topic("shared", partitions=4, replication_factor=1)
    first, second = _Member(bootstrap, "sharers", "shared"), _Member(bootstrap, "sharers", "shared")
    try:
        wait_until(
            lambda: all(len(m.latest_assignment() or []) == 2 for m in (first, second)),
            timeout_s=20,
        )
        owned = [set(m.latest_assignment() or []) for m in (first, second)]
        assert owned[0] | owned[1] == {("shared", p) for p in range(4)}
        _produce(bootstrap, "shared", 200, partitions=4, tag="a")
        wait_until(lambda: len(first.consumed()) + len(second.consumed()) >= 200, timeout_s=20)
        for member, mine in zip((first, second), owned, strict=True):
            assert {(r.topic, r.partition) for r in member.consumed()} <= mine
        second.stop()  # commits what it read, leaves; the first member takes everything over
        wait_until(lambda: len(first.latest_assignment() or []) == 4, timeout_s=20)
        _produce(bootstrap, "shared", 100, partitions=4, tag="b")
        wait_until(lambda: len(first.consumed()) + len(second.consumed()) >= 300, timeout_s=20)
    finally:
        first.stop()
        second.stop()
    everything = _values(first.consumed()) + _values(second.consumed())
    assert sorted(everything) == sorted(
        [f"a-{i}" for i in range(200)] + [f"b-{i}" for i in range(100)]
    )


def test_restarted_consumer_resumes_at_the_committed_offset(node_factory) -> None:
    node = node_factory(**GROUP_SETTINGS)
    bootstrap = node.bootstrap_servers
    with Admin(bootstrap) as admin:
        admin.create_topic("resume", partitions=1, replication_factor=1)
    _produce(bootstrap, "resume", 10, partitions=1, tag="r")

    def consume(count: int, **options) -> list[ConsumedRecord]:
        with GroupConsumer(bootstrap, "resumers", topics=["resume"], **FAST_MEMBER, **options) as c:
            got: list[ConsumedRecord] = []
            wait_until(
                lambda: got.extend(c.poll(0.2, max_records=count - len(got))) or len(got) >= count
            )
            c.commit()
            return got

    assert [r.offset for r in consume(4)] == [0, 1, 2, 3]
    assert [r.offset for r in consume(6)] == [4, 5, 6, 7, 8, 9]
    with Admin(bootstrap) as admin:
        assert admin.committed_offsets("resumers") == {("resume", 0): 10}
        # A new group starting at the latest offset sees nothing of the old records.
        with GroupConsumer(
            bootstrap, "latecomers", topics=["resume"], auto_offset_reset="latest", **FAST_MEMBER
        ) as late:
            assert late.poll(0.5) == []
            assert late.position("resume", 0) == 10


def test_admin_group_operations(node_factory) -> None:
    node = node_factory(**GROUP_SETTINGS)
    bootstrap = node.bootstrap_servers
    with Admin(bootstrap) as admin:
        admin.create_topic("ops", partitions=2, replication_factor=1)
        _produce(bootstrap, "ops", 10, partitions=2, tag="o")
        with GroupConsumer(
            bootstrap, "operators", topics=["ops"], client_id="op-1", **FAST_MEMBER
        ) as c:
            wait_until(lambda: c.poll(0.2, max_records=3))
            c.commit()
            committed = {("ops", p): c.position("ops", p) for p in range(2)}
            listed = {g.group_id: g for g in admin.list_groups()}
            assert listed["operators"].protocol_type == "consumer"
            assert listed["operators"].state == "Stable"
            described = admin.describe_group("operators")
            assert described.state == "Stable" and described.protocol == "range"
            (member,) = described.members
            assert member.client_id == "op-1" and member.assignment == {"ops": [0, 1]}
            assert described.offsets == committed
            assert described.lag == {key: 5 - offset for key, offset in committed.items()}
            with pytest.raises(GroupNotEmptyError, match="members are active"):
                admin.reset_offsets("operators", "ops", to="earliest")
            with pytest.raises(GroupNotEmptyError):
                admin.delete_group("operators")
        assert admin.describe_group("operators").state == "Empty"
        assert admin.reset_offsets("operators", "ops", to=7) == {0: 5, 1: 5}  # clamped
        assert admin.reset_offsets("operators", "ops", to="earliest") == {0: 0, 1: 0}
        assert admin.describe_group("operators").lag == {("ops", 0): 5, ("ops", 1): 5}
        admin.delete_group("operators")
        assert "operators" not in {g.group_id for g in admin.list_groups()}
        assert admin.committed_offsets("operators") == {}


def _lose_first_produce_response(client: ClusterClient) -> list[int]:
    """Make the client's first Produce reach the broker but its answer get lost (as when a
    connection dies after the write): the producer then retries the same batch."""
    real_send_once: Callable = client.send_once
    sent: list[int] = []

    async def send_once(node_id, api_key, body, handle, **options):
        result = await real_send_once(node_id, api_key, body, handle, **options)
        if api_key == ApiKey.PRODUCE:
            sent.append(node_id)
            if len(sent) == 1:
                raise FluxConnectionError("response lost (simulated)")
        return result

    client.send_once = send_once  # type: ignore[method-assign]
    return sent


def test_idempotent_producer_retries_without_duplicates(node_factory) -> None:
    node = node_factory()
    bootstrap = node.bootstrap_servers
    with Admin(bootstrap) as admin:
        admin.create_topic("once", partitions=1, replication_factor=1)

    async def produce(idempotent: bool, values: list[bytes]) -> tuple[list[int], list[int]]:
        async with AsyncProducer(bootstrap, idempotent=idempotent, acks="all") as producer:
            assert producer.idempotent is idempotent
            sent = _lose_first_produce_response(producer.client)
            delivered = await producer.send("once", [Message(v, partition=0) for v in values])
            return [m.offset for m in delivered], sent

    offsets, sent = asyncio.run(produce(True, [b"a", b"b"]))
    assert offsets == [0, 1] and len(sent) == 2  # written once, acknowledged by the retry
    with SimpleProducer(bootstrap, idempotent=True) as producer:
        assert producer.acks == -1
        assert producer.send("once", b"c", partition=0).offset == 2
    with SimpleConsumer(bootstrap) as consumer:
        assert [r.value for r in consumer.read_all("once")] == [b"a", b"b", b"c"]
    # Without idempotence the lost answer makes the retry write the batch a second time.
    asyncio.run(produce(False, [b"e"]))
    with SimpleConsumer(bootstrap) as consumer:
        assert [r.value for r in consumer.read_all("once")][3:] == [b"e", b"e"]
