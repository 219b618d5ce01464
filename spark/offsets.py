"""Offset arithmetic of the reader (pure): resolving ``startingOffsets`` and the offsets
found by timestamp, spreading a read limit over partitions, splitting ranges into Spark input
partitions (``maxRecordsPerPartition``, ``minPartitions``), and the JSON form Spark
checkpoints.

A *position map* is ``{(topic, partition): offset}``: the next offset to read. Spark stores a
source offset as JSON, so ``to_spark`` turns a position map into ``{"topic": {"0": 42}}`` (string
keys: integer keys would come back as strings anyway) and ``from_spark`` reverses it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from .errors import FluxOptionError, FluxTopicNotFoundError
from .options import EARLIEST, LATEST, OffsetSpec, TimestampSpec

__all__ = [
    "OffsetRange",
    "Positions",
    "TopicPartitionKey",
    "from_spark",
    "limit_rows",
    "offsets_at_times",
    "resolve",
    "split_ranges",
    "timestamps_for",
    "to_spark",
]

#: How many partitions an error message lists before "and N more".
_NAMED_IN_ERRORS_MAX = 5

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
    """Concrete offsets of every partition of ``latest`` (the partitions read: every one of
    ``partition_counts``' topics, or those ``assign`` names) for ``spec``.

    JSON names some partitions; the others get ``unnamed`` (a pattern subscription may match
    topics the JSON could not know). An offset outside ``[earliest, latest]`` is kept as
    given: reading it then reports data loss (below the log start) or waits for it (above
    the end), as Spark's Kafka source does. A partition number the topic lacks is an error.
    """
    positions: Positions = {}
    for key in sorted(latest):
        topic, partition = key
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
        _check_named_partitions(spec, option=option, partition_counts=partition_counts)
    return positions


def _check_named_partitions(
    spec: Mapping[str, Mapping[int, int]], *, option: str, partition_counts: Mapping[str, int]
) -> None:
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


def timestamps_for(
    spec: TimestampSpec,
    partitions: Iterable[TopicPartitionKey],
    *,
    partition_counts: Mapping[str, int],
) -> dict[TopicPartitionKey, int]:
    """The timestamp to look up for each partition read: ``spec``'s one timestamp, or the one
    its JSON gives the partition.

    The JSON must name every partition read, as Spark's Kafka source requires: a partition
    left out would otherwise start (or end) somewhere the user never said. It may name only
    partitions that exist.
    """
    keys = sorted(partitions)
    if isinstance(spec.times, int):
        return dict.fromkeys(keys, spec.times)
    times = spec.times
    _check_named_partitions(times, option=spec.option, partition_counts=partition_counts)
    missing = [key for key in keys if key[1] not in times.get(key[0], {})]
    if missing:
        every = spec.option.replace("OffsetsByTimestamp", "Timestamp")
        raise FluxOptionError(
            f"option {spec.option!r} must name every partition read; it leaves out "
            f"{_partition_list(missing)} (option {every!r} gives one timestamp to all)"
        )
    return {key: times[key[0]][key[1]] for key in keys}


def offsets_at_times(
    times: Mapping[TopicPartitionKey, int],
    found: Mapping[TopicPartitionKey, int],
    latest: Mapping[TopicPartitionKey, int],
    *,
    option: str,
    latest_if_none: bool,
) -> Positions:
    """Positions from Kafka's ListOffsets by timestamp: ``found`` holds, per partition of
    ``times``, the first offset whose record timestamp is >= the partition's time, or -1
    when no record's is.

    An offset at or past ``latest`` counts as none found: ListOffsets never returns one a
    reader cannot fetch yet (past the high watermark, or with read_committed the last stable
    offset), but ``latest`` was read in a request of its own and may be older. Where none is
    found the position is ``latest`` with ``latest_if_none`` (an ending timestamp always;
    ``startingOffsetsByTimestampStrategy=latest``), otherwise ``FluxOptionError`` names the
    partitions and their timestamps.
    """
    positions: Positions = {}
    none_found: list[TopicPartitionKey] = []
    for key in sorted(times):
        offset = found.get(key, -1)
        if 0 <= offset < latest[key]:
            positions[key] = offset
        else:
            positions[key] = latest[key]
            none_found.append(key)
    if none_found and not latest_if_none:
        listed = ", ".join(
            f"{topic}-{partition} ({_timestamp_text(times[(topic, partition)])})"
            for topic, partition in none_found[:_NAMED_IN_ERRORS_MAX]
        )
        more = len(none_found) - _NAMED_IN_ERRORS_MAX
        raise FluxOptionError(
            f"option {option!r}: no record has a timestamp at or after the one given for "
            + listed
            + (f" and {more} more partitions" if more > 0 else "")
            + ": every record there is older. Give an earlier timestamp, or set the option "
            "startingOffsetsByTimestampStrategy=latest to start such partitions at their end"
        )
    return positions


def _partition_list(keys: list[TopicPartitionKey]) -> str:
    named = ", ".join(f"{topic}-{partition}" for topic, partition in keys[:_NAMED_IN_ERRORS_MAX])
    more = len(keys) - _NAMED_IN_ERRORS_MAX
    return named + (f" and {more} more" if more > 0 else "")


def _timestamp_text(timestamp_ms: int) -> str:
    """``1700000000000 = 2023-11-14T22:13:20.000Z``: the milliseconds as given, and readable."""
    try:
        moment = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):  # beyond year 9999
        return str(timestamp_ms)
    return f"{timestamp_ms} = {moment.isoformat(timespec='milliseconds').replace('+00:00', 'Z')}"


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
    min_partitions: int = 1,
) -> list[OffsetRange]:
    """One ``OffsetRange`` per partition with something to read, cut into pieces of at most
    ``max_records`` offsets; then, while there are fewer than ``min_partitions`` pieces, the
    largest are cut further (``_split_largest``). Ordered by topic, partition and offset."""
    ranges: list[OffsetRange] = []
    for key in sorted(end):
        topic, partition = key
        first = start[key]
        last = end[key]
        for piece_start in range(first, last, max_records):
            ranges.append(
                OffsetRange(topic, partition, piece_start, min(last, piece_start + max_records))
            )
    if len(ranges) < min_partitions:
        ranges = _split_largest(ranges, min_partitions)
    return ranges


def _split_largest(ranges: list[OffsetRange], min_partitions: int) -> list[OffsetRange]:
    """``ranges`` cut into at least ``min_partitions`` pieces (fewer only when every piece is
    down to one offset), as ``minPartitions`` asks.

    Like Spark's Kafka source, the largest ranges are divided (each evenly) and small ones
    stay whole. Spark gives each large range a rounded share of the count, which can end one
    short; here each step gives one more piece to the range whose pieces are largest (ties
    to the first in order), so the count is reached exactly and the largest piece, which
    decides how long the batch takes, is as small as that count allows.
    """
    parts = [1] * len(ranges)
    # (minus the size of the range's largest piece, its index): a min-heap of the largest.
    largest = [(-offset_range.count, index) for index, offset_range in enumerate(ranges)]
    heapq.heapify(largest)
    total = len(ranges)
    while total < min_partitions and largest and largest[0][0] < -1:
        _, index = heapq.heappop(largest)
        parts[index] += 1
        total += 1
        piece = -(-ranges[index].count // parts[index])  # ceiling division
        heapq.heappush(largest, (-piece, index))
    pieces = [piece for r, n in zip(ranges, parts, strict=True) for piece in _cut_evenly(r, n)]
    assert sum(piece.count for piece in pieces) == sum(r.count for r in ranges)
    return pieces


def _cut_evenly(offset_range: OffsetRange, parts: int) -> list[OffsetRange]:
    """``offset_range`` in ``parts`` consecutive pieces whose sizes differ by at most one."""
    size, extra = divmod(offset_range.count, parts)
    pieces = []
    piece_start = offset_range.start
    for index in range(parts):
        piece_end = piece_start + size + (1 if index < extra else 0)
        pieces.append(
            OffsetRange(offset_range.topic, offset_range.partition, piece_start, piece_end)
        )
        piece_start = piece_end
    assert piece_start == offset_range.end
    return pieces


def partitions_of(positions: Iterable[TopicPartitionKey]) -> dict[str, int]:
    """Topic -> partition count implied by a position map (highest partition + 1)."""
    counts: dict[str, int] = {}
    for topic, partition in positions:
        counts[topic] = max(counts.get(topic, 0), partition + 1)
    return counts
