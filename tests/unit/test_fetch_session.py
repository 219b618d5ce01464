"""The leader's fetch session: incremental requests, answers with only what has news, wake-up
on append, lazy high watermarks, errors that drop a partition until it is named again, and an
idle follower that stays in the ISR while its session lives.

Real ``Partition`` objects with real disk logs on both sides; the session is driven directly
(no network): ``_follow`` applies an answer as the fetcher does and names what moved.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from flux.cluster.config import parse_config
from flux.cluster.replication.partition import Partition
from flux.cluster.replication.session import FetchSession
from flux.cluster.replication.wire import (
    FetchEntry,
    FetchRequest,
    PartitionData,
    ReplicationWireError,
    decode_fetch_request,
    encode_fetch_request,
)
from flux.cluster.topics import TopicConfig
from flux.controller.image import BrokerRegistration, FrozenMap, MetadataImage, PartitionState
from flux.protocol.errors import ErrorCode
from flux.protocol.records import build_batch
from flux.storage import LogConfig, PartitionLog
from flux.storage.leader_epochs import LeaderEpochCache
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_config import SECRET

LEADER, FOLLOWER = 1, 2
STATE = PartitionState((1, 2), (1, 2), LEADER, 0, 0)


def _partition(tmp_path: Path, broker_id: int, index: int) -> Partition:
    defaults = parse_config(SECRET, environ={})["topic"]
    return Partition(
        broker_id=broker_id,
        topic="t",
        topic_id="id-t",
        index=index,
        log=PartitionLog.open(tmp_path / f"broker-{broker_id}-{index}", LogConfig()),
        config=TopicConfig.from_defaults(defaults, {}, message_max_bytes=1 << 20),
        state=PartitionState((1, 2), (1, 2), -1, -1, -1),
        epochs=LeaderEpochCache(),
    )


class _Pair:
    """``count`` partitions led by broker 1 and followed by broker 2, and 2's session on 1."""

    def __init__(self, tmp_path: Path, count: int) -> None:
        self.leaders = {i: _partition(tmp_path, LEADER, i) for i in range(count)}
        self.followers = {i: _partition(tmp_path, FOLLOWER, i) for i in range(count)}
        for partition in self.leaders.values():
            partition.become_leader(STATE)
        for partition in self.followers.values():
            partition.become_follower(STATE)
        registration = BrokerRegistration(
            FOLLOWER, "inc-2", "127.0.0.1", 9092, "127.0.0.1", 8080, None, fenced=False
        )
        self.image = MetadataImage(1, brokers=FrozenMap({FOLLOWER: registration}))
        self.session = self.open("inc-2")

    def open(self, incarnation: str) -> FetchSession:
        return FetchSession(
            replica_id=FOLLOWER,
            incarnation_id=incarnation,
            broker_id=LEADER,
            lookup=lambda topic, index: self.leaders.get(index) if topic == "t" else None,
            image=lambda: self.image,
        )

    def entry(self, index: int) -> FetchEntry:
        follower = self.followers[index]
        return FetchEntry(
            "t",
            index,
            "id-t",
            follower.log_end_offset,
            follower.epochs.latest_epoch,
            follower.leader_epoch,
            1 << 20,
        )

    def request(self, named: list[int], wait_ms: int = 0) -> FetchRequest:
        return FetchRequest(wait_ms, 1 << 20, [self.entry(i) for i in named], [])

    def follow(self, answers: list[PartitionData]) -> list[int]:
        """Apply answers as the fetcher does; the partitions to name in the next request."""
        moved = []
        for answer in answers:
            self.followers[answer.partition].apply_fetch_answer(answer)
            if answer.records or answer.error_code or answer.diverging_epoch >= 0:
                moved.append(answer.partition)
        return moved

    def append(self, index: int, value: bytes = b"v") -> None:
        self.leaders[index].append_as_leader(build_batch([(None, value, ())]))


