"""The pure parts of ``flux.spark``: options, offset arithmetic, the columnar decoder."""

from __future__ import annotations

import pytest
from flux.protocol.compression import Compression
from flux.protocol.errors import CorruptRecordError
from flux.protocol.records import build_batch
from flux.spark.columns import Columns, decode_into
from flux.spark.errors import FluxOptionError, FluxTopicNotFoundError
from flux.spark.offsets import (
    OffsetRange,
    from_spark,
    limit_rows,
    offsets_at_times,
    resolve,
    split_ranges,
    timestamps_for,
    to_spark,
)
from flux.spark.options import (
    TimestampSpec,
    parse_offsets,
    parse_reader_options,
    parse_writer_options,
)
from hypothesis import given
from hypothesis import strategies as st

BOOTSTRAP = {"bootstrap.servers": "127.0.0.1:9092"}


def test_reader_options_defaults_and_checks() -> None:
    stream = parse_reader_options({**BOOTSTRAP, "subscribe": "a, b,a"}, streaming=True)
    assert stream.topics == ("a", "b") and stream.starting == "latest"
    assert stream.fail_on_data_loss and not stream.include_headers
    batch = parse_reader_options({**BOOTSTRAP, "subscribePattern": "a.*"}, streaming=False)
    assert batch.starting == "earliest" and batch.ending == "latest" and batch.matches("abc")
    assert not batch.matches("__consumer_offsets")
    for options, named in [
        ({"subscribe": "a"}, "bootstrap.servers"),
        (BOOTSTRAP, "subscribePattern"),
        ({**BOOTSTRAP, "subscribe": "a", "subscribePattern": "a"}, "several were given"),
        ({**BOOTSTRAP, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({**BOOTSTRAP, "subscribe": "a", "includeHeaders": "maybe"}, "includeHeaders"),
        ({**BOOTSTRAP, "subscribe": "a", "endingOffsets": "latest"}, "batch queries"),
        ({**BOOTSTRAP, "subscribe": "a", "startingOffsets": '{"b": {"0": 1}}'}, "not subscribed"),
        ({**BOOTSTRAP, "subscribePattern": "("}, "regular expression"),
    ]:
        with pytest.raises(FluxOptionError, match=named):
            parse_reader_options(options, streaming=True)
    with pytest.raises(FluxOptionError, match="compression"):
        parse_writer_options({**BOOTSTRAP, "compression": "brotli"})


def test_offsets_json_forms() -> None:
    spec = parse_offsets(
        '{"t": {"0": 5, "2": -2}}', option="o", default="latest", allow_earliest=True
    )
    assert spec == {"t": {0: 5, 2: -2}}
    assert parse_offsets(None, option="o", default="earliest", allow_earliest=True) == "earliest"
    for bad in ("first", "[]", "{}", '{"t": {"x": 1}}', '{"t": {"0": -3}}', '{"t": {"0": true}}'):
        with pytest.raises(FluxOptionError, match="'o' must be"):
            parse_offsets(bad, option="o", default="latest", allow_earliest=True)
    with pytest.raises(FluxOptionError, match="cannot be 'earliest'"):
        parse_offsets("earliest", option="endingOffsets", default="latest")
    with pytest.raises(FluxOptionError):
        parse_offsets('{"t": {"0": -2}}', option="endingOffsets", default="latest")


def test_resolve_and_round_trip() -> None:
    counts = {"t": 3}
    earliest = {("t", 0): 0, ("t", 1): 10, ("t", 2): 0}
    latest = {("t", 0): 100, ("t", 1): 50, ("t", 2): 7}
    resolved = resolve(
        {"t": {0: 42, 1: -2}},
        option="startingOffsets",
        partition_counts=counts,
        earliest=earliest,
        latest=latest,
        unnamed="latest",
    )
    assert resolved == {("t", 0): 42, ("t", 1): 10, ("t", 2): 7}
    assert from_spark(to_spark(resolved)) == resolved
    assert to_spark(resolved) == {"t": {"0": 42, "1": 10, "2": 7}}
    with pytest.raises(FluxTopicNotFoundError):
        resolve(
            {"u": {0: 1}}, option="o", partition_counts=counts, earliest=earliest, latest=latest
        )
    with pytest.raises(FluxOptionError, match="has 3 partitions"):
        resolve(
            {"t": {5: 1}}, option="o", partition_counts=counts, earliest=earliest, latest=latest
        )


def test_limit_rows_is_proportional_exact_and_makes_progress() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 600, ("t", 1): 300, ("t", 2): 100}
    assert limit_rows(start, latest, 100) == {("t", 0): 60, ("t", 1): 30, ("t", 2): 10}
    assert limit_rows(start, latest, 5000) == latest
    tiny = limit_rows(start, latest, 1)
    assert sum(tiny.values()) == 1
    # a partition missing from start (new) counts from where latest is: nothing waiting
    assert limit_rows({("t", 0): 0}, {("t", 0): 10, ("t", 1): 4}, 3)[("t", 0)] == 3


def test_split_ranges() -> None:
    ranges = split_ranges({("a", 0): 5, ("a", 1): 0}, {("a", 0): 17, ("a", 1): 3}, 5)
    assert ranges == [
        OffsetRange("a", 0, 5, 10),
        OffsetRange("a", 0, 10, 15),
        OffsetRange("a", 0, 15, 17),
        OffsetRange("a", 1, 0, 3),
    ]


def test_assign_names_partitions_and_excludes_the_others() -> None:
    options = parse_reader_options(
        {**BOOTSTRAP, "assign": '{"a": [2, 0, 2], "b": [1]}'}, streaming=True
    )
    assert options.assign == {"a": (0, 2), "b": (1,)} and options.topics == ("a", "b")
    assert options.subscription_option == "assign"
    assert options.covers("a", 0) and options.covers("a", 2) and options.covers("b", 1)
    assert not options.covers("a", 1) and not options.covers("c", 0)
    subscribed = parse_reader_options({**BOOTSTRAP, "subscribe": "a"}, streaming=True)
    assert subscribed.covers("a", 7) and subscribed.subscription_option == "subscribe"
    for bad in ("a", "[]", "{}", '{"a": []}', '{"a": 0}', '{"a": [-1]}', '{"a": [true]}'):
        with pytest.raises(FluxOptionError, match="'assign' must be JSON like"):
            parse_reader_options({**BOOTSTRAP, "assign": bad}, streaming=True)
    for options, named in [
        ({"assign": '{"a": [0]}', "subscribe": "a"}, "several were given: assign, subscribe"),
        ({"assign": '{"a": [0]}', "startingOffsets": '{"a": {"1": 5}}'}, "'assign' does not"),
        ({"assign": '{"a": [0]}', "startingOffsets": '{"b": {"0": 5}}'}, "not subscribed"),
    ]:
        with pytest.raises(FluxOptionError, match=named):
            parse_reader_options({**BOOTSTRAP, **options}, streaming=True)


def test_timestamp_options_precedence_and_checks() -> None:
    by_partition = '{"a": {"0": 1000, "1": 2000}}'
    both = parse_reader_options(
        {
            **BOOTSTRAP,
            "subscribe": "a",
            "startingOffsets": "latest",
            "startingOffsetsByTimestamp": by_partition,
            "startingTimestamp": "500",
            "endingOffsetsByTimestamp": by_partition,
        },
        streaming=False,
    )
    assert both.starting_by_time == TimestampSpec("startingTimestamp", 500)
    assert both.ending_by_time == TimestampSpec(
        "endingOffsetsByTimestamp", {"a": {0: 1000, 1: 2000}}
    )
    assert not both.starting_by_time_latest_if_none
    json_only = parse_reader_options(
        {
            **BOOTSTRAP,
            "subscribe": "a",
            "startingOffsetsByTimestamp": by_partition,
            "startingOffsetsByTimestampStrategy": "LATEST",
            "endingTimestamp": "3000",
        },
        streaming=False,
    )
    assert json_only.starting_by_time == TimestampSpec(
        "startingOffsetsByTimestamp", {"a": {0: 1000, 1: 2000}}
    )
    assert json_only.ending_by_time == TimestampSpec("endingTimestamp", 3000)
    assert json_only.starting_by_time_latest_if_none
    plain = parse_reader_options({**BOOTSTRAP, "subscribe": "a"}, streaming=True)
    assert plain.starting_by_time is None and plain.ending_by_time is None
    for options, named, streaming in [
        ({"startingTimestamp": "-1"}, "'startingTimestamp' must be a record timestamp", False),
        ({"startingTimestamp": "soon"}, "'startingTimestamp' must be a record timestamp", False),
        ({"endingTimestamp": "1e3"}, "'endingTimestamp' must be a record timestamp", False),
        ({"startingTimestamp": str(1 << 63)}, "'startingTimestamp' must be", False),
        # the losing option is checked too
        (
            {"startingTimestamp": "5", "startingOffsetsByTimestamp": "{}"},
            "'startingOffsetsByTimestamp' must be JSON",
            False,
        ),
        ({"startingOffsetsByTimestamp": '{"a": {"0": -5}}'}, "timestamp -5 of a-0", False),
        ({"startingOffsetsByTimestamp": '{"a": {"x": 5}}'}, "is no partition", False),
        ({"startingOffsetsByTimestamp": '{"a": [5]}'}, "maps to", False),
        ({"endingOffsetsByTimestamp": '{"b": {"0": 5}}'}, "not subscribed", False),
        ({"startingOffsetsByTimestampStrategy": "earliest"}, "error or latest", False),
        ({"endingTimestamp": "5"}, "'endingTimestamp' is for batch queries", True),
        ({"endingOffsetsByTimestamp": by_partition}, "batch queries", True),
    ]:
        with pytest.raises(FluxOptionError, match=named):
            parse_reader_options({**BOOTSTRAP, "subscribe": "a", **options}, streaming=streaming)


def test_min_partitions_option() -> None:
    options = parse_reader_options(
        {**BOOTSTRAP, "subscribe": "a", "minPartitions": "6"}, streaming=False
    )
    assert options.min_partitions == 6
    assert (
        parse_reader_options({**BOOTSTRAP, "subscribe": "a"}, streaming=True).min_partitions is None
    )
    for bad in ("0", "-2", "many", "100001"):
        with pytest.raises(FluxOptionError, match="'minPartitions'"):
            parse_reader_options(
                {**BOOTSTRAP, "subscribe": "a", "minPartitions": bad}, streaming=True
            )


def test_kafka_client_options_are_accepted_and_ignored() -> None:
    carried_over = {
        **BOOTSTRAP,
        "subscribe": "a",
        "kafka.group.id": "legacy-group",
        "groupIdPrefix": "spark-kafka-source",
        "kafka.auto.offset.reset": "earliest",
        "kafka.security.protocol": "PLAINTEXT",
        "kafka.max.poll.records": "500",
        "kafkaConsumer.pollTimeoutMs": "512",
        "fetchOffset.numRetries": "3",
    }
    assert parse_reader_options(carried_over, streaming=True) == parse_reader_options(
        {**BOOTSTRAP, "subscribe": "a"}, streaming=True
    )


def test_resolve_covers_only_the_partitions_given() -> None:
    # assign: the view reports offsets of the assigned partitions only
    latest = {("t", 0): 10, ("t", 2): 30}
    resolved = resolve(
        "earliest",
        option="startingOffsets",
        partition_counts={"t": 3},
        earliest={("t", 0): 1, ("t", 2): 3},
        latest=latest,
    )
    assert resolved == {("t", 0): 1, ("t", 2): 3}


def test_timestamps_for_each_partition() -> None:
    keys = [("t", 1), ("t", 0), ("u", 0)]
    counts = {"t": 2, "u": 1}
    every = timestamps_for(TimestampSpec("startingTimestamp", 7), keys, partition_counts=counts)
    assert every == {("t", 0): 7, ("t", 1): 7, ("u", 0): 7}
    spec = TimestampSpec("startingOffsetsByTimestamp", {"t": {0: 5, 1: 6}, "u": {0: 9}})
    assert timestamps_for(spec, keys, partition_counts=counts) == {
        ("t", 0): 5,
        ("t", 1): 6,
        ("u", 0): 9,
    }
    partial = TimestampSpec("endingOffsetsByTimestamp", {"t": {0: 5}})
    with pytest.raises(FluxOptionError, match=r"leaves out t-1, u-0 \(option 'endingTimestamp'"):
        timestamps_for(partial, keys, partition_counts=counts)
    with pytest.raises(FluxOptionError, match="has 2 partitions"):
        timestamps_for(
            TimestampSpec("o", {"t": {0: 1, 1: 1, 2: 1}, "u": {0: 1}}),
            keys,
            partition_counts=counts,
        )
    with pytest.raises(FluxTopicNotFoundError):
        timestamps_for(TimestampSpec("o", {"v": {0: 1}}), keys, partition_counts=counts)


def test_offsets_at_times_when_no_record_is_late_enough() -> None:
    times = {("t", 0): 1_700_000_000_000, ("t", 1): 1_700_000_000_000, ("t", 2): 5}
    latest = {("t", 0): 10, ("t", 1): 20, ("t", 2): 30}
    # t-1: no record that late (-1); t-2: found past the last stable offset, which Kafka's
    # ListOffsets would not return either
    found = {("t", 0): 4, ("t", 1): -1, ("t", 2): 30}
    assert offsets_at_times(times, found, latest, option="o", latest_if_none=True) == {
        ("t", 0): 4,
        ("t", 1): 20,
        ("t", 2): 30,
    }
    with pytest.raises(FluxOptionError) as caught:
        offsets_at_times(times, found, latest, option="startingTimestamp", latest_if_none=False)
    message = str(caught.value)
    assert "option 'startingTimestamp'" in message
    assert "t-1 (1700000000000 = 2023-11-14T22:13:20.000Z), t-2 (5 = " in message
    assert "t-0" not in message and "startingOffsetsByTimestampStrategy=latest" in message


def test_min_partitions_splits_the_largest_ranges() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    end = {("t", 0): 10, ("t", 1): 10, ("t", 2): 110}
    six = split_ranges(start, end, 1000, min_partitions=6)
    assert [(r.partition, r.start, r.end) for r in six] == [
        (0, 0, 5),
        (0, 5, 10),
        (1, 0, 5),
        (1, 5, 10),
        (2, 100, 105),
        (2, 105, 110),
    ]
    # unequal ranges: the large one is cut, the small ones stay whole
    skewed = split_ranges({("a", 0): 0, ("a", 1): 0}, {("a", 0): 90, ("a", 1): 10}, 1000, 4)
    assert [(r.partition, r.count) for r in skewed] == [(0, 30), (0, 30), (0, 30), (1, 10)]
    # already enough pieces (maxRecordsPerPartition cut them): unchanged
    assert split_ranges(start, end, 5, min_partitions=6) == six
    # never finer than one offset per piece
    tiny = split_ranges({("a", 0): 0}, {("a", 0): 3}, 1000, min_partitions=10)
    assert [(r.start, r.end) for r in tiny] == [(0, 1), (1, 2), (2, 3)]
    assert split_ranges({}, {}, 1000, min_partitions=10) == []
    # after maxRecordsPerPartition: pieces of 4, 4, 2 become 2, 2, 2, 2, 2
    both = split_ranges({("a", 0): 0}, {("a", 0): 10}, 4, min_partitions=5)
    assert [(r.start, r.end) for r in both] == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]


