"""Record batch v2 codec (flux.protocol.records) and compression (flux.protocol.compression).

Interoperability is checked against two independent implementations of the batch format:
kafka-python's pure-Python ``kafka.record.default_records`` and aiokafka's C extension
(``aiokafka.record.default_records``).
"""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import aiokafka.codec
import cramjam
import kafka.codec
import kafka.record.default_records as kafka_python_records
import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AiokafkaBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AiokafkaBuilder
from flux.protocol import compression as compression_module
from flux.protocol.compression import (
    MAX_DECOMPRESSED_BATCH_BYTES,
    Compression,
    compress,
    decompress,
)
from flux.protocol.errors import CorruptRecordError
from flux.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    Record,
    RecordSpec,
    TimestampType,
    build_batch,
    decode_record_fields,
    decode_records,
    is_transactional_batch,
    iter_batches,
    parse_batch_header,
    reseal_crc,
    set_base_offset_and_epoch,
    validate_batch,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

BASE_TS = 1_700_000_000_000

# Compressible on purpose: both reference builders send a batch uncompressed when compression
# would not make it smaller.
SAMPLE: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
    (b"key-0", b"value " * 40, [("trace-id", b"abc"), ("empty", b""), ("null", None)]),
    (None, b"no key " * 30, []),
    (b"no-value", None, [("ü-utf8-κλειδί", b"\x00\xff")]),
    (b"", b"", []),
    (b"k" * 300, b"v" * 5000, [("h", b"x" * 200)] * 3),
]


def _expected(first_offset: int = 0) -> list[tuple[Any, ...]]:
    return [
        (first_offset + i, BASE_TS + i, key, value, [tuple(h) for h in headers])
        for i, (key, value, headers) in enumerate(SAMPLE)
    ]


def _ours(records: list[Record]) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def _theirs(batch: Any) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in batch]


def _sample_batch(codec: Compression = Compression.NONE, **kwargs: Any) -> bytes:
    specs = [
        RecordSpec(key, value, headers, timestamp_ms=BASE_TS + i)
        for i, (key, value, headers) in enumerate(SAMPLE)
    ]
    return build_batch(specs, compression=codec, **kwargs)


