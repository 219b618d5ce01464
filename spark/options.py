"""Options of the ``flux`` data source, parsed and checked into frozen dataclasses (pure).

Names follow Spark's Kafka connector where they mean the same thing, so a Kafka pipeline
moves to Flux by changing ``format("kafka")`` to ``format("flux")``:

======================================  ============================================  ==============
option                                  meaning                                       default
======================================  ============================================  ==============
``bootstrap.servers``                   ``host:port,...``                             required
                                        (``kafka.bootstrap.servers`` works too)
``assign``                              JSON ``{"t": [0, 1], "u": [2]}``: only those  exactly one
                                        partitions
``subscribe``                           comma-separated topics                        of the
``subscribePattern``                    Python regex matched against every topic      three
                                        name
``startingOffsets``                     ``earliest``, ``latest`` or JSON              stream:
                                        ``{"t": {"0": 5}}`` (-2 earliest, -1 latest   latest, batch:
                                        per partition)                                earliest
``startingOffsetsByTimestamp``          JSON ``{"t": {"0": 1700000000000}}``: per     none
                                        partition, the first offset whose record
                                        timestamp (ms) is >= the given one (Kafka's
                                        ListOffsets); every partition read must be
                                        named; wins over ``startingOffsets``
``startingTimestamp``                   one timestamp (ms) for every partition, as    none
                                        above; wins over both options above
``startingOffsetsByTimestampStrategy``  a starting timestamp after every record of a  error
                                        partition: ``error`` (fail, naming the
                                        partition) or ``latest`` (start at its end)
``endingOffsets``                       batch only: ``latest`` or JSON (-1 latest)    latest
``endingOffsetsByTimestamp``            batch only: JSON as                           none
                                        ``startingOffsetsByTimestamp``, the end
                                        (exclusive); a timestamp after every record
                                        ends at the latest offset; wins over
                                        ``endingOffsets``
``endingTimestamp``                     batch only: one timestamp (ms) for every      none
                                        partition; wins over both options above
``maxOffsetsPerTrigger``                rows per micro-batch over all partitions      no limit
``minPartitions``                       at least this many Spark input partitions     one per range
                                        per batch: the largest ranges are split
                                        further (after ``maxRecordsPerPartition``'s
                                        split)
``includeHeaders``                      add the ``headers`` column                    false
``failOnDataLoss``                      fail (true) or warn and skip (false) when     true
                                        records are gone
``maxRecordsPerPartition``              offsets per Spark input partition (larger     1000000
                                        ranges split)
``fetchMaxBytes``                       bytes per Fetch and partition                 4 MiB
``fetchTimeoutMs``                      how long a task waits for the records its     120000
                                        range promises
``timeoutMs``                           metadata / offset look-ups and writes give    30000
                                        up after this
``isolation.level``                     ``read_committed`` (transactions' committed   read_committed
                                        records only, up to the last stable offset)
                                        or ``read_uncommitted``
                                        (``kafka.isolation.level`` works too)
``valueFormat``                         ``raw`` (``value`` is binary) or ``avro``:    raw
                                        ``value`` is decoded with the schema
                                        registry (Confluent's wire format) into a
                                        column of the Avro schema's Spark type
                                        (``flux.spark.avro``)
``schemaRegistryUrl``                   avro: ``http://host:port/schemas``            required for
                                        (comma-separated: tried in turn)              avro
``valueSubject``                        avro: the subject whose schema the values     <topic>-value
                                        are read as
``valueSchemaVersion``                  avro: that subject's version, a number or     latest
                                        ``latest``
``mode``                                avro: ``FAILFAST`` (a value that does not     FAILFAST
                                        decode fails the query) or ``PERMISSIVE``
                                        (it reads as null)
``topic`` (writer)                      the topic of rows without a ``topic`` column  none
                                        value
``compression`` (writer)                none, gzip, snappy, lz4, zstd                 none
======================================  ============================================  ==============

Any other option is ignored, so the options of a Kafka pipeline carry over unchanged:
``kafka.group.id``, ``groupIdPrefix`` and ``kafka.auto.offset.reset`` (the reader keeps its
positions in Spark's checkpoint, never in a consumer group, and ``startingOffsets`` says where
to begin), the other ``kafka.*`` client settings except ``kafka.bootstrap.servers`` and
``kafka.isolation.level`` (the reader talks to Flux through its SDK, not a Kafka consumer),
and Spark's Kafka options Flux has no use for (``kafkaConsumer.pollTimeoutMs``,
``fetchOffset.*``).

Every parser raises ``FluxOptionError`` naming the option and what it expects; nothing here
does I/O, so the checks are unit-tested with literal option maps.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from . import limits
from .errors import FluxOptionError

__all__ = [
    "EARLIEST",
    "LATEST",
    "Assignment",
    "AvroOptions",
    "OffsetSpec",
    "ReaderOptions",
    "TimestampSpec",
    "WriterOptions",
    "parse_assign",
    "parse_avro_options",
    "parse_offsets",
    "parse_reader_options",
    "parse_timestamps",
    "parse_writer_options",
]

#: The sentinel offsets of Spark's Kafka JSON form (and of Kafka's ListOffsets).
EARLIEST = -2
LATEST = -1

#: ``"earliest"``, ``"latest"``, or topic -> partition -> offset (``EARLIEST``/``LATEST``
#: allowed per partition).
OffsetSpec = Literal["earliest", "latest"] | Mapping[str, Mapping[int, int]]

#: ``assign``: topic -> the partitions read (sorted, no duplicates).
Assignment = Mapping[str, tuple[int, ...]]

#: The largest timestamp an option takes: Kafka's timestamps are signed 64-bit milliseconds.
_TIMESTAMP_MS_MAX = (1 << 63) - 1

_COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
#: Options that say where a batch read ends: a streaming query refuses them.
_ENDING_OPTIONS = ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")
_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


@dataclass(frozen=True)
class AvroOptions:
    """``valueFormat=avro``: where the reader schema of the values is, and what a value that
    does not decode becomes."""

    #: One or more ``http://host:port/schemas`` URLs, comma-separated.
    registry_url: str
    subject: str
    #: ``"latest"`` or a version number (as text, as the registry's REST path takes it).
    version: str
    #: ``mode=PERMISSIVE``: a malformed value reads as null instead of failing the query.
    permissive: bool = False


@dataclass(frozen=True)
class TimestampSpec:
    """Offsets found by record timestamp (Kafka's ListOffsets): the first offset of a
    partition whose record timestamp is >= the given milliseconds."""

    #: The option this came from (``startingTimestamp``, ``endingOffsetsByTimestamp``, ...),
    #: for messages.
    option: str
    #: One timestamp for every partition, or topic -> partition -> timestamp (which must name
    #: every partition read, as Spark's Kafka source requires).
    times: int | Mapping[str, Mapping[int, int]]


@dataclass(frozen=True)
class ReaderOptions:
    """The reader's options, checked. Exactly one of ``topics`` / ``pattern`` is set; with
    ``assign``, ``topics`` holds the assigned topics and ``assign`` their partitions."""

    bootstrap: str
    topics: tuple[str, ...] | None
    pattern: str | None
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    include_headers: bool
    fail_on_data_loss: bool
    max_records_per_partition: int
    fetch_max_bytes: int
    fetch_timeout_ms: int
    timeout_s: float
    #: ``isolation.level`` (or ``kafka.isolation.level``): read only committed transactions.
    read_committed: bool = True
    #: ``valueFormat=avro``; None for ``raw`` (binary values).
    avro: AvroOptions | None = None
    #: ``assign``: only these partitions of ``topics`` are read.
    assign: Assignment | None = None
    #: ``startingTimestamp`` / ``startingOffsetsByTimestamp``: replaces ``starting`` when set.
    starting_by_time: TimestampSpec | None = None
    #: ``endingTimestamp`` / ``endingOffsetsByTimestamp`` (batch): replaces ``ending``.
    ending_by_time: TimestampSpec | None = None
    #: ``startingOffsetsByTimestampStrategy=latest``: a starting timestamp after every record
    #: of a partition starts at its end instead of failing the query.
    starting_by_time_latest_if_none: bool = False
    #: ``minPartitions``: the least number of Spark input partitions per batch.
    min_partitions: int | None = None

    @property
    def subscription_option(self) -> str:
        """The option that names what is read, for messages."""
        if self.assign is not None:
            return "assign"
        return "subscribe" if self.topics is not None else "subscribePattern"

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` belongs to the subscription."""
        if self.topics is not None:
            return topic in self.topics
        assert self.pattern is not None
        return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None

    def covers(self, topic: str, partition: int) -> bool:
        """Whether partition ``partition`` of ``topic`` is read (``assign`` names some)."""
        if self.assign is not None:
            return partition in self.assign.get(topic, ())
        return self.matches(topic)


@dataclass(frozen=True)
class WriterOptions:
    bootstrap: str
    topic: str | None
    compression: str
    timeout_s: float


def parse_reader_options(options: Mapping[str, str], *, streaming: bool) -> ReaderOptions:
    """Check the reader options; ``streaming`` picks the ``startingOffsets`` default and
    refuses the ending options."""
    topics, pattern, assign = _subscription(options)
    starting = parse_offsets(
        options.get("startingOffsets"),
        option="startingOffsets",
        default="latest" if streaming else "earliest",
        allow_earliest=True,
    )
    if streaming:
        for name in _ENDING_OPTIONS:
            if _text(options, name) is not None:
                raise FluxOptionError(f"option {name!r} is for batch queries (spark.read) only")
    ending = parse_offsets(options.get("endingOffsets"), option="endingOffsets", default="latest")
    starting_by_time = _timestamp_spec(options, "startingTimestamp", "startingOffsetsByTimestamp")
    ending_by_time = _timestamp_spec(options, "endingTimestamp", "endingOffsetsByTimestamp")
    named = [
        (name, spec)
        for name, spec in (("startingOffsets", starting), ("endingOffsets", ending))
        if isinstance(spec, Mapping)
    ]
    for by_time in (starting_by_time, ending_by_time):
        if by_time is not None and isinstance(by_time.times, Mapping):
            named.append((by_time.option, by_time.times))
    for name, spec in named:
        _check_named_topics(spec, topics, pattern, assign, option=name)
    strategy = (_text(options, "startingOffsetsByTimestampStrategy") or "error").lower()
    if strategy not in ("error", "latest"):
        raise FluxOptionError(
            f"option 'startingOffsetsByTimestampStrategy' must be error or latest, got {strategy!r}"
        )
    max_offsets = _integer(
        options, "maxOffsetsPerTrigger", None, low=1, high=limits.MAX_OFFSETS_PER_TRIGGER_MAX
    )
    return ReaderOptions(
        bootstrap=_bootstrap(options),
        topics=topics,
        pattern=pattern,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=max_offsets,
        include_headers=_boolean(options, "includeHeaders", False),
        fail_on_data_loss=_boolean(options, "failOnDataLoss", True),
        max_records_per_partition=_required_int(
            options,
            "maxRecordsPerPartition",
            limits.MAX_RECORDS_PER_PARTITION_DEFAULT,
            low=1,
            high=limits.MAX_RECORDS_PER_PARTITION_MAX,
        ),
        fetch_max_bytes=_required_int(
            options, "fetchMaxBytes", limits.FETCH_BYTES_DEFAULT, low=1, high=limits.FETCH_BYTES_MAX
        ),
        fetch_timeout_ms=_required_int(
            options,
            "fetchTimeoutMs",
            limits.FETCH_TIMEOUT_MS_DEFAULT,
            low=1,
            high=limits.FETCH_TIMEOUT_MS_MAX,
        ),
        timeout_s=_timeout_s(options),
        read_committed=_isolation(options),
        avro=parse_avro_options(options, topics),
        assign=assign,
        starting_by_time=starting_by_time,
        ending_by_time=ending_by_time,
        starting_by_time_latest_if_none=strategy == "latest",
        min_partitions=_integer(
            options, "minPartitions", None, low=1, high=limits.MIN_PARTITIONS_MAX
        ),
    )


def _subscription(
    options: Mapping[str, str],
) -> tuple[tuple[str, ...] | None, str | None, Assignment | None]:
    """``(topics, pattern, assign)`` from exactly one of ``assign``, ``subscribe`` and
    ``subscribePattern`` (``assign``'s topics are also returned as ``topics``)."""
    given = [n for n in ("assign", "subscribe", "subscribePattern") if _text(options, n)]
    if len(given) != 1:
        raise FluxOptionError(
            "give exactly one of the options 'assign' (JSON like {\"topic\": [0, 1]}), "
            "'subscribe' (comma-separated topics) or 'subscribePattern' (a regular expression)"
            + (f" — several were given: {', '.join(given)}" if given else "")
        )
    if given[0] == "assign":
        assign = parse_assign(_text(options, "assign") or "")
        return tuple(assign), None, assign
    if given[0] == "subscribePattern":
        pattern = _text(options, "subscribePattern") or ""
        try:
            re.compile(pattern)
        except re.error as error:
            raise FluxOptionError(
                f"option 'subscribePattern' is not a regular expression: {error}"
            ) from error
        return None, pattern, None
    subscribe = _text(options, "subscribe") or ""
    topics = tuple(dict.fromkeys(t.strip() for t in subscribe.split(",") if t.strip()))
    if not topics:
        raise FluxOptionError("option 'subscribe' names no topic")
    _check_topic_count(len(topics), option="subscribe")
    return topics, None, None


def _check_topic_count(count: int, *, option: str) -> None:
    if count > limits.SUBSCRIBE_TOPICS_MAX:
        raise FluxOptionError(
            f"option {option!r} names {count} topics, more than the limit of "
            f"{limits.SUBSCRIBE_TOPICS_MAX}"
        )


def parse_assign(text: str) -> Assignment:
    """``assign``'s JSON (``{"topicA": [0, 1], "topicB": [2]}``) into topic -> sorted
    partitions. ``FluxOptionError`` for anything else."""
    expected = 'option \'assign\' must be JSON like {"topicA": [0, 1], "topicB": [2]}'
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as error:
        raise FluxOptionError(f"{expected}; got {text!r} ({error.msg})") from None
    if not isinstance(parsed, dict) or not parsed:
        raise FluxOptionError(f"{expected}; got {text!r}")
    _check_topic_count(len(parsed), option="assign")
    assign: dict[str, tuple[int, ...]] = {}
    for topic, partitions in parsed.items():
        if not topic.strip() or not isinstance(partitions, list) or not partitions:
            raise FluxOptionError(f"{expected}; topic {topic!r} maps to {partitions!r}")
        for partition in partitions:
            if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
                raise FluxOptionError(f"{expected}; {partition!r} of {topic!r} is no partition")
        assign[topic] = tuple(sorted(set(partitions)))
    return assign


def _timestamp_spec(
    options: Mapping[str, str], every_option: str, by_partition_option: str
) -> TimestampSpec | None:
    """``startingTimestamp`` (one time for every partition) over
    ``startingOffsetsByTimestamp`` (JSON), as Spark's Kafka source ranks them; the same for
    the ending pair. Both are checked even when one wins: a bad value is a mistake either
    way."""
    by_partition_text = _text(options, by_partition_option)
    by_partition = (
        None
        if by_partition_text is None
        else parse_timestamps(by_partition_text, option=by_partition_option)
    )
    every = _timestamp_ms(options, every_option)
    if every is not None:
        return TimestampSpec(every_option, every)
    if by_partition is not None:
        return TimestampSpec(by_partition_option, by_partition)
    return None


def _timestamp_ms(options: Mapping[str, str], name: str) -> int | None:
    value = _text(options, name)
    if value is None:
        return None
    if re.fullmatch("[0-9]+", value) is None or int(value) > _TIMESTAMP_MS_MAX:
        raise FluxOptionError(
            f"option {name!r} must be a record timestamp in ms since the epoch (an integer "
            f">= 0, like 1700000000000), got {value!r}"
        )
    return int(value)


def parse_timestamps(text: str, *, option: str) -> Mapping[str, Mapping[int, int]]:
    """``startingOffsetsByTimestamp``'s JSON (``{"topic": {"0": 1700000000000}}``, record
    timestamps in ms since the epoch) into topic -> partition -> timestamp."""
    expected = (
        f'option {option!r} must be JSON like {{"topic": {{"0": 1700000000000}}}} '
        "(per partition, a record timestamp in ms since the epoch, >= 0)"
    )
    return _partition_map(
        text,
        expected,
        noun="timestamp",
        valid=lambda timestamp: 0 <= timestamp <= _TIMESTAMP_MS_MAX,
    )


_AVRO_ONLY = ("schemaRegistryUrl", "valueSubject", "valueSchemaVersion", "mode")


def parse_avro_options(
    options: Mapping[str, str], topics: tuple[str, ...] | None
) -> AvroOptions | None:
    """``valueFormat`` and the options of ``avro``; None for ``raw``. ``topics`` (the
    ``subscribe`` list) names the default subject ``<topic>-value`` when there is one."""
    value_format = (_text(options, "valueFormat") or "raw").lower()
    if value_format not in ("raw", "avro"):
        raise FluxOptionError(f"option 'valueFormat' must be raw or avro, got {value_format!r}")
    if value_format == "raw":
        # A registry option without valueFormat=avro is most likely a forgotten valueFormat.
        for name in _AVRO_ONLY:
            if _text(options, name) is not None:
                raise FluxOptionError(f"option {name!r} needs the option valueFormat=avro")
        return None
    registry_url = _text(options, "schemaRegistryUrl")
    if registry_url is None:
        raise FluxOptionError(
            "option 'schemaRegistryUrl' is required with valueFormat=avro "
            "(e.g. http://127.0.0.1:8080/schemas; several comma-separated)"
        )
    urls = [url.strip() for url in registry_url.split(",") if url.strip()]
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise FluxOptionError(
                f"option 'schemaRegistryUrl' must be http(s) URLs like "
                f"http://127.0.0.1:8080/schemas, got {url!r}"
            )
    subject = _text(options, "valueSubject")
    if subject is None:
        if topics is None or len(topics) != 1:
            raise FluxOptionError(
                "option 'valueSubject' is required with valueFormat=avro unless 'subscribe' "
                "names exactly one topic (whose subject '<topic>-value' is the default)"
            )
        subject = f"{topics[0]}-value"
    version = (_text(options, "valueSchemaVersion") or "latest").lower()
    if version != "latest" and not (version.isdigit() and int(version) >= 1):
        raise FluxOptionError(
            f"option 'valueSchemaVersion' must be latest or a version number >= 1, got {version!r}"
        )
    mode = (_text(options, "mode") or "FAILFAST").upper()
    if mode not in ("FAILFAST", "PERMISSIVE"):
        raise FluxOptionError(f"option 'mode' must be FAILFAST or PERMISSIVE, got {mode!r}")
    return AvroOptions(
        registry_url=",".join(urls),
        subject=subject,
        version=version if version == "latest" else str(int(version)),
        permissive=mode == "PERMISSIVE",
    )


def _isolation(options: Mapping[str, str]) -> bool:
    """``isolation.level`` as Spark's Kafka source spells it (``kafka.isolation.level``, or
    plain): ``read_committed`` (the default) or ``read_uncommitted``."""
    names = [n for n in ("isolation.level", "kafka.isolation.level") if n in options]
    if not names:
        return True
    value = str(options[names[0]]).strip().lower()
    if value not in ("read_committed", "read_uncommitted"):
        raise FluxOptionError(
            f"option '{names[0]}' must be read_committed or read_uncommitted, not {value!r}"
        )
    return value == "read_committed"


def parse_writer_options(options: Mapping[str, str]) -> WriterOptions:
    compression = (_text(options, "compression") or "none").lower()
    if compression not in _COMPRESSIONS:
        raise FluxOptionError(
            f"option 'compression' must be one of {', '.join(_COMPRESSIONS)}, got {compression!r}"
        )
    return WriterOptions(
        bootstrap=_bootstrap(options),
        topic=_text(options, "topic"),
        compression=compression,
        timeout_s=_timeout_s(options),
    )


def parse_offsets(
    text: str | None, *, option: str, default: str, allow_earliest: bool = False
) -> OffsetSpec:
    """``earliest`` / ``latest`` / Spark's Kafka JSON (``{"topic": {"0": 23, "1": -2}}``)
    into an ``OffsetSpec`` with integer partitions. ``FluxOptionError`` for anything else."""
    text = (text or default).strip()
    if text.lower() == "latest":
        return "latest"
    if text.lower() == "earliest":
        if not allow_earliest:
            raise FluxOptionError(f"option {option!r} cannot be 'earliest'")
        return "earliest"
    expected = (
        f"option {option!r} must be 'earliest', 'latest' or JSON like "
        '{"topic": {"0": 42, "1": -2}} (-2 earliest, -1 latest)'
        if allow_earliest
        else f"option {option!r} must be 'latest' or JSON like "
        '{"topic": {"0": 42, "1": -1}} (-1 latest)'
    )
    lowest = EARLIEST if allow_earliest else LATEST
    return _partition_map(text, expected, noun="offset", valid=lambda offset: offset >= lowest)


def _partition_map(
    text: str, expected: str, *, noun: str, valid: Callable[[int], bool]
) -> dict[str, dict[int, int]]:
    """Spark's per-partition JSON (``{"topic": {"0": <int>}}``) into topic -> partition ->
    number; ``FluxOptionError`` says ``expected`` and names what is wrong (a ``noun`` that is
    not an integer or not ``valid``)."""
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as error:
        raise FluxOptionError(f"{expected}; got {text!r} ({error.msg})") from None
    if not isinstance(parsed, dict) or not parsed:
        raise FluxOptionError(f"{expected}; got {text!r}")
    spec: dict[str, dict[int, int]] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict) or not partitions:
            raise FluxOptionError(f"{expected}; topic {topic!r} maps to {partitions!r}")
        numbers: dict[int, int] = {}
        for partition, number in partitions.items():
            if not (isinstance(partition, str) and partition.isdigit()):
                raise FluxOptionError(f"{expected}; {partition!r} of {topic!r} is no partition")
            if isinstance(number, bool) or not isinstance(number, int) or not valid(number):
                raise FluxOptionError(
                    f"{expected}; {noun} {number!r} of {topic}-{partition} is not valid"
                )
            numbers[int(partition)] = number
        spec[topic] = numbers
    return spec


