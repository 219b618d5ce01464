"""Where a ``POST /publish`` goes: the message's partition, and that partition's leader.

A broker places a message on the partition its key hashes to, else the partition its id hashes
to (Kafka's murmur2 of the UTF-8 bytes, modulo the partition count, so a repeat meets its
original), else one it picks. ``ClusterView`` is what ``GET /cluster`` said about brokers and
leaders; ``partition_of`` makes the broker's choice on the client side, so the message can be
sent straight to the leader instead of taking a forwarded hop through another broker.

Pure: no I/O. Thread-safety: ``ClusterView`` is immutable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flux.protocol.partitioner import partition_for_key

__all__ = ["ClusterView", "partition_of"]


def partition_of(partitions: int, *, key: str | None, message_id: str | None) -> int | None:
    """The partition a broker puts a message with this key or id on (``None``: neither, the
    broker or the caller picks one)."""
    if key is not None:
        return partition_for_key(key.encode(), partitions)
    if message_id is not None:
        return partition_for_key(message_id.encode(), partitions)
    return None


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Brokers' HTTP addresses (``"host:port"`` by broker id) and, per topic, each partition's
    leader (``-1``: none known) and the partitions that have a leader whose address is known
    (``available``, where a message with neither key nor id goes, as Kafka's partitioner
    picks among available partitions; every partition when none has one)."""

    brokers: Mapping[int, str]
    leaders: Mapping[str, tuple[int, ...]]
    available: Mapping[str, tuple[int, ...]]

    @classmethod
    def from_answer(cls, answer: Any) -> ClusterView:
        """The view in a ``GET /cluster`` answer; ``ValueError`` when it is not one."""
        try:
            brokers = {int(b["id"]): str(b["http"]) for b in answer["brokers"]}
            leaders = {
                str(t["name"]): tuple(
                    int(p["leader"]) for p in sorted(t["partitions"], key=lambda p: p["partition"])
                )
                for t in answer["topics"]
            }
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"not a GET /cluster answer: {error!r}") from None
        available = {}
        for name, found in leaders.items():
            led = tuple(p for p, leader in enumerate(found) if leader in brokers)
            available[name] = led or tuple(range(len(found)))
        return cls(brokers=brokers, leaders=leaders, available=available)

    def partition_count(self, topic: str) -> int | None:
        found = self.leaders.get(topic)
        return len(found) if found else None

    def leader_address(self, topic: str, partition: int) -> str | None:
        """``"host:port"`` of the HTTP API of the partition's leader, if known."""
        found = self.leaders.get(topic)
        if found is None or not 0 <= partition < len(found):
            return None
        return self.brokers.get(found[partition])
