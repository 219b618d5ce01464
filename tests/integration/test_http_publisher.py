"""flux.sdk.http's publisher on a real 3-node cluster: every message goes straight to its
partition's leader (no broker forwards one, by the brokers' own counter), a new topic is
created and then routed, bad input is a clear error, and a leader SIGKILLed mid-stream costs
retries but no message (each stored exactly once)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from flux.cluster.launcher import NodeProcess
from flux.sdk import AsyncHttpPublisher, FluxConnectionError, HttpApiError, HttpPublisher
from flux.sdk.http import partition_of
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.helpers import wait_until
from tests.integration.http_helpers import (
    call,
    create_everywhere,
    http_address,
    metrics_text,
    read_messages,
    running_cluster,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NodeProcess]]:
    with running_cluster(tmp_path_factory.mktemp("http-publisher"), 3) as processes:
        yield processes


@pytest.fixture
def own_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NodeProcess]]:
    """A cluster of the test's own, for a test that kills a node."""
    with running_cluster(tmp_path_factory.mktemp("http-publisher-kill"), 3) as processes:
        yield processes


def _forwarded(nodes: list[NodeProcess]) -> int:
    """Messages the brokers forwarded to a leader, summed over the live ones."""
    total = 0.0
    for node in nodes:
        if not node.is_running():
            continue
        for family in text_string_to_metric_families(metrics_text(node)):
            if family.name == "flux_http_forwarded_records":
                total += sum(s.value for s in family.samples if s.name.endswith("_total"))
    return int(total)


def _stored(node: NodeProcess, topic: str, partitions: int) -> list[tuple[int, str, str]]:
    """``(partition, id, value)`` of every committed message of ``topic``."""
    return [
        (p, m["id"], m["value"]) for p in range(partitions) for m in read_messages(node, topic, p)
    ]


def _leader_of(node: NodeProcess, topic: str, partition: int) -> int:
    status, answer = call(node, "GET", "/cluster")
    assert status == 200, answer
    [found] = [t for t in answer["topics"] if t["name"] == topic]
    return int(found["partitions"][partition]["leader"])


def test_messages_go_to_their_leaders_and_none_is_forwarded(nodes: list[NodeProcess]) -> None:
    create_everywhere(nodes, "routed", 3)
    # The counter counts: messages posted to any broker in turn take the hop.
    for index in range(6):
        body = {"id": f"plain-{index}", "message": f"p{index}", "topic": "routed"}
        assert call(nodes[index % 3], "POST", "/publish", body)[0] == 200
    before = _forwarded(nodes)
    assert before > 0

    with HttpPublisher(http_address(nodes[0])) as publisher:
        answers = [publisher.publish("routed", f"v{i}", id=f"id-{i}") for i in range(30)]
        keyed = publisher.publish("routed", "k", key="customer-7", headers={"source": "test"})
        no_id = [publisher.publish("routed", f"n{i}") for i in range(6)]
        again = publisher.publish("routed", "changed", id="id-7")

    assert [a.partition for a in answers] == [
        partition_of(3, key=None, message_id=f"id-{i}") for i in range(30)
    ]
    assert not any(a.duplicate for a in answers)
    assert sorted(a.partition for a in no_id) == [0, 0, 1, 1, 2, 2]  # round robin
    assert again.duplicate and (again.partition, again.offset) == (
        answers[7].partition,
        answers[7].offset,
    )
    assert keyed.partition == partition_of(3, key="customer-7", message_id=None)
    assert _forwarded(nodes) == before  # not one message took the hop
    [keyed_stored] = [
        m for m in read_messages(nodes[2], "routed", keyed.partition) if m["offset"] == keyed.offset
    ]
    assert (keyed_stored["key"], keyed_stored["headers"]) == ("customer-7", {"source": "test"})
    stored = _stored(nodes[1], "routed", 3)
    assert sorted(i for _, i, _ in stored if i.startswith("id-")) == sorted(
        f"id-{i}" for i in range(30)
    )
    assert ("id-7" in {i for _, i, _ in stored}) and "changed" not in {v for *_, v in stored}


def test_a_new_topic_is_created_then_routed(nodes: list[NodeProcess]) -> None:
    async def scenario() -> tuple[int, int]:
        bootstrap = [http_address(n) for n in nodes]
        async with AsyncHttpPublisher(bootstrap) as publisher:
            first = await publisher.publish("fresh", "hello", id="first")
            # Until every broker's metadata has the topic a publish may meet one without it.
            await asyncio.to_thread(
                wait_until, lambda: all(call(n, "GET", "/topics/fresh")[0] == 200 for n in nodes)
            )
            await publisher.publish("fresh", "warm", id="warm")  # reads the view again
            before = await asyncio.to_thread(_forwarded, nodes)
            await asyncio.gather(
                *(publisher.publish("fresh", f"m{i}", id=f"m{i}") for i in range(40))
            )
            assert publisher.view is not None and publisher.view.partition_count("fresh")
            return first.offset, before

    first_offset, before = asyncio.run(scenario())
    assert first_offset == 0
    assert _forwarded(nodes) == before
    status, answer = call(nodes[2], "GET", "/topics/fresh")
    assert status == 200, answer
    ids = {i for _, i, _ in _stored(nodes[2], "fresh", len(answer["partitions"]))}
    assert ids == {"first", "warm", *(f"m{i}" for i in range(40))}


def test_bad_input_and_no_broker_are_clear_errors(nodes: list[NodeProcess]) -> None:
    with HttpPublisher(http_address(nodes[0])) as publisher:
        with pytest.raises(HttpApiError) as refused:
            publisher.publish("routed-bad", "")
        assert refused.value.status == 400
        assert refused.value.answer["field"] == "message"
        # The publisher keeps working after a refusal.
        assert publisher.publish("routed-bad", "fine", id="ok").offset == 0

    with HttpPublisher("http://127.0.0.1:1", timeout_s=2) as nobody:
        with pytest.raises(FluxConnectionError, match="no broker answered GET /cluster"):
            nobody.publish("routed-bad", "lost")


def test_a_killed_leader_costs_retries_not_messages(own_nodes: list[NodeProcess]) -> None:
    nodes = own_nodes
    create_everywhere(nodes, "failover", 3)
    ids = [f"f-{i}" for i in range(60)]
    victim_partition = partition_of(3, key=None, message_id=ids[0])
    victim_id = _leader_of(nodes[0], "failover", victim_partition)
    [victim] = [n for n in nodes if n.node_id == victim_id]
    survivor = next(n for n in nodes if n is not victim)

    async def scenario() -> list[int]:
        bootstrap = [http_address(n) for n in nodes]
        async with AsyncHttpPublisher(bootstrap, timeout_s=60) as publisher:
            await asyncio.gather(*(publisher.publish("failover", "x", id=i) for i in ids[:20]))
            victim.kill()  # SIGKILL: the leader of a partition the next messages hash to
            results = await asyncio.gather(
                *(publisher.publish("failover", "x", id=i) for i in ids[20:])
            )
            return [r.partition for r in results]

    partitions = asyncio.run(scenario())
    assert victim_partition in partitions  # some messages did meet the dead leader
    assert _leader_of(survivor, "failover", victim_partition) != victim_id
    stored = [i for _, i, _ in _stored(survivor, "failover", 3)]
    assert sorted(stored) == sorted(ids)  # every message, none twice
