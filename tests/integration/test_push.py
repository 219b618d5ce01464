"""Push subscriptions on a real 3-node cluster: webhook and WebSocket delivery in order per
partition, retries then inactive then deleted, readOld, reactivation, and the original Flux
publisher/subscriber flow."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator

import pytest
from flux.cluster.launcher import NodeProcess

from tests.integration.helpers import wait_until
from tests.integration.http_helpers import Subscriber, call, create_everywhere, running_cluster

pytestmark = pytest.mark.integration

RETRY_COUNT = 2
RETRY_INTERVAL_S = 0.4
INACTIVE_TIME_S = 3


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NodeProcess]]:
    root = tmp_path_factory.mktemp("push")
    # The original Flux knob names, in seconds.
    subscriber = {
        "retry_count": RETRY_COUNT,
        "retry_interval": RETRY_INTERVAL_S,
        "timeout": 2,
        "inactive_time": INACTIVE_TIME_S,
        "cleanup_time": 0.2,
    }
    with running_cluster(root, 3, subscriber=subscriber, topic={"partitions": 3}) as processes:
        _CLUSTER[:] = processes
        yield processes


@pytest.fixture
def subscriber() -> Iterator[Subscriber]:
    server = Subscriber().start()
    yield server
    server.stop()


_CLUSTER: list[NodeProcess] = []


def _create(node: NodeProcess, name: str, partitions: int = 3) -> None:
    create_everywhere(_CLUSTER, name, partitions)


def _subscribe(node: NodeProcess, address: str, topics: list[str], read_old: bool) -> str:
    status, answer = call(
        node, "POST", "/subscribe", {"address": address, "topics": topics, "readOld": read_old}
    )
    assert status in (200, 201), answer
    return answer["id"]


def _publish(node: NodeProcess, topic: str, values: list[str], prefix: str = "") -> None:
    for value in values:
        status, answer = call(
            node, "POST", "/publish", {"id": f"{prefix}{value}", "message": value, "topic": topic}
        )
        assert status == 200, answer


def _assert_in_order(messages: list[dict]) -> None:
    by_partition: dict[int, list[int]] = defaultdict(list)
    for message in messages:
        by_partition[message["partition"]].append(message["offset"])
    for partition, offsets in by_partition.items():
        assert offsets == sorted(offsets), (partition, offsets)
        assert len(set(offsets)) == len(offsets), (partition, offsets)


def test_original_flux_flow_over_webhook(nodes: list[NodeProcess], subscriber: Subscriber) -> None:
    """Publish with ids, subscribe with an address, receive pushes on /poll in order."""
    _create(nodes[0], "flux-flow")
    _subscribe(nodes[1], subscriber.address, ["flux-flow"], read_old=False)
    values = [f"msg-{i:03d}" for i in range(60)]
    _publish(nodes[2], "flux-flow", values)
    wait_until(lambda: len(subscriber.acked()) >= len(values))
    received = subscriber.acked()
    assert sorted(m["payload"] for m in received) == values
    assert {m["topic"] for m in received} == {"flux-flow"}
    assert sorted(m["id"] for m in received) == values  # the publisher's ids
    _assert_in_order(received)
    assert len({m["partition"] for m in received}) == 3


def test_websocket_subscriber_in_order(nodes: list[NodeProcess], subscriber: Subscriber) -> None:
    _create(nodes[0], "ws-topic")
    _subscribe(nodes[0], subscriber.ws_address, ["ws-topic"], read_old=False)
    values = [f"w{i:03d}" for i in range(30)]
    status, _ = call(
        nodes[1],
        "POST",
        "/topics/ws-topic/messages",
        {"messages": [{"value": v, "key": v[-1]} for v in values]},
    )
    assert status == 200
    wait_until(lambda: len(subscriber.acked()) >= len(values))
    received = subscriber.acked()
    assert sorted(m["payload"] for m in received) == values
    _assert_in_order(received)


def test_read_old_and_only_new(nodes: list[NodeProcess]) -> None:
    _create(nodes[0], "history", partitions=1)
    _publish(nodes[0], "history", ["old-1", "old-2", "old-3"])
    old_reader, new_reader = Subscriber().start(), Subscriber().start()
    try:
        _subscribe(nodes[1], old_reader.address, ["history"], read_old=True)
        _subscribe(nodes[2], new_reader.address, ["history"], read_old=False)
        _publish(nodes[0], "history", ["new-1", "new-2"])
        wait_until(lambda: len(old_reader.acked()) >= 5 and len(new_reader.acked()) >= 2)
        assert [m["payload"] for m in old_reader.acked()] == [
            "old-1", "old-2", "old-3", "new-1", "new-2"
        ]  # fmt: skip
        assert [m["payload"] for m in new_reader.acked()] == ["new-1", "new-2"]
    finally:
        old_reader.stop()
        new_reader.stop()


def test_failing_subscriber_retries_goes_inactive_then_is_deleted(nodes: list[NodeProcess]) -> None:
    _create(nodes[0], "poisoned", partitions=2)
    failing = Subscriber(fail=lambda message: message["payload"] == "poison").start()
    healthy = Subscriber().start()
    try:
        failing_id = _subscribe(nodes[0], failing.address, ["poisoned"], read_old=False)
        _subscribe(nodes[0], healthy.address, ["poisoned"], read_old=False)
        status, answer = call(
            nodes[1], "POST", "/topics/poisoned/messages", {"value": "poison", "partition": 0}
        )
        assert status == 200, answer
        attempts = wait_until(
            lambda: (
                (a := [t for t, m in failing.all_attempts() if m["payload"] == "poison"])
                and len(a) >= RETRY_COUNT + 1
                and a
            )
        )
        wait_until(
            lambda: call(nodes[2], "GET", f"/subscriptions/{failing_id}")[1]["active"] is False
        )
        inactive_since_ms = call(nodes[2], "GET", f"/subscriptions/{failing_id}")[1]["changed_ms"]
        # The first attempt and then exactly retry_count more, retry_interval apart.
        attempts = [t for t, m in failing.all_attempts() if m["payload"] == "poison"]
        assert len(attempts) == RETRY_COUNT + 1
        gaps = [later - earlier for earlier, later in zip(attempts, attempts[1:], strict=False)]
        assert all(gap >= RETRY_INTERVAL_S * 0.9 for gap in gaps), gaps
        # A bad subscriber never blocks the others: the healthy one got it and gets more.
        for value in ("after-1", "after-2"):
            call(nodes[1], "POST", "/topics/poisoned/messages", {"value": value, "partition": 0})
        wait_until(
            lambda: [m["payload"] for m in healthy.acked()] == ["poison", "after-1", "after-2"]
        )
        # Inactive: no more deliveries; then deleted once inactive_time has passed.
        assert wait_until(lambda: call(nodes[0], "GET", f"/subscriptions/{failing_id}")[0] == 404)
        assert time.time() * 1000 - inactive_since_ms >= INACTIVE_TIME_S * 1000
        # Its offsets went with it.
        status, group = call(nodes[0], "GET", f"/groups/__flux_push.{failing_id}")
        assert status == 404 or group["offsets"] == [], group
        assert (
            len([m for _, m in failing.all_attempts() if m["payload"] == "poison"])
            == RETRY_COUNT + 1
        )
    finally:
        failing.stop()
        healthy.stop()


def test_resubscribing_reactivates_with_the_kept_offset(nodes: list[NodeProcess]) -> None:
    _create(nodes[0], "flaky", partitions=1)
    broken = {"on": True}
    server = Subscriber(fail=lambda message: broken["on"] and message["payload"] == "b").start()
    try:
        subscription = _subscribe(nodes[0], server.address, ["flaky"], read_old=False)
        _publish(nodes[0], "flaky", ["a", "b", "c"])
        wait_until(
            lambda: call(nodes[0], "GET", f"/subscriptions/{subscription}")[1]["active"] is False
        )
        assert [m["payload"] for m in server.acked()] == ["a"]
        broken["on"] = False
        again = _subscribe(nodes[1], server.address, ["flaky"], read_old=False)
        assert again == subscription
        wait_until(lambda: [m["payload"] for m in server.acked()] == ["a", "b", "c"])
        status, state = call(nodes[2], "GET", f"/subscriptions/{subscription}")
        assert state["active"] is True
        wait_until(
            lambda: (
                call(nodes[2], "GET", f"/subscriptions/{subscription}")[1]["offsets"]
                == [{"topic": "flaky", "partition": 0, "committed": 3}]
            )
        )
        status, answer = call(
            nodes[0], "POST", "/unsubscribe", {"address": server.address, "topics": ["flaky"]}
        )
        assert status == 200 and answer["deleted"] == [subscription]
        assert call(nodes[0], "GET", f"/subscriptions/{subscription}")[0] == 404
    finally:
        server.stop()


def test_hanging_and_resetting_subscribers_block_nobody(nodes: list[NodeProcess]) -> None:
    _create(nodes[0], "shared", partitions=2)
    hanging = Subscriber(behaviour="hang").start()
    resetting = Subscriber(behaviour="reset").start()
    healthy = Subscriber().start()
    try:
        for server in (hanging, resetting, healthy):
            _subscribe(nodes[0], server.address, ["shared"], read_old=False)
        values = [f"s{i:02d}" for i in range(20)]
        _publish(nodes[1], "shared", values)
        # Every message reaches the healthy subscriber while the others are still failing
        # their first delivery of each partition.
        wait_until(lambda: sorted(m["payload"] for m in healthy.acked()) == values)
        _assert_in_order(healthy.acked())
        assert hanging.all_attempts() and resetting.all_attempts()
        assert not hanging.acked() and not resetting.acked()
        # Each failing subscriber is stuck at the first message of each partition, no further.
        for server in (hanging, resetting):
            offsets = {(m["partition"], m["offset"]) for _, m in server.all_attempts()}
            assert len(offsets) <= 2, offsets
    finally:
        for server in (hanging, resetting, healthy):
            server.stop()


def test_the_original_go_clients_requests(nodes: list[NodeProcess], subscriber: Subscriber) -> None:
    """The original Flux Go client, request for request: it subscribes at ``/subscrine`` (sic)
    with its address as ``host:port`` (no scheme), publishes ``{"id","message","topic"}``,
    receives pushes on ``<address>/poll``, and unsubscribes at ``/unsubscrine``."""
    _create(nodes[0], "go-client")
    schemeless = subscriber.address.removeprefix("http://")
    assert "://" not in schemeless
    status, answer = call(
        nodes[1], "POST", "/subscrine", {"address": schemeless, "topics": ["go-client"]}
    )
    assert status in (200, 201), answer
    subscription = answer["id"]
    # The same subscriber as with the scheme: re-subscribing that way finds this subscription.
    status, again = call(
        nodes[2], "POST", "/subscribe", {"address": subscriber.address, "topics": ["go-client"]}
    )
    assert again["id"] == subscription and again["created"] is False, again
    values = [f"go-{i}" for i in range(12)]
    _publish(nodes[2], "go-client", values)
    wait_until(lambda: len(subscriber.acked()) >= len(values))
    assert sorted(m["payload"] for m in subscriber.acked()) == sorted(values)
    status, answer = call(
        nodes[0], "POST", "/unsubscrine", {"address": schemeless, "topics": ["go-client"]}
    )
    assert status == 200 and answer["deleted"] == [subscription], answer
    status, answer = call(nodes[0], "POST", "/subscrine", {"address": "", "topics": ["x"]})
    assert status == 400 and answer["field"] == "address", answer
