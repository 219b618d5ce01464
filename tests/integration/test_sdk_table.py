"""flux.sdk table views (``AsyncTableView`` / ``TableView``) against real node processes.

* ``start`` returns with the latest value of every key over several partitions — tombstoned
  keys gone, keyless records ignored — with no waiting after it.
* ``on_change`` reports old and new values of changes made after start (and, by default, of
  the load too); deserializers shape keys and values.
* Records produced after start appear; ``wait_caught_up`` reads your writes, also in
  partitions added later, which a periodic metadata refresh picks up on its own as well.
* ``close`` stops the reader (even one stuck in a callback) and leaves no task or thread; a
  failing callback stops the view with ``TableViewError``; an unknown topic is named.
* A partition whose leader is killed is followed to its new leader (3 nodes).
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from flux.sdk import (
    Admin,
    AsyncProducer,
    AsyncTableView,
    ConfigurationError,
    Message,
    Producer,
    TableView,
    TableViewError,
    UnknownTopicError,
)

from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration

WAIT_S = 15.0


def _create(bootstrap: str, topic: str, partitions: int, **options: object) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, partitions=partitions, **options)  # type: ignore[arg-type]


def _view_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "flux-table-view" and t.is_alive()]


def test_start_returns_with_the_latest_value_of_every_key(broker) -> None:
    bootstrap = broker.bootstrap_servers
    _create(bootstrap, "profiles", 4)
    with Producer(bootstrap, linger_ms=1) as producer:
        delivered = []
        for version in range(10):
            delivered += producer.send(
                "profiles", [Message(f"user-{k}-v{version}", key=f"user-{k}") for k in range(60)]
            )
        tombstones = [Message(None, key=f"user-{k}") for k in range(0, 60, 5)]
        producer.send("profiles", tombstones)
        producer.send("profiles", [Message(b"keyless", partition=p) for p in range(4)])
    assert {m.partition for m in delivered} == {0, 1, 2, 3}  # the keys span every partition
    expected = {f"user-{k}".encode(): f"user-{k}-v9".encode() for k in range(60) if k % 5}

    with TableView(bootstrap, "profiles") as view:
        # No waiting: start() returned only once every existing record was applied.
        assert view.snapshot() == expected
        assert len(view) == 48
        assert view.get(b"user-1") == b"user-1-v9" and b"user-1" in view
        assert view.get(b"user-5") is None and b"user-5" not in view  # tombstoned
        assert view.get(b"user-5", b"gone") == b"gone"
        assert dict(view) == expected  # iteration yields (key, value) items
    assert not _view_threads()


def test_on_change_reports_changes_made_after_start(broker) -> None:
    bootstrap = broker.bootstrap_servers
    _create(bootstrap, "accounts", 1)  # one partition: changes come in one order
    with Producer(bootstrap) as producer:
        producer.send("accounts", [Message(v, key=k) for k, v in [("a", "10"), ("b", "20")]])
        producer.send("accounts", [Message(b"30", key="c")])

    async def scenario() -> None:
        changes: list[tuple[object, object, object]] = []
        async with AsyncTableView(
            bootstrap,
            "accounts",
            on_change=lambda *change: changes.append(change),
            on_change_during_load=False,
        ) as view:
            assert view.snapshot() == {b"a": b"10", b"b": b"20", b"c": b"30"}
            assert changes == []  # the load is left out with on_change_during_load=False
            async with AsyncProducer(bootstrap) as producer:
                await producer.send(
                    "accounts",
                    [
                        Message(b"11", key="a"),  # update
                        Message(None, key="b"),  # delete
                        Message(b"30", key="c"),  # the same value: no change
                        Message(b"40", key="d"),  # new key
                        Message(None, key="never"),  # delete of an absent key: no change
                        Message(b"keyless"),  # ignored
                    ],
                )
            await view.wait_caught_up(timeout_s=WAIT_S)
            assert changes == [
                (b"a", b"10", b"11"),
                (b"b", b"20", None),
                (b"d", None, b"40"),
            ]
            assert view.snapshot() == {b"a": b"11", b"c": b"30", b"d": b"40"}

    asyncio.run(scenario())


def test_on_change_sees_the_load_by_default_and_deserializers_apply(broker) -> None:
    bootstrap = broker.bootstrap_servers
    _create(bootstrap, "counters", 1)
    with Producer(bootstrap) as producer:
        producer.send(
            "counters",
            [
                Message(b"1", key="a"),
                Message(b"2", key="a"),
                Message(b"1", key="b"),
                Message(None, key="b"),
                Message(b"5", key="c"),
            ],
        )

    async def scenario() -> None:
        changes: list[tuple[object, object, object]] = []

        async def on_change(key: object, old: object, new: object) -> None:
            await asyncio.sleep(0)  # an async callback is awaited before the next record
            changes.append((key, old, new))

        async with AsyncTableView(
            bootstrap,
            "counters",
            on_change=on_change,
            key_deserializer=bytes.decode,
            value_deserializer=int,
        ) as view:
            assert changes == [
                ("a", None, 1),
                ("a", 1, 2),
                ("b", None, 1),
                ("b", 1, None),
                ("c", None, 5),
            ]
            assert view.snapshot() == {"a": 2, "c": 5}
            assert view.get("a") == 2

    asyncio.run(scenario())


def test_records_produced_after_start_appear(broker) -> None:
    bootstrap = broker.bootstrap_servers
    _create(bootstrap, "live", 2)
    with (
        TableView(bootstrap, "live") as view,
        TableView(bootstrap, "live", metadata_refresh_interval_ms=200) as refreshing,
    ):
        assert view.snapshot() == {}  # an empty topic is loaded at once
        with Producer(bootstrap) as producer:
            producer.send("live", Message(b"v1", key="k"))
            wait_until(lambda: view.get(b"k") == b"v1", timeout_s=WAIT_S)
            producer.send("live", [Message(b"v2", key="k"), Message(b"w", key="other")])
        view.wait_caught_up(timeout_s=WAIT_S)
        assert view.snapshot() == {b"k": b"v2", b"other": b"w"}  # read your writes

        with Admin(bootstrap) as admin:
            admin.create_partitions("live", 3)
        with Producer(bootstrap) as producer:
            producer.send("live", Message(b"new", key="late", partition=2))
        # wait_caught_up covers partitions added since start (its view refreshes every 30 s).
        view.wait_caught_up(timeout_s=WAIT_S)
        assert view.get(b"late") == b"new"
        # The periodic metadata refresh finds the new partition without being asked.
        wait_until(lambda: refreshing.get(b"late") == b"new", timeout_s=WAIT_S)
        assert refreshing.snapshot() == view.snapshot()


def test_close_stops_the_reader_even_inside_a_callback(broker) -> None:
    bootstrap = broker.bootstrap_servers
    _create(bootstrap, "closing", 2)

    async def scenario() -> None:
        stuck = asyncio.Event()

        async def on_change(key: object, old: object, new: object) -> None:
            stuck.set()
            await asyncio.Event().wait()  # never returns: the reader is stuck here

        view = AsyncTableView(bootstrap, "closing", on_change=on_change)
        await view.start()
        async with AsyncProducer(bootstrap) as producer:
            await producer.send("closing", Message(b"v", key="k"))
        waiter = asyncio.ensure_future(view.wait_caught_up())
        async with asyncio.timeout(WAIT_S):
            await stuck.wait()
        assert not waiter.done()  # the record is not applied until the callback returns
        await view.close()
        with pytest.raises(ConfigurationError, match="closed"):
            await waiter  # woken by close, not left hanging
        # Nothing of the view runs on (connection readers are cancelled by the SDK's close
        # and finish at their next step: ``cancelling``).
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert [t for t in others if not t.cancelling()] == []
        with pytest.raises(ConfigurationError, match="closed"):
            view.get(b"k")
        await view.close()  # twice is fine

    asyncio.run(scenario())

    view = TableView(bootstrap, "closing")
    view.start()
    assert _view_threads()
    view.close()
    assert not _view_threads()
    with pytest.raises(ConfigurationError):
        view.get(b"k")


def test_a_failing_callback_stops_the_view(broker) -> None:
    bootstrap = broker.bootstrap_servers
    _create(bootstrap, "fragile", 1)

    def on_change(key: object, old: object, new: object) -> None:
        if new == b"poison":
            raise ValueError("cannot handle poison")

    with TableView(bootstrap, "fragile", on_change=on_change) as view:
        with Producer(bootstrap) as producer:
            producer.send("fragile", [Message(b"fine", key="a"), Message(b"poison", key="b")])

        def stopped() -> bool:
            try:
                view.get(b"a")
            except TableViewError as error:
                assert isinstance(error.__cause__, ValueError)
                assert "poison" in str(error)
                return True
            return False

        wait_until(stopped, timeout_s=WAIT_S)
        with pytest.raises(TableViewError, match="'fragile' stopped"):
            view.wait_caught_up(timeout_s=WAIT_S)


def test_an_unknown_topic_is_a_clear_error(broker) -> None:
    bootstrap = broker.bootstrap_servers
    view = TableView(bootstrap, "no-such-topic")
    with pytest.raises(UnknownTopicError, match="'no-such-topic'"):
        view.start()
    view.close()
    assert not _view_threads()
    with Admin(bootstrap) as admin:
        assert "no-such-topic" not in admin.list_topics()  # the view created nothing


def test_a_partition_whose_leader_dies_is_followed(cluster_factory) -> None:
    nodes = cluster_factory(3)
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    with Admin(bootstrap) as admin:
        controller_id = admin.describe_cluster().controller_id
        created = admin.create_topic("ha-table", partitions=3, replication_factor=3)
        # Kill a partition leader that is not the active controller: this tests the client.
        victim_id, partition = next(
            (p.leader, p.partition) for p in created.partitions if p.leader != controller_id
        )
    victim = next(node for node in nodes if node.node_id == victim_id)
    with Producer(bootstrap) as producer:
        producer.send("ha-table", Message(b"before", key="k", partition=partition))
        with TableView(bootstrap, "ha-table") as view:
            assert view.snapshot() == {b"k": b"before"}
            victim.kill()
            producer.send("ha-table", Message(b"after", key="k", partition=partition))
            wait_until(lambda: view.get(b"k") == b"after", timeout_s=30)
            view.wait_caught_up(timeout_s=30)
            assert view.snapshot() == {b"k": b"after"}