@pytest.fixture
def kafka_python_codecs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give kafka-python the codec libraries it imports optionally (python-snappy, lz4,
    zstandard), backed by cramjam. Snappy keeps kafka-python's own xerial framing code;
    only the raw block codec is substituted."""
    monkeypatch.setattr(
        kafka.codec,
        "snappy",
        SimpleNamespace(
            compress=lambda data: bytes(cramjam.snappy.compress_raw(data)),
            decompress=lambda data: bytes(cramjam.snappy.decompress_raw(data)),
        ),
    )
    monkeypatch.setattr(kafka.codec, "lz4", object())
    monkeypatch.setattr(kafka.codec, "zstd", object())
    monkeypatch.setattr(kafka_python_records, "lz4_encode", aiokafka.codec.lz4_encode)
    monkeypatch.setattr(kafka_python_records, "lz4_decode", aiokafka.codec.lz4_decode)
    monkeypatch.setattr(kafka_python_records, "zstd_encode", aiokafka.codec.zstd_encode)
    monkeypatch.setattr(kafka_python_records, "zstd_decode", aiokafka.codec.zstd_decode)


# -- interoperability -------------------------------------------------------------------------


@pytest.mark.usefixtures("kafka_python_codecs")
@pytest.mark.parametrize("codec", list(Compression))
def test_decodes_kafka_python_batches(codec: Compression) -> None:
    builder = kafka_python_records.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, (key, value, headers) in enumerate(SAMPLE):
        builder.append(i, timestamp=BASE_TS + i, key=key, value=value, headers=headers)
    raw = bytes(builder.build())
    header = validate_batch(raw)
    assert header.compression is codec
    assert header.records_count == len(SAMPLE)
    assert _ours(decode_records(raw)) == _expected()


@pytest.mark.usefixtures("kafka_python_codecs")
@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_reads_our_batches(codec: Compression) -> None:
    raw = _sample_batch(codec, base_offset=1000)
    batch = kafka_python_records.DefaultRecordBatch(bytearray(raw))
    assert batch.validate_crc()
    assert batch.compression_type == codec
    assert _theirs(batch) == _expected(first_offset=1000)


@pytest.mark.parametrize("codec", list(Compression))
def test_decodes_aiokafka_batches(codec: Compression) -> None:
    builder = AiokafkaBuilder(2, int(codec), False, 4242, 3, 17, 1 << 20)
    for i, (key, value, headers) in enumerate(SAMPLE):
        builder.append(i, timestamp=BASE_TS + i, key=key, value=value, headers=headers)
    raw = bytes(builder.build())
    header = validate_batch(raw)
    assert header.compression is codec
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 3, 17)
    assert _ours(decode_records(raw)) == _expected()


@pytest.mark.parametrize("codec", list(Compression))
def test_aiokafka_reads_our_batches(codec: Compression) -> None:
    raw = _sample_batch(codec, base_offset=77, producer_id=9, producer_epoch=2, base_sequence=5)
    batch = AiokafkaBatch(raw)
    assert batch.validate_crc()
    assert batch.compression_type == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 2, 5)
    assert _theirs(batch) == _expected(first_offset=77)


def _with_payload(batch: bytes, codec: Compression, payload: bytes) -> bytes:
    """Replace the records of an uncompressed batch by ``payload`` sent with ``codec``."""
    out = bytearray(batch[:BATCH_HEADER_SIZE]) + payload
    struct.pack_into(">i", out, 8, len(out) - 12)
    attributes = struct.unpack_from(">h", out, 21)[0]
    struct.pack_into(">h", out, 21, (attributes & ~0x07) | codec)
    reseal_crc(out)
    return bytes(out)


def test_decodes_raw_snappy_as_librdkafka_writes_it() -> None:
    plain = _sample_batch()
    body = plain[BATCH_HEADER_SIZE:]
    raw_snappy = bytes(aiokafka.codec.snappy_encode(body, xerial_compatible=False))
    assert not raw_snappy.startswith(b"\x82SNAPPY\x00")
    assert (
        _ours(decode_records(_with_payload(plain, Compression.SNAPPY, raw_snappy))) == _expected()
    )


@pytest.mark.usefixtures("kafka_python_codecs")
def test_snappy_is_xerial_framed_and_both_clients_read_it() -> None:
    data = b"".join(b"%d," % i for i in range(50_000))  # > one 32 KiB xerial chunk
    framed = compress(Compression.SNAPPY, data)
    assert framed.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    assert kafka.codec.snappy_decode(framed) == data
    assert aiokafka.codec.snappy_decode(framed) == data
    assert decompress(Compression.SNAPPY, kafka.codec.snappy_encode(data)) == data
    assert decompress(Compression.SNAPPY, aiokafka.codec.snappy_encode(data)) == data


def test_lz4_frames_use_independent_blocks() -> None:
    # Kafka's Java decoder (Lz4BlockInputStream) decompresses each block on its own.
    frame = compress(Compression.LZ4, bytes(200_000))
    assert frame[:4] == b"\x04\x22\x4d\x18"
    flags = frame[4]
    assert flags & 0x20, "B.Indep must be set"
    assert not flags & 0x04, "no content checksum, like the Java client"


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("data", [b"", b"x", bytes(range(256)) * 300])
def test_compression_round_trip(codec: Compression, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


# -- decompression bound ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_decompression_is_bounded(codec: Compression) -> None:
    data = bytes(300_000)
    packed = compress(codec, data)
    assert decompress(codec, packed, max_output_bytes=len(data)) == data
    with pytest.raises(CorruptRecordError, match="exceeds the limit of 299999 bytes"):
        decompress(codec, packed, max_output_bytes=len(data) - 1)


def test_decode_records_applies_the_bound() -> None:
    batch = build_batch([(None, bytes(100_000))], compression=Compression.ZSTD)
    assert len(decode_records(batch)) == 1
    with pytest.raises(CorruptRecordError, match="exceeds"):
        decode_records(batch, max_decompressed_bytes=50_000)
    assert MAX_DECOMPRESSED_BATCH_BYTES == 64 * 1024 * 1024


@pytest.mark.parametrize(
    "decompress_into",
    [cramjam.gzip.decompress_into, cramjam.lz4.decompress_into, cramjam.zstd.decompress_into],
)
def test_cramjam_still_reports_a_small_output_buffer_as_we_expect(decompress_into: Any) -> None:
    # compression._decompress_bounded grows its buffer only on these messages; if cramjam
    # changed them, large batches would be reported as corrupt instead.
    module = {
        cramjam.gzip.decompress_into: cramjam.gzip,
        cramjam.lz4.decompress_into: cramjam.lz4,
        cramjam.zstd.decompress_into: cramjam.zstd,
    }[decompress_into]
    with pytest.raises(cramjam.DecompressionError) as caught:
        decompress_into(bytes(module.compress(bytes(1000))), bytearray(10))
    assert compression_module._output_too_small(caught.value)


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_garbage_does_not_decompress(codec: Compression) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x09abc")
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"definitely not compressed" * 3)


# -- header, CRC and in-place edits -----------------------------------------------------------


def test_header_fields_and_properties() -> None:
    raw = build_batch(
        [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")],
        base_offset=500,
        base_timestamp_ms=BASE_TS,
        producer_id=123,
        producer_epoch=4,
        base_sequence=42,
        partition_leader_epoch=9,
        is_transactional=True,
    )
    header = validate_batch(raw)
    assert header == parse_batch_header(raw)
    assert isinstance(header, BatchHeader)
    assert header.base_offset == 500
    assert header.last_offset_delta == 2
    assert header.last_offset == 502
    assert header.next_offset == 503
    assert header.size == len(raw) == header.batch_length + 12
    assert header.partition_leader_epoch == 9
    assert header.magic == 2
    assert header.compression is Compression.NONE
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert header.is_transactional and not header.is_control
    assert (header.base_timestamp, header.max_timestamp) == (BASE_TS, BASE_TS)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (123, 4, 42)
    assert header.records_count == 3


def test_control_batch_is_flagged_and_still_decoded() -> None:
    # A commit marker: key = version 0, type 1 (COMMIT); value = version, coordinator epoch.
    marker = build_batch(
        [(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 5))],
        producer_id=1,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    header = validate_batch(marker)
    assert header.is_control
    (record,) = decode_records(marker)
    assert record.key == b"\x00\x00\x00\x01"


def test_timestamps_are_relative_to_the_first_record() -> None:
    raw = build_batch(
        [
            RecordSpec(b"a", b"1", timestamp_ms=2000),
            RecordSpec(b"b", b"2", timestamp_ms=1000),
            (b"c", b"3"),
        ],
        base_timestamp_ms=1500,
    )
    header = parse_batch_header(raw)
    assert (header.base_timestamp, header.max_timestamp) == (2000, 2000)
    assert [r.timestamp for r in decode_records(raw)] == [2000, 1000, 1500]


def test_log_append_time_gives_every_record_the_max_timestamp() -> None:
    batch = bytearray(_sample_batch())
    attributes = struct.unpack_from(">h", batch, 21)[0]
    struct.pack_into(">h", batch, 21, attributes | 0x08)
    struct.pack_into(">q", batch, 35, 1_800_000_000_000)
    reseal_crc(batch)
    assert parse_batch_header(batch).timestamp_type is TimestampType.LOG_APPEND_TIME
    assert {r.timestamp for r in decode_records(batch)} == {1_800_000_000_000}
    assert {r.timestamp for r in kafka_python_records.DefaultRecordBatch(batch)} == {
        1_800_000_000_000
    }


def test_flipping_any_crc_covered_byte_fails_validation() -> None:
    raw = build_batch([(b"key", b"value", [("h", b"v")]), (None, b"x" * 20)], base_timestamp_ms=1)
    validate_batch(raw)
    for position in range(17, len(raw)):  # the CRC itself, then everything it covers
        corrupted = bytearray(raw)
        corrupted[position] ^= 0x01
        with pytest.raises(CorruptRecordError):
            validate_batch(corrupted)


def test_crc_failure_says_what_failed() -> None:
    corrupted = bytearray(_sample_batch())
    corrupted[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        validate_batch(corrupted)
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        decode_records(corrupted)
    decode_records(_sample_batch(), verify_crc=False)


def test_base_offset_and_epoch_are_outside_the_crc() -> None:
    batch = bytearray(_sample_batch())
    set_base_offset_and_epoch(batch, 0, base_offset=1 << 40, partition_leader_epoch=17)
    header = validate_batch(batch)
    assert (header.base_offset, header.partition_leader_epoch) == (1 << 40, 17)
    assert _ours(decode_records(batch)) == _expected(first_offset=1 << 40)
    set_base_offset_and_epoch(batch, base_offset=5)  # epoch left alone
    header = validate_batch(batch)
    assert (header.base_offset, header.partition_leader_epoch) == (5, 17)


def test_set_base_offset_at_a_position_inside_a_larger_buffer() -> None:
    first, second = _sample_batch(), build_batch([(b"k", b"v")])
    buffer = bytearray(first + second)
    set_base_offset_and_epoch(buffer, len(first), base_offset=99, partition_leader_epoch=3)
    (_, view1), (header2, view2) = list(iter_batches(buffer))
    assert (header2.base_offset, header2.partition_leader_epoch) == (99, 3)
    validate_batch(view1)
    validate_batch(view2)
    del view1, view2


def test_reseal_crc_at_a_position() -> None:
    first, second = _sample_batch(), build_batch([(b"k", b"v")])
    buffer = bytearray(first + second)
    struct.pack_into(">q", buffer, len(first) + 27, 123)  # baseTimestamp is CRC-covered
    with pytest.raises(CorruptRecordError):
        validate_batch(buffer[len(first) :])
    crc = reseal_crc(buffer, len(first))
    assert validate_batch(buffer[len(first) :]).crc == crc
    assert decode_records(buffer[len(first) :])[0].timestamp == 123


def test_parse_batch_header_rejections() -> None:
    raw = _sample_batch()
    with pytest.raises(CorruptRecordError, match="61 bytes"):
        parse_batch_header(raw[:60])
    with pytest.raises(CorruptRecordError, match="61 bytes"):
        parse_batch_header(raw, len(raw) - 10)
    legacy = bytearray(raw)
    legacy[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        parse_batch_header(legacy)
    short = bytearray(raw)
    struct.pack_into(">i", short, 8, 48)
    with pytest.raises(CorruptRecordError, match="batchLength 48"):
        parse_batch_header(short)
    bad_codec = bytearray(raw)
    struct.pack_into(">h", bad_codec, 21, 5)
    with pytest.raises(CorruptRecordError, match="codec 5"):
        parse_batch_header(bad_codec)


def test_validate_batch_wants_exactly_one_batch() -> None:
    raw = _sample_batch()
    with pytest.raises(CorruptRecordError, match="batchLength says"):
        validate_batch(raw + b"\x00")
    with pytest.raises(CorruptRecordError, match="batchLength says"):
        validate_batch(raw[:-1])


# -- iter_batches ---------------------------------------------------------------------------------


def test_iter_batches_with_partial_tail() -> None:
    batches = [build_batch([(b"k%d" % i, b"v" * i)], base_offset=i * 10) for i in range(3)]
    tail = build_batch([(b"tail", b"x" * 100)])
    for cut in (1, 30, BATCH_HEADER_SIZE, len(tail) - 1):
        buffer = b"".join(batches) + tail[:cut]
        found = list(iter_batches(buffer))
        assert [bytes(view) for _, view in found] == batches
        assert [header.base_offset for header, _ in found] == [0, 10, 20]
        with pytest.raises(CorruptRecordError):
            list(iter_batches(buffer, allow_partial_tail=False))
    assert [
        bytes(v) for _, v in iter_batches(b"".join(batches), allow_partial_tail=False)
    ] == batches
    assert list(iter_batches(b"")) == []


def test_iter_batches_rejects_a_corrupt_header_even_with_partial_tail_allowed() -> None:
    buffer = bytearray(_sample_batch() * 2)
    buffer[len(buffer) // 2 + 16] = 7  # magic of the second batch
    with pytest.raises(CorruptRecordError, match="magic 7"):
        list(iter_batches(buffer))


# -- malformed records ----------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _record(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return _varint(len(body)) + body


def _batch(records: bytes, count: int, codec: Compression = Compression.NONE) -> bytes:
    template = bytearray(build_batch([(b"k", b"v")], base_timestamp_ms=BASE_TS))
    payload = compress(codec, records)
    out = template[:BATCH_HEADER_SIZE] + payload
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">h", out, 21, int(codec))
    struct.pack_into(">i", out, 57, count)
    reseal_crc(out)
    return bytes(out)


def _good_record(offset_delta: int = 0) -> bytes:
    fields = [b"\x00", _varint(0), _varint(offset_delta), _varint(1), b"k", _varint(1), b"v"]
    return _record(*fields, _varint(0))


GOOD_RECORD = _good_record()
TWO_GOOD_RECORDS = _good_record(0) + _good_record(1)


@pytest.mark.parametrize(
    ("records", "count", "message"),
    [
        (GOOD_RECORD, 2, "malformed record"),  # count larger than the records present
        (GOOD_RECORD * 2, 1, "bytes remain after"),  # count smaller
        (GOOD_RECORD, -1, "negative record count"),
        (
            _record(b"\x00", _varint(0), _varint(0), _varint(5), b"k", _varint(-1), _varint(0)),
            1,
            "runs past the end",
        ),
        (
            _record(b"\x00", _varint(0), _varint(0), _varint(-2), _varint(-1), _varint(0)),
            1,
            "negative length",
        ),
        (
            _record(b"\x00", _varint(0), _varint(0), _varint(-1), _varint(-1), _varint(-3)),
            1,
            "negative header count",
        ),
        (
            _record(
                b"\x00",
                _varint(0),
                _varint(0),
                _varint(-1),
                _varint(-1),
                _varint(1),
                _varint(2),
                b"\xff\xfe",
                _varint(-1),
            ),
            1,
            "malformed record",
        ),  # bad UTF-8
        (
            _record(
                b"\x00",
                _varint(0),
                _varint(0),
                _varint(-1),
                _varint(-1),
                _varint(1),
                _varint(-1),
                _varint(-1),
            ),
            1,
            "null header key",
        ),
        (
            _record(b"\x00", b"\xff" * 11, _varint(0), _varint(-1), _varint(-1), _varint(0)),
            1,
            "longer than its type",
        ),
        (
            _record(b"\x00", _varint(0), b"\xff" * 6, _varint(-1), _varint(-1), _varint(0)),
            1,
            "longer than its type",
        ),
        (
            _record(b"\x00", _varint(0), _varint(0), _varint(-1), _varint(-1), _varint(0), b"junk"),
            1,
            "declares",
        ),
        (_varint(1000) + b"\x00", 1, "claims 1000 bytes"),
    ],
)
def test_malformed_records_raise_corrupt_record_error(
    records: bytes, count: int, message: str
) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        decode_records(_batch(records, count))


def test_hand_built_batch_decodes() -> None:
    expected = [Record(0, BASE_TS, b"k", b"v"), Record(1, BASE_TS, b"k", b"v")]
    assert decode_records(_batch(TWO_GOOD_RECORDS, 2)) == expected
    assert decode_records(_batch(TWO_GOOD_RECORDS, 2, Compression.GZIP)) == expected


def test_compressed_garbage_is_corrupt() -> None:
    raw = _batch(b"", 0, Compression.NONE)
    for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD):
        bad = bytearray(raw) + b"not really compressed"
        struct.pack_into(">i", bad, 8, len(bad) - 12)
        struct.pack_into(">h", bad, 21, int(codec))
        struct.pack_into(">i", bad, 57, 1)
        reseal_crc(bad)
        with pytest.raises(CorruptRecordError, match=codec.name):
            decode_records(bad)


def test_empty_records_are_rejected_by_the_builder() -> None:
    with pytest.raises(ValueError):
        build_batch([])


def test_ten_thousand_records() -> None:
    records = [(b"key-%d" % i, b"value-%d" % i * 5, [("n", b"%d" % i)]) for i in range(10_000)]
    raw = build_batch(records, compression=Compression.LZ4, base_offset=7)
    decoded = decode_records(raw)
    assert len(decoded) == 10_000
    assert decoded[-1] == Record(
        10_006, decoded[-1].timestamp, b"key-9999", b"value-9999" * 5, (("n", b"9999"),)
    )


# -- properties -----------------------------------------------------------------------------------

_bytes_or_none = st.none() | st.binary(max_size=64)
_headers = st.lists(st.tuples(st.text(max_size=10), _bytes_or_none), max_size=4)
_specs = st.builds(
    RecordSpec,
    key=_bytes_or_none,
    value=_bytes_or_none | st.binary(min_size=200, max_size=2000),
    headers=_headers,
    timestamp_ms=st.none() | st.integers(min_value=0, max_value=2**41),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(_specs, min_size=1, max_size=20),
    codec=st.sampled_from(list(Compression)),
    base_offset=st.integers(min_value=0, max_value=2**62),
    base_timestamp=st.integers(min_value=0, max_value=2**41),
)
def test_build_decode_round_trip(
    records: list[RecordSpec], codec: Compression, base_offset: int, base_timestamp: int
) -> None:
    raw = build_batch(
        records, base_offset=base_offset, base_timestamp_ms=base_timestamp, compression=codec
    )
    header = validate_batch(raw)
    assert header.records_count == len(records)
    assert header.last_offset == base_offset + len(records) - 1
    decoded = decode_records(raw)
    expected = [
        Record(
            base_offset + i,
            base_timestamp if spec.timestamp_ms is None else spec.timestamp_ms,
            spec.key,
            spec.value,
            tuple(spec.headers),
        )
        for i, spec in enumerate(records)
    ]
    assert decoded == expected
    assert header.max_timestamp == max(r.timestamp for r in expected)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_corrupt_record_error(buf: bytes) -> None:
    for reader in (
        lambda: parse_batch_header(buf),
        lambda: list(iter_batches(buf)),
        lambda: list(iter_batches(buf, allow_partial_tail=False)),
        lambda: validate_batch(buf),
        lambda: decode_records(buf),
        lambda: decode_records(buf, verify_crc=False),
    ):
        try:
            reader()
        except CorruptRecordError:
            pass


@settings(max_examples=200, deadline=None)
@given(
    records=st.binary(max_size=300),
    count=st.integers(min_value=-2, max_value=50),
    codec=st.sampled_from(list(Compression)),
    compress_first=st.booleans(),
    log_append_time=st.booleans(),
)
def test_arbitrary_records_section_raises_only_corrupt_record_error(
    records: bytes, count: int, codec: Compression, compress_first: bool, log_append_time: bool
) -> None:
    # A well-formed header with a valid CRC over arbitrary record bytes (compressed properly
    # or not), so the fuzzing reaches the record decoder instead of stopping at the CRC.
    payload = compress(codec, records) if compress_first else records
    batch = bytearray(build_batch([(b"k", b"v")]))[:BATCH_HEADER_SIZE] + payload
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">h", batch, 21, int(codec) | (0x08 if log_append_time else 0))
    struct.pack_into(">i", batch, 57, count)
    reseal_crc(batch)
    try:
        decode_records(batch)
    except CorruptRecordError:
        pass


@settings(max_examples=200, deadline=None)
@given(
    codec=st.sampled_from(list(Compression)),
    edits=st.lists(
        st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1, max_size=4
    ),
)
def test_mutated_batches_raise_only_corrupt_record_error(
    codec: Compression, edits: list[tuple[int, int]]
) -> None:
    batch = bytearray(_sample_batch(codec))
    first_crc_covered = 21  # attributes onwards: the header fields after the CRC, and records
    for position, value in edits:
        batch[first_crc_covered + position % (len(batch) - first_crc_covered)] = value
    try:
        reseal_crc(batch)
        decode_records(batch)
    except CorruptRecordError:
        pass


def test_four_tuples_encode_like_record_specs() -> None:
    specs = [
        RecordSpec(b"k", b"v", (("h", b"x"), ("n", None))),
        RecordSpec(None, b"late", timestamp_ms=1_700_000_000_500),
        RecordSpec(b"", None),
        RecordSpec(None, b"x" * 20_000, timestamp_ms=1_600_000_000_000),
    ]
    tuples = [(s.key, s.value, tuple(s.headers), s.timestamp_ms) for s in specs]
    for compression in (Compression.NONE, Compression.GZIP):
        expected = build_batch(specs, base_timestamp_ms=1_700_000_000_000, compression=compression)
        built = build_batch(tuples, base_timestamp_ms=1_700_000_000_000, compression=compression)
        assert decode_records(built) == decode_records(expected)
        if compression is Compression.NONE:
            assert built == expected


def test_decode_record_fields_are_the_records_fields() -> None:
    batch = build_batch(
        [(None, b"a"), (b"k", None, [("h", b"1")]), (b"x" * 300, b"y" * 9000)],
        base_offset=40,
        base_timestamp_ms=1_000,
    )
    records = decode_records(batch)
    assert decode_record_fields(batch) == [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in records
    ]
    assert [r.offset for r in records] == [40, 41, 42]


def test_build_batch_rejects_five_tuples() -> None:
    with pytest.raises(TypeError):
        build_batch([(None, b"v", (), None, "extra")])  # type: ignore[list-item]


def test_is_transactional_batch_reads_the_attribute_alone() -> None:
    transactional = build_batch(
        [(None, b"x", ())], producer_id=1, producer_epoch=0, base_sequence=0,
        is_transactional=True,
    )  # fmt: skip
    assert is_transactional_batch(transactional)
    assert parse_batch_header(transactional).is_transactional
    idempotent = build_batch([(None, b"x", ())], producer_id=1, producer_epoch=0, base_sequence=0)
    assert not is_transactional_batch(idempotent)
    assert not is_transactional_batch(build_batch([(None, b"x", ())]))
    assert not is_transactional_batch(transactional[:22]) and not is_transactional_batch(b"")