def _check_named_topics(
    spec: Mapping[str, Mapping[int, int]],
    topics: tuple[str, ...] | None,
    pattern: str | None,
    assign: Assignment | None,
    *,
    option: str,
) -> None:
    for topic, partitions in spec.items():
        subscribed = topic in topics if topics is not None else re.fullmatch(pattern or "", topic)
        if not subscribed:
            raise FluxOptionError(
                f"option {option!r} names topic {topic!r}, which is not subscribed"
            )
        if assign is not None:
            for partition in partitions:
                if partition not in assign[topic]:
                    raise FluxOptionError(
                        f"option {option!r} names partition {partition} of {topic!r}, which "
                        "option 'assign' does not"
                    )


def _text(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name)
    if value is None or not str(value).strip():
        return None
    return str(value).strip()


def _bootstrap(options: Mapping[str, str]) -> str:
    value = _text(options, "bootstrap.servers") or _text(options, "kafka.bootstrap.servers")
    if value is None:
        raise FluxOptionError(
            "option 'bootstrap.servers' is required (the cluster's 'host:port,...')"
        )
    return value


def _boolean(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = _text(options, name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise FluxOptionError(f"option {name!r} must be true or false, got {value!r}")


def _integer(
    options: Mapping[str, str], name: str, default: int | None, *, low: int, high: int
) -> int | None:
    value = _text(options, name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise FluxOptionError(f"option {name!r} must be an integer, got {value!r}") from None
    if not low <= number <= high:
        raise FluxOptionError(f"option {name!r} must be in {low}..{high}, got {number}")
    return number


def _required_int(
    options: Mapping[str, str], name: str, default: int, *, low: int, high: int
) -> int:
    number = _integer(options, name, default, low=low, high=high)
    assert number is not None
    return number


def _timeout_s(options: Mapping[str, str]) -> float:
    timeout_ms = _required_int(
        options, "timeoutMs", int(limits.METADATA_TIMEOUT_S * 1000), low=1, high=3_600_000
    )
    return timeout_ms / 1000