def _serve(session: FetchSession, request: FetchRequest) -> list[PartitionData]:
    return asyncio.run(session.serve(request))


def test_answers_carry_only_partitions_with_news(tmp_path: Path) -> None:
    pair = _Pair(tmp_path, 4)
    pair.append(1)
    pair.append(3)
    answers = _serve(pair.session, pair.request([0, 1, 2, 3]))
    assert sorted(a.partition for a in answers if a.records) == [1, 3]
    # A new session tells the follower every high watermark once, then only changes.
    assert sorted((a.partition, a.high_watermark) for a in answers if not a.records) == [
        (0, 0),
        (2, 0),
    ]
    moved = pair.follow(answers)
    # The follower names only what moved; its confirmation advances the high watermark.
    answers = _serve(pair.session, pair.request(moved))
    assert pair.leaders[1].high_watermark == pair.leaders[3].high_watermark == 1
    # The new high watermarks are lazy news: they ride on this answer (the wait expired).
    assert sorted((a.partition, a.high_watermark, a.records) for a in answers) == [
        (1, 1, b""),
        (3, 1, b""),
    ]
    pair.follow(answers)
    assert pair.followers[1].high_watermark == pair.followers[3].high_watermark == 1
    assert _serve(pair.session, pair.request([])) == []  # idle: nothing at all


def test_an_append_wakes_a_parked_request(tmp_path: Path) -> None:
    pair = _Pair(tmp_path, 2)

    async def scenario() -> tuple[list[PartitionData], float]:
        loop = asyncio.get_running_loop()
        await pair.session.serve(pair.request([0, 1]))
        started = loop.time()
        parked = asyncio.ensure_future(pair.session.serve(pair.request([], wait_ms=5_000)))
        await asyncio.sleep(0.05)
        assert not parked.done()
        pair.append(1, b"wake")
        answers = await asyncio.wait_for(parked, 1.0)
        return answers, loop.time() - started

    answers, waited = asyncio.run(scenario())
    assert [(a.partition, bool(a.records)) for a in answers] == [(1, True)]
    assert waited < 1.0


def test_a_newer_request_ends_a_parked_one(tmp_path: Path) -> None:
    pair = _Pair(tmp_path, 2)

    async def scenario() -> list[list[PartitionData]]:
        await pair.session.serve(pair.request([0]))
        parked = asyncio.ensure_future(pair.session.serve(pair.request([], wait_ms=5_000)))
        await asyncio.sleep(0.05)
        pair.session.push(pair.request([1]))  # the follower starts following partition 1
        first = await asyncio.wait_for(parked, 1.0)
        pair.append(1)
        second = await pair.session.serve(await pair.session.next_request())
        return [first, second]

    first, second = asyncio.run(scenario())
    assert first == []
    assert [(a.partition, bool(a.records)) for a in second] == [(1, True)]


def test_records_sent_are_not_sent_again_before_they_are_confirmed(tmp_path: Path) -> None:
    """A request sent before the follower applied an answer does not name that partition;
    the next append is sent from where the previous answer ended, not again from the start."""
    pair = _Pair(tmp_path, 1)
    _serve(pair.session, pair.request([0]))
    pair.append(0, b"first")
    sent = _serve(pair.session, pair.request([]))
    pair.append(0, b"second")
    again = _serve(pair.session, pair.request([]))  # built before applying `sent`
    pair.follow(sent)
    pair.follow(again)  # applies at the follower's log end: no duplicate, no gap
    assert pair.followers[0].log_end_offset == 2
    assert pair.followers[0].log.read(0, 1 << 20) == pair.leaders[0].log.read(0, 1 << 20)
    # Until the follower confirms, the leader has not counted those records as replicated.
    assert pair.leaders[0].high_watermark == 0
    _serve(pair.session, pair.request([0]))
    assert pair.leaders[0].high_watermark == 2


