"""Push subscriptions with an in-flight window (``maxInFlight``) on a real 3-node cluster:
several messages outstanding at once but never more than the window, first deliveries in
offset order per partition, one at a time by default, go-back-N redelivery after a nack or a
failed webhook request with the committed position never past the failed message, and the
validation of ``maxInFlight``."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiohttp import web
from flux.cluster.launcher import NodeProcess

from tests.integration.helpers import wait_until
from tests.integration.http_helpers import (
    SubscriberServer,
    call,
    create_everywhere,
    running_cluster,
)

pytestmark = pytest.mark.integration

RETRY_COUNT = 2
RETRY_INTERVAL_S = 0.4


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NodeProcess]]:
    subscriber = {
        "retry_count": RETRY_COUNT,
        "retry_interval": RETRY_INTERVAL_S,
        "timeout": 2,
        # Inactive subscriptions stay for the whole module (one test reactivates one).
        "inactive_time": 600,
        "cleanup_time": 1,
    }
    root = tmp_path_factory.mktemp("push-window")
    with running_cluster(root, 3, subscriber=subscriber, topic={"partitions": 1}) as processes:
        yield processes


class WindowSubscriber(SubscriberServer):
    """A WebSocket (``/ws``) and webhook (``/poll``) subscriber in a thread of the test that
    holds its answers back.

    WebSocket: answers once ``hold`` messages of the connection are unanswered, or after
    ``quiet_s`` without a new one, newest first when ``reverse``. Webhook: answers each request
    after ``delay_s``. ``fail(message, attempt)`` (attempt counts from 1 per message id) chooses a
    nack / a 500. Every arrival is recorded in order with the number of messages of its
    connection (WebSocket) or partition (webhook requests) unanswered at that moment."""

    def __init__(
        self,
        *,
        hold: int = 1,
        quiet_s: float = 0.05,
        reverse: bool = False,
        delay_s: float = 0.0,
        fail: Callable[[dict[str, Any], int], bool] = lambda message, attempt: False,
    ) -> None:
        self.hold, self.quiet_s, self.reverse, self.delay_s = hold, quiet_s, reverse, delay_s
        self.fail = fail
        self.port = 0
        self._lock = threading.Lock()
        self._arrivals: list[dict[str, Any]] = []  # each message with "_outstanding"
        self._answers: list[tuple[str, str]] = []  # (verdict, id) in the order sent
        self._attempts: dict[str, int] = defaultdict(int)
        self._webhook_outstanding: dict[int, int] = defaultdict(int)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._sockets: set[web.WebSocketResponse] = set()

    def arrivals(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._arrivals)

    def acked_payloads(self) -> set[str]:
        with self._lock:
            return {m["payload"] for m in self._arrivals if m["_verdict"] == "ack"}

    def _arrived(self, message: dict[str, Any], outstanding: int) -> str:
        with self._lock:
            self._attempts[message["id"]] += 1
            failed = self.fail(message, self._attempts[message["id"]])
            verdict = "nack" if failed else "ack"
            self._arrivals.append({**message, "_outstanding": outstanding, "_verdict": verdict})
        return verdict

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        self._sockets.add(socket)
        held: list[tuple[str, str]] = []  # (verdict, id), received and not yet answered
        try:
            while True:
                try:
                    frame = await socket.receive(timeout=self.quiet_s if held else None)
                except TimeoutError:
                    await self._answer(socket, held)
                    continue
                if frame.type != web.WSMsgType.TEXT:
                    break
                message = json.loads(frame.data)
                held.append((self._arrived(message, outstanding=len(held) + 1), message["id"]))
                if len(held) >= self.hold:
                    await self._answer(socket, held)
        finally:
            self._sockets.discard(socket)
        return socket

    async def _answer(self, socket: web.WebSocketResponse, held: list[tuple[str, str]]) -> None:
        for verdict, message_id in reversed(held) if self.reverse else list(held):
            await socket.send_json({verdict: message_id})
        held.clear()

    async def _poll(self, request: web.Request) -> web.Response:
        message = await request.json()
        partition = message["partition"]
        self._webhook_outstanding[partition] += 1
        try:
            verdict = self._arrived(message, outstanding=self._webhook_outstanding[partition])
            await asyncio.sleep(self.delay_s)
        finally:
            self._webhook_outstanding[partition] -= 1
        return web.json_response({"ok": True}, status=200 if verdict == "ack" else 500)


def _publish_batch(node: NodeProcess, topic: str, values: list[str]) -> None:
    status, answer = call(
        node, "POST", f"/topics/{topic}/messages", {"messages": [{"value": v} for v in values]}
    )
    assert status == 200, answer


def _subscribe(node: NodeProcess, address: str, topic: str, **fields: Any) -> dict[str, Any]:
    status, answer = call(
        node, "POST", "/subscribe", {"address": address, "topics": [topic], **fields}
    )
    assert status in (200, 201), answer
    return answer


def _committed(node: NodeProcess, subscription_id: str) -> dict[int, int]:
    status, document = call(node, "GET", f"/subscriptions/{subscription_id}")
    assert status == 200, document
    return {o["partition"]: o["committed"] for o in document["offsets"]}


def _first_deliveries(arrivals: list[dict[str, Any]]) -> dict[int, list[int]]:
    """Per partition, the offsets in the order they first arrived."""
    seen: set[tuple[int, int]] = set()
    first: dict[int, list[int]] = defaultdict(list)
    for message in arrivals:
        key = (message["partition"], message["offset"])
        if key not in seen:
            seen.add(key)
            first[message["partition"]].append(message["offset"])
    return first


def _delete(node: NodeProcess, subscription_id: str) -> None:
    status, answer = call(node, "DELETE", f"/subscriptions/{subscription_id}")
    assert status == 200, answer


def test_websocket_window_keeps_several_messages_outstanding_in_order(
    nodes: list[NodeProcess],
) -> None:
    window = 10
    create_everywhere(nodes, "window-ws", partitions=2)
    values = [f"w-{i:03d}" for i in range(120)]
    _publish_batch(nodes[0], "window-ws", values)
    # The subscriber would hold more than the window: it answers what it has once nothing new
    # came for quiet_s, newest first (out of order).
    subscriber = WindowSubscriber(hold=window + 5, reverse=True).start()
    try:
        answer = _subscribe(
            nodes[1], subscriber.ws_address, "window-ws", readOld=True, maxInFlight=window
        )
        assert answer["maxInFlight"] == window
        wait_until(lambda: subscriber.acked_payloads() >= set(values))
        arrivals = subscriber.arrivals()
        # (c) every message, each exactly once (nothing failed, so nothing came again).
        assert sorted(m["payload"] for m in arrivals) == values
        # (b) per partition, in offset order.
        for partition, offsets in _first_deliveries(arrivals).items():
            assert offsets == sorted(offsets), (partition, offsets)
        # (a) several outstanding at once, never more than the window, on every partition:
        # the leader fills the window and then waits.
        for partition in (0, 1):
            outstanding = [m["_outstanding"] for m in arrivals if m["partition"] == partition]
            assert max(outstanding) == window, (partition, outstanding)
        ends = {p: 1 + max(m["offset"] for m in arrivals if m["partition"] == p) for p in (0, 1)}
        wait_until(lambda: _committed(nodes[2], answer["id"]) == ends)
    finally:
        subscriber.stop()
    _delete(nodes[0], answer["id"])


def test_default_window_is_one_message_at_a_time_until_widened(nodes: list[NodeProcess]) -> None:
    create_everywhere(nodes, "window-default", partitions=2)
    values = [f"d-{i:02d}" for i in range(12)]
    _publish_batch(nodes[0], "window-default", values)
    # It would hold 5 unanswered messages if it got them; one at a time, each waits quiet_s.
    subscriber = WindowSubscriber(hold=5, quiet_s=0.05).start()
    try:
        answer = _subscribe(nodes[0], subscriber.ws_address, "window-default", readOld=True)
        assert answer["maxInFlight"] == 1
        wait_until(lambda: subscriber.acked_payloads() >= set(values))
        arrivals = subscriber.arrivals()
        assert sorted(m["payload"] for m in arrivals) == values
        assert {m["_outstanding"] for m in arrivals} == {1}
        for offsets in _first_deliveries(arrivals).values():
            assert offsets == sorted(offsets)
        listed = call(nodes[2], "GET", "/subscriptions")[1]["subscriptions"]
        assert [s["maxInFlight"] for s in listed if s["id"] == answer["id"]] == [1]

        # Subscribing again with a window widens the running deliveries (no restart needed:
        # nothing is delivered twice).
        again = _subscribe(nodes[1], subscriber.ws_address, "window-default", maxInFlight=3)
        assert (again["id"], again["created"], again["maxInFlight"]) == (answer["id"], False, 3)
        for node in nodes:  # the partition leaders' images have it
            wait_until(
                lambda node=node: (
                    call(node, "GET", f"/subscriptions/{answer['id']}")[1]["maxInFlight"] == 3
                )
            )
        later = [f"d-later-{i:02d}" for i in range(12)]
        _publish_batch(nodes[0], "window-default", later)
        wait_until(lambda: subscriber.acked_payloads() >= set(values + later))
        widened = subscriber.arrivals()[len(arrivals) :]
        assert sorted(m["payload"] for m in widened) == later
        assert max(m["_outstanding"] for m in widened) == 3
    finally:
        subscriber.stop()
    _delete(nodes[0], answer["id"])


def test_nack_in_a_window_is_redelivered_and_the_position_never_passes_it(
    nodes: list[NodeProcess],
) -> None:
    create_everywhere(nodes, "window-nack", partitions=1)
    values = [f"n-{i:02d}" for i in range(30)]
    _publish_batch(nodes[0], "window-nack", values)
    broken = {"on": True}
    subscriber = WindowSubscriber(
        fail=lambda message, attempt: broken["on"] and message["payload"] == "n-05"
    ).start()
    try:
        answer = _subscribe(
            nodes[1], subscriber.ws_address, "window-nack", readOld=True, maxInFlight=10
        )
        subscription = answer["id"]

        def inactive_with_position_held() -> bool:
            committed = _committed(nodes[2], subscription).get(0, 0)
            assert committed <= 5, committed  # n-05 was never acknowledged
            return call(nodes[2], "GET", f"/subscriptions/{subscription}")[1]["active"] is False

        # The first attempt and retry_count retries of n-05 fail: the subscription stops.
        wait_until(inactive_with_position_held)
        wait_until(lambda: _committed(nodes[2], subscription) == {0: 5})
        arrivals = subscriber.arrivals()
        offsets = [m["offset"] for m in arrivals]
        assert offsets.count(5) == RETRY_COUNT + 1
        # Messages after n-05 were out (and acknowledged) before its first retry...
        first_retry = offsets.index(5, offsets.index(5) + 1)
        assert {6, 7, 8, 9} <= set(offsets[:first_retry])
        # ...and every redelivery goes back exactly to n-05, then on in order (go-back-N).
        rewinds = [
            later for earlier, later in zip(offsets, offsets[1:], strict=False) if later <= earlier
        ]
        assert rewinds == [5] * RETRY_COUNT, offsets
        assert _first_deliveries(arrivals)[0] == sorted(set(offsets))

        # Subscribing again reactivates it where it stopped: from n-05, in order, to the end.
        broken["on"] = False
        seen_before = len(arrivals)
        again = _subscribe(
            nodes[0], subscriber.ws_address, "window-nack", readOld=True, maxInFlight=10
        )
        assert (again["id"], again["reactivated"]) == (subscription, True)
        wait_until(lambda: subscriber.acked_payloads() >= set(values))
        resumed = [m["offset"] for m in subscriber.arrivals()[seen_before:]]
        assert resumed[0] == 5 and resumed == sorted(resumed), resumed
        wait_until(lambda: _committed(nodes[2], subscription) == {0: len(values)})
    finally:
        subscriber.stop()
    _delete(nodes[0], subscription)


def test_failed_webhook_request_in_a_window_is_redelivered(nodes: list[NodeProcess]) -> None:
    window = 5
    create_everywhere(nodes, "window-webhook", partitions=1)
    values = [f"h-{i:02d}" for i in range(40)]
    _publish_batch(nodes[0], "window-webhook", values)
    # Each request is answered after 20 ms, so a window's requests overlap; h-12 fails once.
    subscriber = WindowSubscriber(
        delay_s=0.02, fail=lambda message, attempt: message["payload"] == "h-12" and attempt == 1
    ).start()
    try:
        answer = _subscribe(
            nodes[2], subscriber.address, "window-webhook", readOld=True, **{"max.in.flight": 5}
        )
        assert answer["maxInFlight"] == window
        wait_until(lambda: subscriber.acked_payloads() >= set(values))
        arrivals = subscriber.arrivals()
        assert 1 < max(m["_outstanding"] for m in arrivals) <= window
        offsets = [m["offset"] for m in arrivals]
        assert offsets.count(12) == 2
        # The retry starts once every request of the failed round is answered, so the first
        # repeat begins it: from h-12 on everything came again, nothing before h-12 did.
        retry = next(i for i, offset in enumerate(offsets) if offset in offsets[:i])
        assert len(set(offsets[:retry])) == retry
        assert min(offsets[retry:]) == 12
        assert set(offsets[retry:]) == set(range(12, len(values)))
        wait_until(lambda: _committed(nodes[0], answer["id"]) == {0: len(values)})
        status, document = call(nodes[0], "GET", f"/subscriptions/{answer['id']}")
        assert document["active"] is True
    finally:
        subscriber.stop()
    _delete(nodes[0], answer["id"])


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"maxInFlight": 0}, "maxInFlight"),
        ({"maxInFlight": -3}, "maxInFlight"),
        ({"maxInFlight": 1001}, "maxInFlight"),
        ({"maxInFlight": "10"}, "maxInFlight"),
        ({"maxInFlight": 2.5}, "maxInFlight"),
        ({"maxInFlight": True}, "maxInFlight"),
        ({"maxInFlight": None}, "maxInFlight"),
        ({"max.in.flight": 0}, "max.in.flight"),
        ({"max.in.flight": "many"}, "max.in.flight"),
    ],
)
def test_bad_max_in_flight_is_refused(
    nodes: list[NodeProcess], fields: dict[str, Any], field: str
) -> None:
    address = f"http://127.0.0.1:1/bad-window-{time.monotonic_ns()}"
    status, answer = call(
        nodes[0], "POST", "/subscribe", {"address": address, "topics": ["window-bad"], **fields}
    )
    assert status == 400, answer
    assert answer["field"] == field and field in answer["error"], answer
    listed = call(nodes[0], "GET", "/subscriptions")[1]["subscriptions"]
    assert all(s["address"] != address for s in listed)


def test_window_is_listed_and_changed_by_subscribing_again(nodes: list[NodeProcess]) -> None:
    create_everywhere(nodes, "window-listed", partitions=1)
    address = "http://127.0.0.1:1/never-called"  # no message is published to the topic

    def listed_windows() -> list[int]:
        subscriptions = call(nodes[2], "GET", "/subscriptions")[1]["subscriptions"]
        return [s["maxInFlight"] for s in subscriptions if s["address"] == address]

    created = _subscribe(nodes[0], address, "window-listed", **{"max.in.flight": 7})
    assert (created["created"], created["maxInFlight"]) == (True, 7)
    wait_until(lambda: listed_windows() == [7])
    changed = _subscribe(nodes[1], address, "window-listed", maxInFlight=1000)
    assert (changed["id"], changed["created"], changed["maxInFlight"]) == (
        created["id"],
        False,
        1000,
    )
    wait_until(lambda: listed_windows() == [1000])
    assert call(nodes[1], "GET", f"/subscriptions/{created['id']}")[1]["maxInFlight"] == 1000
    _delete(nodes[0], created["id"])