@given(
    counts=st.lists(st.integers(min_value=0, max_value=500), min_size=1, max_size=6),
    max_records=st.integers(min_value=1, max_value=600),
    min_partitions=st.integers(min_value=1, max_value=40),
)
def test_split_ranges_covers_everything_once(
    counts: list[int], max_records: int, min_partitions: int
) -> None:
    start = {("t", p): 1000 * p for p in range(len(counts))}
    end = {("t", p): 1000 * p + count for p, count in enumerate(counts)}
    pieces = split_ranges(start, end, max_records, min_partitions=min_partitions)
    covered = [(r.partition, offset) for r in pieces for offset in range(r.start, r.end)]
    assert covered == [(p, 1000 * p + i) for p, count in enumerate(counts) for i in range(count)]
    assert len(pieces) >= min(min_partitions, sum(counts))
    assert all(r.count <= max_records for r in pieces)


def _records(count: int, base_offset: int = 0) -> bytes:
    return build_batch(
        [
            (f"k{i}".encode() if i % 2 else None, b"v" * (i * 7), [("h", str(i).encode())])
            for i in range(count)
        ],
        base_offset=base_offset,
        base_timestamp_ms=1_000,
    )


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.ZSTD])
def test_decode_into_filters_offsets_and_keeps_fields(compression: Compression) -> None:
    first = _records(30)
    second = build_batch(
        [(b"x", None), (None, b"y" * 300)], base_offset=30, compression=compression
    )
    columns = Columns(headers=[])
    next_offset = decode_into(columns, first + second + second[:20], 5, 31)
    assert next_offset == 32  # the cut-off copy at the end is left for the next fetch
    assert columns.offsets == list(range(5, 31))
    assert columns.values[0] == b"v" * 35 and columns.keys[0] == b"k5" and columns.keys[1] is None
    assert columns.headers is not None and columns.headers[0] == [("h", b"5")]
    assert columns.keys[-1] == b"x" and columns.values[-1] is None
    assert set(columns.timestamp_types) == {0} and columns.timestamps_ms[0] == 1_000


def test_decode_into_rejects_a_bad_crc() -> None:
    batch = bytearray(_records(3))
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decode_into(Columns(), bytes(batch), 0, 10)


def test_to_arrow_matches_the_spark_schema() -> None:
    pa = pytest.importorskip("pyarrow")
    from flux.spark.columns import to_arrow

    columns = Columns(headers=[])
    decode_into(columns, _records(4), 0, 4)
    schema = pa.schema(
        [
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("timestampType", pa.int32()),
            (
                "headers",
                pa.list_(
                    pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())]))
                ),
            ),
        ]
    )
    batch = to_arrow(columns, "t", 2, schema)
    assert batch.schema.equals(schema) and batch.num_rows == 4
    assert batch.column("timestamp")[0].value == 1_000_000
    assert batch.column("headers")[3].as_py() == [{"key": "h", "value": b"3"}]
