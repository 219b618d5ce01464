"""The pure parts of ``flux.spark``: options, offset arithmetic, the columnar decoder."""

from __future__ import annotations

import pytest
from flux.protocol.compression import Compression
from flux.protocol.errors import CorruptRecordError
from flux.protocol.records import build_batch
from flux.spark.columns import Columns, decode_into
from flux.spark.errors import FluxOptionError, FluxTopicNotFoundError
from flux.spark.offsets import OffsetRange, from_spark, limit_rows, resolve, split_ranges, to_spark
from flux.spark.options import parse_offsets, parse_reader_options, parse_writer_options

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
        ({**BOOTSTRAP, "subscribe": "a", "subscribePattern": "a"}, "both"),
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
