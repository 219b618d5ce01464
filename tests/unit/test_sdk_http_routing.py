"""flux.sdk.http's routing: the partition it computes is the one a broker places the message
on, and ``ClusterView`` reads ``GET /cluster`` answers (and refuses what is not one)."""

from __future__ import annotations

import pytest
from flux.cluster.http.common import HttpApiBase, _record_from_json
from flux.sdk.errors import ConfigurationError
from flux.sdk.http import AsyncHttpPublisher, ClusterView, partition_of
from hypothesis import given
from hypothesis import strategies as st

_TEXT = st.text(min_size=1, max_size=40)


def _brokers_choice(count: int, body: dict[str, str]) -> int:
    """The partition a broker's ``POST /publish`` picks for ``body`` (its own code path: the
    JSON message read as the front door reads it, then its partition choice)."""
    key, _, headers, requested = _record_from_json(body, value_field="message", max_bytes=1 << 20)
    return HttpApiBase._choose_partition(None, count, key, headers, requested)  # type: ignore[arg-type]


@given(message_id=_TEXT, count=st.integers(min_value=1, max_value=10_000))
def test_an_id_goes_where_the_broker_puts_it(message_id: str, count: int) -> None:
    body = {"message": "m", "id": message_id}
    assert partition_of(count, key=None, message_id=message_id) == _brokers_choice(count, body)


@given(key=_TEXT, message_id=st.none() | _TEXT, count=st.integers(min_value=1, max_value=500))
def test_a_key_wins_over_an_id_as_at_the_broker(
    key: str, message_id: str | None, count: int
) -> None:
    body = {"message": "m", "key": key, **({"id": message_id} if message_id else {})}
    assert partition_of(count, key=key, message_id=message_id) == _brokers_choice(count, body)


def test_neither_key_nor_id_leaves_the_choice_to_the_caller() -> None:
    assert partition_of(3, key=None, message_id=None) is None


_ANSWER = {
    "broker_id": 1,
    "brokers": [
        {"id": 1, "kafka": "127.0.0.1:9092", "http": "127.0.0.1:9292", "fenced": False},
        {"id": 2, "kafka": "127.0.0.1:9093", "http": "127.0.0.1:9293", "fenced": False},
    ],
    "topics": [
        {
            "name": "orders",
            "partitions": [  # out of order on purpose: the view sorts by partition
                {"partition": 1, "leader": 1, "isr": [1], "replicas": [1, 2]},
                {"partition": 0, "leader": 2, "isr": [2], "replicas": [2, 1]},
                {"partition": 2, "leader": -1, "isr": [], "replicas": [3]},
            ],
        }
    ],
}


def test_the_view_names_each_partitions_leader() -> None:
    view = ClusterView.from_answer(_ANSWER)
    assert view.partition_count("orders") == 3
    assert view.leader_address("orders", 0) == "127.0.0.1:9293"
    assert view.leader_address("orders", 1) == "127.0.0.1:9292"
    assert view.leader_address("orders", 2) is None  # no leader now
    assert view.leader_address("orders", 3) is None
    assert view.partition_count("unknown") is None
    assert view.leader_address("unknown", 0) is None
    assert view.available["orders"] == (0, 1)  # where messages without key or id go


def test_without_any_leader_every_partition_is_a_candidate() -> None:
    answer = {
        "brokers": [{"id": 1, "http": "127.0.0.1:9292"}],
        "topics": [{"name": "t", "partitions": [{"partition": p, "leader": -1} for p in range(3)]}],
    }
    assert ClusterView.from_answer(answer).available["t"] == (0, 1, 2)


@pytest.mark.parametrize(
    "answer",
    [None, {}, {"brokers": []}, {"brokers": [{"id": "x", "http": "h"}], "topics": []}, "text"],
)
def test_what_is_not_a_cluster_answer_is_refused(answer: object) -> None:
    with pytest.raises(ValueError, match="not a GET /cluster answer"):
        ClusterView.from_answer(answer)


@pytest.mark.parametrize(
    ("bootstrap", "names"),
    [
        ([], "no broker"),
        ("127.0.0.1:9292", "not http://host:port"),
        ("ftp://127.0.0.1:9292", "not http://host:port"),
        (["http://a:1", "https://b:2"], "mix http and https"),
    ],
)
def test_a_bad_bootstrap_is_a_configuration_error(bootstrap: object, names: str) -> None:
    with pytest.raises(ConfigurationError, match=names):
        AsyncHttpPublisher(bootstrap)  # type: ignore[arg-type]
