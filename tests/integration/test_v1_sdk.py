"""The Python V1 SDK (flux.sdk.v1) against a real 3-node cluster: the low-level clients (blocking
and pipelined asyncio), the runtime producer routing by metadata, a runtime consumer group, and
the runtime producer and consumer through a SIGKILL of a leader that also coordinates the
group, with nothing acknowledged lost."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from flux.cluster.launcher import NodeProcess
from flux.sdk.v1 import (
    AsyncFLUXClient,
    AsyncFLUXRuntime,
    FLUXClient,
    FLUXProtocolError,
    FLUXRuntime,
)

from tests.integration.helpers import wait_until
from tests.integration.http_helpers import running_cluster

pytestmark = pytest.mark.integration


#: The sections of the clusters these tests (and test_v1_typescript.py) run: a V1 listener,
#: replicated topics, groups that rebalance at once.
V1_CLUSTER: dict[str, dict[str, Any]] = {
    "broker": {"group_initial_rebalance_delay_ms": 0},
    "topic": {"replication_factor": 3, "min_insync_replicas": 2},
    "v1": {"port": 0},
}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NodeProcess]]:
    with running_cluster(tmp_path_factory.mktemp("v1-sdk"), **V1_CLUSTER) as processes:
        yield processes


def _addresses(nodes: list[NodeProcess]) -> list[str]:
    return [node.ready["v1"] for node in nodes]


def _create(client: FLUXClient, topic: str, partitions: int = 3) -> None:
    client.admin_create_topic(topic, partitions, 3)
    wait_until(lambda: client.admin_get_metadata()["topics"].get(topic) == partitions)
    wait_until(
        lambda: all(
            client.admin_get_metadata()["leaders"].get((topic, p), -1) >= 0
            for p in range(partitions)
        )
    )


def test_the_blocking_client_speaks_every_command(nodes: list[NodeProcess]) -> None:
    with FLUXClient(nodes[0].ready["v1"]) as client:
        _create(client, "sdk-basic")
        metadata = client.admin_get_metadata()
        assert sorted(metadata["brokers"].values()) == sorted(_addresses(nodes))
        leader = metadata["brokers"][metadata["leaders"][("sdk-basic", 0)]]
        key = next(f"k{i}" for i in range(100) if _partition(f"k{i}", 3) == 0)
        with FLUXClient(leader) as at_leader:
            sent = at_leader.produce("sdk-basic", key, "hello%world", acks="all")
            assert sent["partition"] == 0 and sent["hw"] == sent["offset"] + 1
            records, high_watermark = at_leader.consume("sdk-basic", 0, sent["offset"])
            assert records == [(sent["offset"], "hello%world")] and high_watermark == sent["hw"]
        follower = next(a for a in _addresses(nodes) if a != leader)
        with FLUXClient(follower) as elsewhere:
            with pytest.raises(FLUXProtocolError) as raised:
                elsewhere.produce("sdk-basic", key, "x")
            assert raised.value.code == "NOT_LEADER" and raised.value.leader_address == leader
        with pytest.raises(ValueError):
            client.produce("sdk-basic", "k", "has space")
        with pytest.raises(FLUXProtocolError) as raised:
            client.consume("no-such-topic", 0, 0)
        assert raised.value.code == "UNKNOWN_TOPIC" and "V1|" in raised.value.response


def test_the_async_client_pipelines(nodes: list[NodeProcess]) -> None:
    async def run() -> list[dict[str, int]]:
        async with AsyncFLUXClient(nodes[0].ready["v1"]) as client:
            metadata = await client.admin_get_metadata()
            if "sdk-async" not in metadata["topics"]:
                await client.admin_create_topic("sdk-async", 1, 3)
            while (await client.admin_get_metadata())["leaders"].get(("sdk-async", 0), -1) < 0:
                await asyncio.sleep(0.05)
            leader = (await client.admin_get_metadata())["brokers"][
                (await client.admin_get_metadata())["leaders"][("sdk-async", 0)]
            ]
        async with AsyncFLUXClient(leader) as client:
            return await asyncio.gather(
                *(client.produce("sdk-async", "k", f"v{i}", acks="all") for i in range(200))
            )

    sent = asyncio.run(run())
    offsets = [s["offset"] for s in sent]
    assert offsets == sorted(offsets) and len(set(offsets)) == 200  # in request order


def test_the_runtime_produces_by_metadata_and_a_group_consumes_everything(
    nodes: list[NodeProcess],
) -> None:
    with FLUXClient(nodes[0].ready["v1"]) as client:
        _create(client, "sdk-runtime")
    runtime = FLUXRuntime(brokers=[nodes[1].ready["v1"]])  # one address: it finds the rest
    try:
        producer = runtime.producer(max_retries=5, retry_backoff_ms=100, batch_size=50)
        sent = producer.send(
            topic="sdk-runtime",
            messages=[{"key": f"user{i}", "value": f"event-{i}"} for i in range(300)],
            acks="all",
        )
        assert len(sent) == 300 and {s["partition"] for s in sent} == {0, 1, 2}
    finally:
        runtime.close()

    seen: list[str] = []
    assigned: dict[str, list[int]] = {}
    lock = threading.Lock()
    consumers: list = []

    def member(consumer_id: str, stop: threading.Event) -> None:
        member_runtime = FLUXRuntime(brokers=_addresses(nodes))
        try:
            consumer = member_runtime.consumer(
                group_id="sdk-group",
                consumer_id=consumer_id,
                heartbeat_interval_ms=200,
                on_assign=lambda partitions: assigned.__setitem__(consumer_id, partitions),
            )
            consumers.append(consumer)
            consumer.subscribe("sdk-runtime")

            def handle(message: dict) -> None:
                with lock:
                    seen.append(message["value"])

            while not stop.is_set():
                consumer.run(handle, max_messages=50)
            consumer.disconnect()
        finally:
            member_runtime.close()

    stop = threading.Event()
    threads = [threading.Thread(target=member, args=(f"c{i}", stop)) for i in range(2)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: len(set(seen)) == 300, timeout_s=60)
    finally:
        stop.set()
        for consumer in consumers:
            consumer.disconnect()  # ends a run() still waiting for its 50 messages
        for thread in threads:
            thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    assert sorted(set(seen)) == sorted(f"event-{i}" for i in range(300))
    with FLUXClient(nodes[0].ready["v1"]) as client:
        committed = sum(_committed(client, "sdk-group", "sdk-runtime", p, nodes) for p in range(3))
    assert committed == 300  # auto-commit reached every partition's end


def test_the_runtime_producer_and_consumer_survive_a_leader_sigkill(tmp_path) -> None:
    """A runtime consumer reads while the runtime producer sends; the broker that coordinates
    the group and leads a partition is SIGKILLed halfway. Both rotate (NOT_LEADER, a broken
    connection) and go on: every acknowledged record is stored and handed to the consumer,
    and the group's committed offsets reach every partition's end at the new coordinator."""
    with running_cluster(tmp_path / "kill", **V1_CLUSTER) as processes:
        with FLUXClient(processes[0].ready["v1"]) as client:
            _create(client, "sdk-kill", partitions=3)
        addresses = [p.ready["v1"] for p in processes]

        async def through_the_kill() -> tuple[list[tuple[dict[str, int], str]], set[str], int]:
            runtime = AsyncFLUXRuntime(addresses)
            producer = runtime.producer(max_retries=30, retry_backoff_ms=100, batch_size=20)
            consumer_runtime = AsyncFLUXRuntime(addresses)
            consumer = consumer_runtime.consumer(
                group_id="sdk-kill-group",
                consumer_id="survivor",
                heartbeat_interval_ms=200,
                max_retries=60,
                retry_backoff_ms=100,
            )
            consumer.subscribe("sdk-kill")
            seen: set[str] = set()
            acknowledged: list[tuple[dict[str, int], str]] = []
            reading = asyncio.ensure_future(
                consumer.run(lambda message: seen.add(message["value"]))
            )
            try:
                await _until(lambda: consumer.generation >= 0 and consumer.assigned, reading)
                coordinator = consumer._coordinator
                victim = next(p for p in processes if p.ready["v1"] == coordinator)
                metadata = await runtime.metadata(refresh=True)
                led = [p for (t, p), n in metadata["leaders"].items()
                       if t == "sdk-kill" and n == victim.node_id]  # fmt: skip
                assert led, "the coordinator leads a partition of sdk-kill too"
                for round_ in range(20):
                    if round_ == 5:
                        victim.kill()
                    messages = [
                        {"key": f"u{round_}-{i}", "value": f"r{round_}-{i}"} for i in range(20)
                    ]
                    results = await producer.send(topic="sdk-kill", messages=messages)
                    acknowledged += [
                        (r, m["value"]) for r, m in zip(results, messages, strict=True)
                    ]
                wanted = {value for _, value in acknowledged}
                await _until(lambda: wanted <= seen, reading, timeout_s=90)
                await consumer.disconnect()
                await reading
            finally:
                reading.cancel()
                await runtime.close()
                await consumer_runtime.close()
            return acknowledged, seen, victim.node_id

        acknowledged, seen, victim_id = asyncio.run(through_the_kill())
        assert len(acknowledged) == 400
        survivors = [p for p in processes if p.node_id != victim_id]
        with FLUXClient(survivors[0].ready["v1"]) as client:

            def moved() -> dict | None:
                metadata = client.admin_get_metadata()
                led = [metadata["leaders"][("sdk-kill", p)] for p in range(3)]
                return metadata if not {-1, victim_id} & set(led) else None

            metadata = wait_until(moved)
        stored: dict[tuple[int, int], str] = {}
        ends: dict[int, int] = {}
        for partition in range(3):
            leader = metadata["brokers"][metadata["leaders"][("sdk-kill", partition)]]
            with FLUXClient(leader) as at_leader:
                offset = 0
                while True:
                    records, ends[partition] = at_leader.consume(
                        "sdk-kill", partition, offset, 1000
                    )
                    stored.update({(partition, o): v for o, v in records})
                    if not records:
                        break
                    offset = records[-1][0] + 1
        lost = [
            value
            for result, value in acknowledged
            if stored.get((result["partition"], result["offset"])) != value
        ]
        assert not lost, f"{len(lost)} acknowledged records lost: {lost[:5]}"
        assert {value for _, value in acknowledged} <= seen
        with FLUXClient(survivors[0].ready["v1"]) as client:
            committed = {
                p: _committed_anywhere(client, "sdk-kill-group", "sdk-kill", p) for p in range(3)
            }
        assert committed == ends, (committed, ends)  # auto-commit reached every end


async def _until(check, task: asyncio.Future, *, timeout_s: float = 30.0) -> None:
    """Wait for ``check()``; fail early with the consumer's error if ``task`` ended."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        if task.done():
            task.result()
            raise AssertionError("the consumer stopped")
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def _committed_anywhere(client: FLUXClient, group: str, topic: str, partition: int) -> int:
    """The group's committed offset, asked of whichever broker coordinates it now."""
    try:
        return client.offset(group, topic, partition)
    except FLUXProtocolError as error:
        if error.code != "NOT_LEADER" or not error.leader_address:
            raise
        address = error.leader_address
    with FLUXClient(address) as coordinator:
        return coordinator.offset(group, topic, partition)


def _partition(key: str, partitions: int) -> int:
    from flux.protocol.partitioner import fnv1a_32

    return fnv1a_32(key.encode()) % partitions


def _committed(client: FLUXClient, group: str, topic: str, partition: int, nodes) -> int:
    try:
        return client.offset(group, topic, partition)
    except FLUXProtocolError:
        return 0