def test_errors_drop_a_partition_until_it_is_named_again(tmp_path: Path) -> None:
    pair = _Pair(tmp_path, 1)
    stale = FetchRequest(0, 1 << 20, [pair.entry(0)._replace(leader_epoch=5)], [])
    answers = _serve(pair.session, stale)
    assert [a.error_code for a in answers] == [ErrorCode.UNKNOWN_LEADER_EPOCH]
    pair.append(0)
    assert _serve(pair.session, pair.request([])) == []  # not in the session any more
    answers = _serve(pair.session, pair.request([0]))
    assert [(a.error_code, bool(a.records)) for a in answers] == [(ErrorCode.NONE, True)]


def test_a_stale_incarnation_gets_stale_broker_epoch(tmp_path: Path) -> None:
    pair = _Pair(tmp_path, 1)
    session = pair.open("an-older-incarnation")
    answers = _serve(session, pair.request([0]))
    assert [a.error_code for a in answers] == [ErrorCode.STALE_BROKER_EPOCH]
    assert session.positions == {}


def test_losing_leadership_is_urgent_news(tmp_path: Path) -> None:
    pair = _Pair(tmp_path, 1)
    _serve(pair.session, pair.request([0]))
    pair.leaders[0].become_follower(PartitionState((1, 2), (1, 2), FOLLOWER, 1, 1))
    answers = _serve(pair.session, pair.request([], wait_ms=5_000))
    assert [a.error_code for a in answers] == [ErrorCode.NOT_LEADER_OR_FOLLOWER]


def test_an_idle_follower_stays_in_the_isr_while_its_session_lives(tmp_path: Path) -> None:
    pair = _Pair(tmp_path, 1)
    leader = pair.leaders[0]
    now = [1_000_000]
    leader.clock_ms = lambda: now[0]
    leader.followers[FOLLOWER].last_caught_up_ms = now[0]
    _serve(pair.session, pair.request([0]))
    now[0] += 60_000  # a minute of idle requests that name nothing
    pair.session.last_fetch_ms = now[0]
    assert leader.lagging_followers(10_000) == []
    # Behind the leader's log end, the session's requests do not count as caught up.
    pair.append(0)
    now[0] += 11_000
    pair.session.last_fetch_ms = now[0]
    assert leader.lagging_followers(10_000) == [FOLLOWER]
    # A closed session keeps no one in the ISR.
    pair.follow(_serve(pair.session, pair.request([])))
    _serve(pair.session, pair.request([0]))
    pair.session.close()
    now[0] += 11_000
    assert leader.lagging_followers(10_000) == [FOLLOWER]


entries = st.builds(
    FetchEntry,
    topic=st.text(min_size=1, max_size=20),
    partition=st.integers(0, 2**31 - 1),
    topic_id=st.text(max_size=40).filter(lambda text: len(text.encode()) < 256),
    fetch_offset=st.integers(-1, 2**62),
    last_fetched_epoch=st.integers(-1, 2**31 - 1),
    leader_epoch=st.integers(-1, 2**31 - 1),
    partition_max_bytes=st.integers(0, 2**31 - 1),
)


@given(
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**31 - 1),
    st.lists(entries, max_size=5),
    st.lists(st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)), max_size=5),
)
def test_request_round_trip(wait: int, max_bytes: int, named: list, forgotten: list) -> None:
    request = FetchRequest(wait, max_bytes, named, forgotten)
    assert decode_fetch_request(encode_fetch_request(request)) == request


@given(st.binary(max_size=200))
def test_garbage_requests_raise_only_our_error(data: bytes) -> None:
    try:
        decode_fetch_request(data)
    except ReplicationWireError:
        pass


def test_truncated_request_is_rejected() -> None:
    body = encode_fetch_request(
        FetchRequest(10, 100, [FetchEntry("t", 0, "id", 0, -1, 0, 100)], [("u", 1)])
    )
    for broken in (body[:-1], body + b"x"):
        with pytest.raises(ReplicationWireError):
            decode_fetch_request(broken)
