"""The follower's side of a fetch session (``_LeaderLink._session``), driven over a stand-in
for its WebSocket: a partition to follow that appears while a request is parked is named in a
second request at once (not after the parked one's answer), answers are applied and confirmed,
and a closed connection or a leader that never answers ends the session with the error the
link's reconnect loop expects.

Real ``ReplicaManager`` and ``ReplicaFetcherManager`` on a temporary directory; only the
socket is replaced (the leader's side is ``test_fetch_session``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from flux.cluster.replication import fetcher as fetcher_module
from flux.cluster.replication.fetcher import ReplicaFetcherManager
from flux.cluster.replication.replica_manager import ReplicaManager
from flux.cluster.replication.wire import (
    FetchRequest,
    PartitionData,
    decode_fetch_request,
    encode_fetch_response,
)
from flux.controller.image import MetadataImage
from flux.controller.records import CreateTopic, PartitionSpec, RegisterBroker, UnfenceBroker
from flux.protocol.errors import ErrorCode
from flux.protocol.records import build_batch

from tests.unit.test_config import node_config

BROKER, LEADER = 1, 2
ADDRESS = ("127.0.0.1", 18082)
SPEC = PartitionSpec(replicas=(LEADER, BROKER), isr=(LEADER, BROKER), leader=LEADER)


class _Socket:
    """Stands in for the ``aiohttp.ClientWebSocketResponse`` of a session: records what the
    follower sends, hands it what the test feeds."""

    def __init__(self) -> None:
        self.sent: list[FetchRequest] = []
        self._sent_event = asyncio.Event()
        self._incoming: asyncio.Queue[aiohttp.WSMessage] = asyncio.Queue()

    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(decode_fetch_request(data))
        self._sent_event.set()

    async def receive(self) -> aiohttp.WSMessage:
        return await self._incoming.get()

    def answer(self, answers: list[PartitionData]) -> None:
        data = b"".join(encode_fetch_response(answers))
        self._incoming.put_nowait(aiohttp.WSMessage(aiohttp.WSMsgType.BINARY, data, None))

    def close(self) -> None:
        self._incoming.put_nowait(aiohttp.WSMessage(aiohttp.WSMsgType.CLOSE, 1001, ""))

    async def request_or_end(self, count: int, session: asyncio.Task[bool]) -> bool:
        """Wait until ``count`` requests were sent (True) or the session ended (False)."""
        while len(self.sent) < count and not session.done():
            self._sent_event.clear()
            sent = asyncio.ensure_future(self._sent_event.wait())
            await asyncio.wait({sent, session}, return_when=asyncio.FIRST_COMPLETED)
            sent.cancel()
        return len(self.sent) >= count


def _image(version: int, *topics: str) -> MetadataImage:
    records: list[object] = [
        RegisterBroker(LEADER, "inc-2", "127.0.0.1", 19092, *ADDRESS),
        UnfenceBroker(LEADER, "inc-2"),
    ]
    records += [
        CreateTopic(name=name, topic_id=f"{name}-id", partitions=(SPEC,), config=())
        for name in topics
    ]
    return MetadataImage.EMPTY.replay_all(records, version)


def _named(request: FetchRequest) -> list[tuple[str, int, int]]:
    return sorted((e.topic, e.partition, e.fetch_offset) for e in request.entries)


async def _started(tmp_path: Path, *topics: str):  # noqa: ANN202 - (manager, fetchers, link)
    config = node_config(BROKER, tmp_path)
    manager = ReplicaManager(config)
    fetchers = ReplicaFetcherManager(manager, broker_id=BROKER, incarnation_id="inc-1")
    manager.apply_image(_image(1, *topics))
    link = fetchers._links[LEADER]
    # The link's own task would connect to ADDRESS; this test runs its session by hand.
    assert link.task is not None
    link.task.cancel()
    return manager, fetchers, link


async def _stopped(manager: ReplicaManager, fetchers: ReplicaFetcherManager) -> None:
    await fetchers.stop()
    await manager.close()


def test_a_partition_to_follow_is_named_while_a_request_is_parked(tmp_path: Path) -> None:
    async def scenario() -> None:
        manager, fetchers, link = await _started(tmp_path, "a")
        socket = _Socket()
        session = asyncio.create_task(link._session(socket, ADDRESS))  # type: ignore[arg-type]
        assert await socket.request_or_end(1, session)
        assert _named(socket.sent[0]) == [("a", 0, 0)]
        # The leader parks that request (no answer). A new partition from the same leader:
        manager.apply_image(_image(2, "a", "b"))
        # Named at once in a second request; without the wake-up the session would sit until
        # the parked request's deadline and end with a timeout.
        assert await socket.request_or_end(2, session), f"session ended: {session!r}"
        assert _named(socket.sent[1]) == [("b", 0, 0)]
        assert not socket.sent[1].forgotten
        # Two requests in flight: nothing more is sent until an answer comes.
        assert len(socket.sent) == 2
        # The answer to the first carries a batch: applied, then its position confirmed.
        socket.answer(
            [
                PartitionData(
                    "a", 0, ErrorCode.NONE, high_watermark=0, log_start_offset=0,
                    leader_epoch=0, records=build_batch([(None, b"x", ())]),
                )
            ]
        )  # fmt: skip
        assert await socket.request_or_end(3, session)
        assert _named(socket.sent[2]) == [("a", 0, 1)]
        assert manager.partition("a", 0).log_end_offset == 1  # type: ignore[union-attr]
        # The leader stops following "a" here (it leaves the image): forgotten in the next.
        socket.answer([])
        manager.apply_image(_image(3, "b"))
        assert await socket.request_or_end(4, session)
        assert ("a", 0) in [tuple(key) for key in socket.sent[3].forgotten]
        socket.close()
        with pytest.raises(fetcher_module._LeaderClosedError):
            await session
        await _stopped(manager, fetchers)

    asyncio.run(scenario())


def test_a_leader_that_never_answers_ends_the_session_with_a_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The deadline of a request is its wait plus this margin; shortened so the test is quick.
    monkeypatch.setattr(fetcher_module, "FETCH_MAX_WAIT_MS", 50)
    monkeypatch.setattr(fetcher_module, "FETCH_TIMEOUT_MARGIN_S", 0.05)

    async def scenario() -> None:
        manager, fetchers, link = await _started(tmp_path, "a")
        socket = _Socket()
        session = asyncio.create_task(link._session(socket, ADDRESS))  # type: ignore[arg-type]
        with pytest.raises(TimeoutError, match=f"broker {LEADER} did not answer"):
            await session
        assert len(socket.sent) == 1
        await _stopped(manager, fetchers)

    asyncio.run(scenario())
