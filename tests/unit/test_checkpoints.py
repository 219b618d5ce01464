"""CheckpointStore: namespaced ints and JSON in one LMDB environment."""

from __future__ import annotations

import pytest
from flux.storage import CheckpointStore, LogClosedError


@pytest.fixture
def store(tmp_path):
    store = CheckpointStore(tmp_path / "checkpoints")
    yield store
    store.close()


def test_put_get_round_trip(store):
    assert store.get("recovery-point", "orders-0") is None
    store.put_many("recovery-point", {"orders-0": 42, "orders-1": 0, "big": 2**62, "negative": -1})
    assert store.get("recovery-point", "orders-0") == 42
    assert store.get("recovery-point", "big") == 2**62
    assert store.get("recovery-point", "negative") == -1
    assert store.get_all("recovery-point") == {
        "orders-0": 42,
        "orders-1": 0,
        "big": 2**62,
        "negative": -1,
    }
    store.put("recovery-point", "orders-0", 43)
    assert store.get("recovery-point", "orders-0") == 43


def test_namespaces_are_separate(store):
    store.put_many("high-watermark", {"t-0": 5})
    store.put_many("high-watermark-2", {"t-0": 6})
    store.put_many("log-start", {"t-0": 1})
    assert store.get_all("high-watermark") == {"t-0": 5}
    assert store.get_all("high-watermark-2") == {"t-0": 6}
    assert store.get("log-start", "t-0") == 1
    assert store.get_all("missing") == {}


def test_json_values(store):
    cache = [[0, 0], [3, 120], [5, 300]]
    store.put_json("leader-epoch", "orders-0", cache)
    assert store.get_json("leader-epoch", "orders-0") == cache
    assert store.get_json("leader-epoch", "orders-1") is None
    assert store.get_all_json("leader-epoch") == {"orders-0": cache}
    assert store.get_all("leader-epoch") == {}  # ints and JSON do not mix


def test_delete(store):
    store.put_many("recovery-point", {"a": 1, "b": 2})
    store.put_json("recovery-point", "a", {"x": 1})
    store.delete("recovery-point", "a")
    store.delete("recovery-point", "never-written")
    assert store.get_all("recovery-point") == {"b": 2}
    assert store.get_json("recovery-point", "a") is None


def test_survives_reopen(tmp_path):
    store = CheckpointStore(tmp_path / "checkpoints")
    store.put_many("recovery-point", {"orders-0": 7, "orders-1": 9})
    store.put_json("leader-epoch", "orders-0", [[1, 0]])
    store.close()
    store = CheckpointStore(tmp_path / "checkpoints")
    assert store.get_all("recovery-point") == {"orders-0": 7, "orders-1": 9}
    assert store.get_json("leader-epoch", "orders-0") == [[1, 0]]
    store.close()


def test_put_many_is_one_transaction(store):
    begun = []
    env = store._env

    class CountingEnv:
        def begin(self, *args, **kwargs):
            begun.append(kwargs.get("write", False))
            return env.begin(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(env, name)

    store._env = CountingEnv()
    store.put_many("recovery-point", {f"topic-{i}": i for i in range(100)})
    assert begun == [True]
    store._env = env
    assert len(store.get_all("recovery-point")) == 100


def test_put_many_is_all_or_nothing(store):
    store.put_many("recovery-point", {"a": 1})
    with pytest.raises(TypeError):
        store.put_many("recovery-point", {"a": 2, "b": 3, "c": "not an int"})
    assert store.get_all("recovery-point") == {"a": 1}
    with pytest.raises(ValueError):
        store.put_many("recovery-point", {"a": 2, "x" * 1000: 3})
    assert store.get_all("recovery-point") == {"a": 1}


def test_invalid_namespace_and_closed_store(tmp_path):
    store = CheckpointStore(tmp_path / "checkpoints")
    with pytest.raises(ValueError):
        store.put_many("", {"a": 1})
    with pytest.raises(ValueError):
        store.get("bad\x00namespace", "a")
    store.close()
    store.close()
    with pytest.raises(LogClosedError):
        store.get("recovery-point", "a")
