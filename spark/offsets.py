"""Offset arithmetic of the reader (pure): resolving ``startingOffsets``, spreading a read
limit over partitions, splitting ranges into Spark input partitions, and the JSON form Spark
checkpoints.

A *position map* is ``{(topic, partition): offset}``: the next offset to read. Spark stores a
source offset as JSON, so ``to_spark`` turns a position map into ``{"topic": {"0": 42}}`` (string
keys: integer keys would come back as strings anyway) and ``from_spark`` reverses it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .errors import FluxOptionError, FluxTopicNotFoundError
from .options import EARLIEST, LATEST, OffsetSpec

__all__ = [
    "OffsetRange",
    "Positions",
    "TopicPartitionKey",
    "from_spark",
    "limit_rows",
    "resolve",
    "split_ranges",
    "to_spark",
]

TopicPartitionKey = tuple[str, int]
Positions = dict[TopicPartitionKey, int]


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition: what one Spark input partition reads."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        assert 0 <= self.start < self.end, self

    @property
    def count(self) -> int:
        return self.end - self.start


def to_spark(positions: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """A position map as Spark's offset JSON object (topics and partitions sorted)."""
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(positions.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result


def from_spark(offset: Mapping[str, Mapping[str, int]]) -> Positions:
    """The position map of a Spark offset object (``to_spark``'s inverse)."""
    return {
        (topic, int(partition)): int(value)
        for topic, partitions in offset.items()
        for partition, value in partitions.items()
    }


def resolve(
    spec: OffsetSpec,
    *,
    option: str,
    partition_counts: Mapping[str, int],
    earliest: Mapping[TopicPartitionKey, int],
    latest: Mapping[TopicPartitionKey, int],
    unnamed: str = "earliest",
) -> Positions:
    """Concrete offsets of every partition of ``partition_counts`` for ``spec``.

    JSON names some partitions; the others get ``unnamed`` (a pattern subscription may match
    topics the JSON could not know). An offset outside ``[earliest, latest]`` is kept as
    given: reading it then reports data loss (below the log start) or waits for it (above
    the end), as Spark's Kafka source does. A partition number the topic lacks is an error.
    """
    positions: Positions = {}
    for topic, count in partition_counts.items():
        for partition in range(count):
            key = (topic, partition)
            if isinstance(spec, str):
                wanted = EARLIEST if spec == "earliest" else LATEST
            else:
                default = EARLIEST if unnamed == "earliest" else LATEST
                wanted = spec.get(topic, {}).get(partition, default)
            if wanted == EARLIEST:
                positions[key] = earliest[key]
            elif wanted == LATEST:
                positions[key] = latest[key]
            else:
                positions[key] = wanted
    if not isinstance(spec, str):
        for topic, partitions in spec.items():
            if topic not in partition_counts:
                raise FluxTopicNotFoundError(
                    f"option {option!r} names topic {topic!r}, which does not exist"
                )
            for partition in partitions:
                if partition >= partition_counts[topic]:
                    raise FluxOptionError(
                        f"option {option!r} names partition {partition} of {topic!r}, which has "
                        f"{partition_counts[topic]} partitions"
                    )
    return positions


def limit_rows(start: Positions, latest: Positions, max_rows: int) -> Positions:
    """End offsets that read at most ``max_rows`` rows in all from ``start`` towards
    ``latest``, spread over partitions in proportion to what each has waiting.

    Shares are rounded by largest remainder (ties to the lower topic-partition), so they add
    up to exactly ``max_rows`` when more is waiting: every batch makes progress, even with a
    limit smaller than the number of partitions. Deterministic for the same inputs.
    """
    assert max_rows >= 1
    waiting = {key: max(0, latest[key] - start.get(key, latest[key])) for key in latest}
    total = sum(waiting.values())
    if total <= max_rows:
        return dict(latest)
    shares = {key: count * max_rows // total for key, count in waiting.items()}
    remainders = sorted(
        (key for key in waiting if waiting[key] > shares[key]),
        key=lambda key: (-(waiting[key] * max_rows % total), key),
    )
    for key in remainders[: max_rows - sum(shares.values())]:
        shares[key] += 1
    end = {key: start.get(key, latest[key]) + shares[key] for key in latest}
    assert sum(end[key] - start.get(key, latest[key]) for key in end) == max_rows
    return end


def split_ranges(
    start: Mapping[TopicPartitionKey, int],
    end: Mapping[TopicPartitionKey, int],
    max_records: int,
) -> list[OffsetRange]:
    """One ``OffsetRange`` per partition with something to read, cut into pieces of at most
    ``max_records`` offsets; ordered by topic, partition and offset."""
    ranges: list[OffsetRange] = []
    for key in sorted(end):
        topic, partition = key
        first = start[key]
        last = end[key]
        for piece_start in range(first, last, max_records):
            ranges.append(
                OffsetRange(topic, partition, piece_start, min(last, piece_start + max_records))
            )
    return ranges


def partitions_of(positions: Iterable[TopicPartitionKey]) -> dict[str, int]:
    """Topic -> partition count implied by a position map (highest partition + 1)."""
    counts: dict[str, int] = {}
    for topic, partition in positions:
        counts[topic] = max(counts.get(topic, 0), partition + 1)
    return counts
