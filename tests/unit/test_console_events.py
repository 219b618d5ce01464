"""The console's event streams cost per tick, not per open page or per partition: streams
asking for the same topics and groups share one snapshot per half interval, and the cluster
summary counts a metadata image's partitions once."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from flux.cluster.http.rest import RestApi
from flux.console.server import Console


class _Api:
    """Stands in for the broker's HttpApi: counts the reads a snapshot makes."""

    def __init__(self) -> None:
        self.reads = 0

    def cluster_summary(self) -> dict[str, Any]:
        return {"brokers": 3}

    async def topic_offsets(self, name: str) -> list[dict[str, Any]]:
        self.reads += 1
        await asyncio.sleep(0)
        return [{"high_watermark": 5}, {"high_watermark": 7}]

    async def topic_totals(self) -> dict[str, Any]:
        return {}

    async def group_offsets(self, group_id: str) -> list[dict[str, Any]]:
        return []


def test_streams_asking_the_same_share_one_snapshot_per_half_interval() -> None:
    async def run() -> None:
        api = _Api()
        console = Console(api, interval_s=0.2)  # type: ignore[arg-type]
        events = await asyncio.gather(*(console.shared_snapshot(["orders"], []) for _ in range(10)))
        assert api.reads == 1
        assert all(event["topics"]["orders"]["end"] == 12 for event in events)
        await console.shared_snapshot(["payments"], [])  # another question: its own reads
        assert api.reads == 2
        await asyncio.sleep(0.11)  # half an interval later: read again
        await console.shared_snapshot(["orders"], [])
        assert api.reads == 3
        await asyncio.sleep(0.21)
        await console.shared_snapshot(["orders"], [])
        assert set(console._shared) == {(("orders",), (), False)}  # stale entries dropped

    asyncio.run(run())


def _image(isr_sizes: list[int], leaders: list[int]) -> Any:
    partitions = [
        SimpleNamespace(isr=list(range(size)), replicas=[0, 1, 2], leader=leader)
        for size, leader in zip(isr_sizes, leaders, strict=True)
    ]
    return SimpleNamespace(topics={"t": SimpleNamespace(partitions=partitions)})


def test_partition_health_is_counted_once_per_image() -> None:
    holder = SimpleNamespace()
    image = _image([3, 2, 0], [1, 2, -1])
    assert RestApi._partition_health(holder, image) == (3, 2, 1)  # type: ignore[arg-type]
    image.topics["t"].partitions.clear()  # an image never changes: a change is not seen...
    assert RestApi._partition_health(holder, image) == (3, 2, 1)  # type: ignore[arg-type]
    newer = _image([3, 3], [0, 1])  # ...a new version is a new image, counted afresh
    assert RestApi._partition_health(holder, newer) == (2, 0, 0)  # type: ignore[arg-type]


def test_a_group_event_lists_its_partitions_up_to_the_bound() -> None:
    from flux.console import server

    class _Group(_Api):
        async def group_offsets(self, group_id: str) -> list[dict[str, Any]]:
            return [
                {"topic": "t", "partition": index, "committed": 4, "high_watermark": 9, "lag": 5}
                for index in range(server.MAX_LIVE_PARTITIONS + 5)
            ]

    event = asyncio.run(Console(_Group()).snapshot([], ["g"]))  # type: ignore[arg-type]
    figures = event["groups"]["g"]
    count = server.MAX_LIVE_PARTITIONS + 5
    assert (figures["committed"], figures["lag"]) == (4 * count, 5 * count)
    assert len(figures["offsets"]) == server.MAX_LIVE_PARTITIONS
    assert figures["offsets"][1] == ["t", 1, 4, 9, 5]
