"""flux.sdk.metadata: bootstrap parsing, version negotiation, the metadata cache and retries.
Pure: literal responses, a fake clock and a fixed random source."""

from __future__ import annotations

import uuid

import pytest
from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode
from flux.sdk.errors import (
    ConfigurationError,
    LeaderNotAvailableError,
    NotControllerError,
    UnknownTopicError,
    UnsupportedVersionError,
)
from flux.sdk.metadata import (
    BrokerInfo,
    ClusterMetadata,
    RetryBudget,
    RetryPolicy,
    negotiate_version,
    parse_bootstrap,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("a:1, b:2,[::1]:9092") == (("a", 1), ("b", 2), ("::1", 9092))
    for bad in ("", "host", "host:", "host:x", ":9092", "h:70000"):
        with pytest.raises(ConfigurationError):
            parse_bootstrap(bad)


def test_negotiate_picks_highest_common_version() -> None:
    # Client Produce 3-9, codec 3-9, broker 5-7 -> 7.
    assert negotiate_version(ApiKey.PRODUCE, {ApiKey.PRODUCE: (5, 7)}) == 7
    assert negotiate_version(ApiKey.METADATA, {ApiKey.METADATA: (0, 99)}) == 12


def test_negotiate_names_the_api_when_unsupported() -> None:
    with pytest.raises(UnsupportedVersionError, match=r"CreatePartitions \(API key 37\)"):
        negotiate_version(ApiKey.CREATE_PARTITIONS, {}, broker="broker 1")
    with pytest.raises(UnsupportedVersionError, match="versions 10-11"):
        negotiate_version(ApiKey.PRODUCE, {ApiKey.PRODUCE: (10, 11)})


def _partition(index: int, leader: int, epoch: int = 3) -> dict:
    return {
        "error_code": 0,
        "partition_index": index,
        "leader_id": leader,
        "leader_epoch": epoch,
        "replica_nodes": [1, 2],
        "isr_nodes": [1, 2],
        "offline_replicas": [],
    }


def _response(topics: list[dict], controller: int = 2) -> dict:
    return {
        "brokers": [
            {"node_id": 1, "host": "h1", "port": 9001, "rack": None},
            {"node_id": 2, "host": "h2", "port": 9002, "rack": "r2"},
        ],
        "cluster_id": "c",
        "controller_id": controller,
        "topics": topics,
    }


def _topic(name: str, partitions: list[dict], error: int = 0) -> dict:
    return {
        "error_code": error,
        "name": name,
        "topic_id": uuid.UUID(int=7),
        "is_internal": False,
        "partitions": partitions,
    }


def test_update_and_route() -> None:
    cache = ClusterMetadata(clock=FakeClock())
    assert cache.needs_refresh()
    cache.update(
        _response(
            [
                _topic("a", [_partition(1, 2), _partition(0, 1)]),
                _topic("gone", [], error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            ]
        ),
        requested=["a", "gone"],
    )
    assert not cache.needs_refresh("a") and not cache.needs_refresh("gone")
    assert cache.needs_refresh("never-asked")
    assert cache.leader_for("a", 0) == BrokerInfo(1, "h1", 9001, None)
    assert cache.leader_for("a", 1).address == ("h2", 9002)
    assert cache.partition_count("a") == 2
    assert cache.controller().node_id == 2
    assert cache.snapshot.cluster_id == "c"
    with pytest.raises(UnknownTopicError, match="'gone' does not exist"):
        cache.leader_for("gone", 0)
    with pytest.raises(UnknownTopicError, match="no partition 5"):
        cache.leader_for("a", 5)


def test_partial_update_keeps_other_topics_and_full_update_replaces() -> None:
    cache = ClusterMetadata(clock=FakeClock())
    cache.update(_response([_topic("a", [_partition(0, 1)])]), requested=["a"])
    cache.update(_response([_topic("b", [_partition(0, 2)])]), requested=["b"])
    assert set(cache.snapshot.topics) == {"a", "b"}
    cache.update(_response([_topic("b", [_partition(0, 2)])]), requested=None)
    assert set(cache.snapshot.topics) == {"b"}


def test_leaderless_partition_and_missing_controller_raise_retriable_errors() -> None:
    cache = ClusterMetadata(clock=FakeClock())
    cache.update(_response([_topic("a", [_partition(0, -1)])], controller=-1), requested=None)
    with pytest.raises(LeaderNotAvailableError) as caught:
        cache.leader_for("a", 0)
    assert caught.value.retriable
    with pytest.raises(NotControllerError):
        cache.controller()
    # describe still sees the raw leader id
    assert cache.snapshot.topics["a"].partitions[0].leader_id == -1


def test_metadata_ages_out() -> None:
    clock = FakeClock()
    cache = ClusterMetadata(max_age_s=10, clock=clock)
    cache.update(_response([]), requested=None)
    assert not cache.needs_refresh()
    clock.now += 11
    assert cache.needs_refresh()


def test_request_body() -> None:
    body = ClusterMetadata.request_body(["b", "a"], allow_auto_topic_creation=False)
    assert body["topics"] == [{"name": "a"}, {"name": "b"}]
    assert ClusterMetadata.request_body(None, allow_auto_topic_creation=True)["topics"] is None


def test_retry_budget_backs_off_exponentially_and_stops_at_attempt_limit() -> None:
    clock = FakeClock()
    policy = RetryPolicy(max_attempts=4, timeout_s=100, backoff_initial_s=0.1, backoff_max_s=0.3)
    budget = RetryBudget(policy, clock=clock, rng=lambda: 0.5)  # 0.5: no jitter
    assert budget.next_delay_s() == pytest.approx(0.1)
    assert budget.next_delay_s() == pytest.approx(0.2)
    assert budget.next_delay_s() == pytest.approx(0.3)  # capped
    assert budget.next_delay_s() is None  # 4 failed attempts


def test_retry_budget_stops_at_deadline_and_never_sleeps_past_it() -> None:
    clock = FakeClock()
    policy = RetryPolicy(timeout_s=1.0, backoff_initial_s=0.8, backoff_max_s=5)
    budget = RetryBudget(policy, clock=clock, rng=lambda: 0.5)
    assert budget.next_delay_s() == pytest.approx(0.8)
    clock.now += 0.9
    assert budget.next_delay_s() == pytest.approx(0.1)  # only what is left
    clock.now += 0.2
    assert budget.next_delay_s() is None


def test_unknown_topic_is_retried_only_briefly() -> None:
    clock = FakeClock()
    policy = RetryPolicy(timeout_s=30, unknown_topic_timeout_s=2, backoff_initial_s=0.1)
    budget = RetryBudget(policy, clock=clock, rng=lambda: 0.5)
    clock.now += 2.5
    assert budget.next_delay_s(unknown_topic=True) is None
    assert RetryBudget(policy, clock=clock).next_delay_s(unknown_topic=False) is not None


def test_retry_policy_validates() -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ConfigurationError):
        RetryPolicy(timeout_s=0)
