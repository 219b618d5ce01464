"""The reassignment throttle: a one-second token bucket, its rate from the dynamic broker
configs, and a leader's fetch session that caps only replicas a reassignment is adding."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from flux.cluster.replication.session import FetchSession
from flux.cluster.replication.throttle import ReplicationThrottle, rate_from_configs
from flux.controller.handlers import alter_configs
from flux.controller.image import FrozenMap, MetadataImage
from flux.protocol.errors import ErrorCode
from flux.protocol.records import build_batch

from tests.unit.test_fetch_session import FOLLOWER, LEADER, STATE, _Pair


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_bucket_refills_at_the_rate_and_holds_one_second() -> None:
    clock = _Clock()
    bucket = ReplicationThrottle(1000, clock=clock)
    assert bucket.available() == 0
    clock.now += 0.5
    assert bucket.available() == 500
    clock.now += 10
    assert bucket.available() == 1000  # one second deep
    bucket.consume(1500)  # a whole batch may overdraw
    assert bucket.available() == -500
    assert abs(bucket.wait_s() - 0.501) < 1e-6
    bucket.set_rate(None)
    assert bucket.available() is None and bucket.wait_s() == 0.0


def test_the_rate_comes_from_the_brokers_own_config_then_the_default() -> None:
    configs = FrozenMap(
        {
            "": (("leader.replication.throttled.rate", "5000"),),
            "2": (("leader.replication.throttled.rate", "800"),),
            "3": (("follower.replication.throttled.rate", "300"),),
        }
    )
    assert rate_from_configs(configs, 1) == 5000
    assert rate_from_configs(configs, 2) == 800
    assert rate_from_configs(configs, 3) == 300  # the lower of leader (default) and follower
    assert rate_from_configs(FrozenMap(), 1) is None


def test_the_controller_refuses_a_rate_that_is_not_a_positive_number() -> None:
    image = MetadataImage(1)
    for bad in ("fast", "-1", "0", "1.5"):
        result = alter_configs(
            image,
            resource_type="broker",
            resource_name="",
            changes={"leader.replication.throttled.rate": bad},
        )
        assert result.response["error_code"] == ErrorCode.INVALID_CONFIG, bad
        assert "bytes per second" in result.response["error_message"]
    ok = alter_configs(
        image,
        resource_type="broker",
        resource_name="",
        changes={"leader.replication.throttled.rate": "1048576"},
    )
    assert ok.response["error_code"] == ErrorCode.NONE and ok.records


def _throttled_session(pair: _Pair, throttle: ReplicationThrottle) -> FetchSession:
    """The leader's side of ``pair``'s fetch session, its sends charged to ``throttle``."""
    return FetchSession(
        replica_id=FOLLOWER,
        incarnation_id="inc-2",
        broker_id=LEADER,
        lookup=lambda topic, index: pair.leaders.get(index) if topic == "t" else None,
        image=lambda: pair.image,
        throttle=throttle,
    )


def test_only_a_replica_being_added_is_throttled(tmp_path: Path) -> None:
    """Partition 0 is being reassigned onto the follower (it is in ``adding``), partition 1
    is an ordinary in-sync follower: with an empty bucket only partition 1 is answered; once
    the bucket refills, partition 0 gets what it holds and the bucket is charged for it."""
    pair = _Pair(tmp_path, 2)
    moving = dataclasses.replace(STATE, adding=(FOLLOWER,))
    pair.leaders[0].become_leader(moving)
    for index in (0, 1):
        for _ in range(5):
            pair.leaders[index].append_as_leader(build_batch([(None, b"x" * 1000, ())]))
    clock = _Clock()
    throttle = ReplicationThrottle(4000, clock=clock)
    session = _throttled_session(pair, throttle)

    async def scenario() -> tuple[list, list]:
        first = await session.serve(pair.request([0, 1]))
        clock.now += 1.0  # a full second of tokens
        await asyncio.sleep(0.05)  # the deferred partition's timer marks it urgent again
        second = await session.serve(pair.request([]))
        return first, second

    first, second = asyncio.run(scenario())
    assert [answer.partition for answer in first if answer.records] == [1]
    assert len(first[0].records) > 5000  # the in-sync follower: everything, unthrottled
    sent = [answer for answer in second if answer.partition == 0 and answer.records]
    assert sent, "partition 0 is served once the bucket refills"
    assert len(sent[0].records) <= 4000 + 1200  # capped by the bucket (plus one batch)
    assert throttle.throttled_bytes == len(sent[0].records)


def test_a_position_confirmed_while_the_bucket_is_empty_is_recorded(tmp_path: Path) -> None:
    """The follower names the partition with its new log end while the bucket is empty: no
    data goes out, but the leader records the position (the ISR, which ends the reassignment,
    goes by it; a lost confirmation left a caught-up replica out of the ISR for good)."""
    pair = _Pair(tmp_path, 1)
    moving = dataclasses.replace(STATE, adding=(FOLLOWER,))
    pair.leaders[0].become_leader(moving)
    for _ in range(4):
        pair.leaders[0].append_as_leader(build_batch([(None, b"y" * 1000, ())]))
    clock = _Clock()
    throttle = ReplicationThrottle(1_000_000, clock=clock)
    session = _throttled_session(pair, throttle)

    async def scenario() -> list:
        clock.now += 1.0
        first = await session.serve(pair.request([0]))  # a full bucket: every batch
        pair.follow(first)
        throttle.consume(throttle.available() or 0)  # now empty
        pair.leaders[0].append_as_leader(build_batch([(None, b"z", ())]))
        return await session.serve(pair.request([0]))  # confirms the first answer's end

    second = asyncio.run(scenario())
    assert not any(answer.records for answer in second)
    follower = pair.leaders[0].followers[FOLLOWER]
    assert follower.log_end_offset == pair.followers[0].log_end_offset == 4


def test_fluxctl_reads_rates_in_bytes_per_second() -> None:
    import click
    import pytest
    from flux.cli.reassign import parse_rate

    assert parse_rate("52428800") == 52_428_800
    assert parse_rate("50MB") == 50_000_000
    assert parse_rate("500kb/s") == 500_000
    assert parse_rate("1MiB") == 1 << 20
    assert parse_rate("1.5GB") == 1_500_000_000
    for bad in ("fast", "10 parsecs", "0", "-5MB", "MB"):
        with pytest.raises(click.BadParameter):
            parse_rate(bad)
