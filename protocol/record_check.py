"""Checking a client's records before they are stored: every record of a batch must decode (as
``decode_record_fields`` decodes it) and the records' offset deltas must run 0, 1, 2, ..., as
Kafka's ``LogValidator`` requires. A record nobody can decode must never reach the log: every
consumer would fail on it.

Decoding costs about 2 us per record in Python, the largest per-record cost of a produce. Many
producers send runs of records laid out alike (fixed-size readings, benchmarks): the same
lengths, no headers, timestamp deltas of one byte (a batch lingers well under 64 ms), only the
offset delta counting up. ``check_records`` proves such a run valid column by column: for a run
of k records of ``stride`` bytes each from ``pos``, ``data[pos + i : end : stride]`` is the i-th
byte of every record, so a handful of slices and comparisons (C loops inside ``bytes``) check
what a Python loop would check record by record:

- the bytes of the length, key-length and value-length varints and the header count (0) equal
  the first record's, so every record has the first record's field sizes and ends where its
  length says;
- every timestamp-delta byte is below 0x80 (a one-byte varint);
- the offset-delta column is the zigzag encoding of the records' indexes (one byte below index
  64, two bytes up to 8,192).

The first record of a run is parsed field by field to find its layout; the run then extends as
far as the columns agree. What the columns cannot prove (headers, a long varint, records of
varying length, a run shorter than ``MIN_RUN`` records) is walked record by record with the
decoder's checks but without building keys, values or records (``records_walk_valid``: about
three quarters of the decoder's instructions). Both fast paths only ever say "valid", never
"invalid": a batch they do not accept is decoded, and the decoder's error is the answer, as
before. Instructions per 100-record batch (callgrind): alike records 0.16M against 1.16M
decoded, varying lengths 1.12M against 1.52M, a header on each record 1.98M against 2.42M.
"""

from __future__ import annotations

from typing import Final

from flux.protocol.errors import CorruptRecordError
from flux.protocol.records import (
    VARINT_MAX_SHIFT,
    VARLONG_MAX_SHIFT,
    BatchHeader,
    Buffer,
    decode_record_data,
    read_varint,
    record_bytes,
)

__all__ = ["MIN_RUN", "check_records", "records_walk_valid", "runs_proven_alike"]

#: A run that ends, its records disagreeing, before this many records sends the batch to the
#: walk, so a batch of varying records costs at most a few column checks more than walking it;
#: batches of fewer records are walked at once (cheaper than finding a layout).
MIN_RUN: Final = 8

#: Offset deltas 0..63 as one-byte zigzag varints (2 * index).
_DELTA_1: Final = bytes(range(0, 128, 2))
#: Offset deltas 64..8191 as two-byte zigzag varints: their low and high bytes.
_DELTA_2_FIRST: Final = 64
_DELTA_2_END: Final = 8192
_DELTA_2_LOW: Final = bytes(((2 * i) & 0x7F) | 0x80 for i in range(_DELTA_2_FIRST, _DELTA_2_END))
_DELTA_2_HIGH: Final = bytes((2 * i) >> 7 for i in range(_DELTA_2_FIRST, _DELTA_2_END))
#: Maps bytes below 0x80 to 0 and the others to 1 (for ``bytes.translate``).
_HIGH_BIT: Final = bytes(0 if b < 0x80 else 1 for b in range(256))


def check_records(batch: Buffer) -> BatchHeader:
    """Raise ``CorruptRecordError`` unless every record of ``batch`` (exactly one batch)
    decodes and its offset delta is its index; return the batch's header. The CRC is not
    checked (the log checks it on append)."""
    header, data = record_bytes(batch, verify_crc=False)
    count = header.records_count
    if count >= 0 and (
        (count >= MIN_RUN and runs_proven_alike(data, count)) or records_walk_valid(data, count)
    ):
        return header
    # Something is wrong (or a varint too long for the walk): the decoder names it.
    fields = decode_record_data(header, data)
    base = header.base_offset
    for position, record in enumerate(fields):
        if record[0] != base + position:
            raise CorruptRecordError(f"record {position} has offset delta {record[0] - base}")
    return header


def runs_proven_alike(data: bytes, count: int) -> bool:
    """True when ``data`` is ``count`` valid records in runs of alike records, with offset
    deltas 0..count-1 (see the module docstring). False proves nothing: walk or decode them."""
    end = len(data)
    pos = 0
    index = 0
    while index < count:
        layout = _layout(data, pos, index)
        if layout is None:
            return False
        stride, fixed, timestamp_at, delta_at = layout
        limit = _DELTA_2_FIRST if index < _DELTA_2_FIRST else _DELTA_2_END
        k = min(count - index, limit - index, (end - pos) // stride)
        run_end = pos + k * stride
        proven = k
        for at in fixed:
            column = data[pos + at : run_end : stride]
            proven = min(proven, k - len(column.lstrip(column[:1])))
        high = data[pos + timestamp_at : run_end : stride].translate(_HIGH_BIT).find(1)
        if high >= 0:
            proven = min(proven, high)
        deltas = data[pos + delta_at : run_end : stride]
        if index < _DELTA_2_FIRST:
            proven = min(proven, _agree(deltas, _DELTA_1[index : index + k]))
        else:
            first = index - _DELTA_2_FIRST
            expected = slice(first, first + k)
            proven = min(
                proven,
                _agree(deltas, _DELTA_2_LOW[expected]),
                _agree(data[pos + delta_at + 1 : run_end : stride], _DELTA_2_HIGH[expected]),
            )
        if proven < k and proven < MIN_RUN:
            return False  # records of varying shape: walking them costs less
        pos += proven * stride
        index += proven
    return pos == end


def _agree(column: bytes, expected: bytes) -> int:
    """How many leading bytes of ``column`` equal ``expected``'s (both of one length)."""
    if column == expected:
        return len(column)
    differ = int.from_bytes(column, "little") ^ int.from_bytes(expected, "little")
    return ((differ & -differ).bit_length() - 1) // 8


def _layout(data: bytes, pos: int, index: int) -> tuple[int, list[int], int, int] | None:
    """The record at ``pos`` (the ``index``-th) parsed field by field, if it has a shape the
    column check covers: ``(stride, fixed, timestamp_at, delta_at)``, where ``stride`` is its
    size with its length varint, ``fixed`` the positions (from ``pos``) of the bytes every
    alike record repeats, ``timestamp_at`` its one-byte timestamp delta and ``delta_at`` its
    offset delta, which must be ``index``. None for any other shape."""
    fixed: list[int] = []
    try:
        length, at = _short_varint(data, pos, pos, fixed)
        if length is None or length < 0:
            return None
        record_end = at + length
        at += 1  # attributes: any byte
        if data[at] >= 0x80:
            return None  # a timestamp delta of more than one byte
        timestamp_at = at - pos
        at += 1
        delta_at = at - pos
        zigzag = 2 * index
        if index < _DELTA_2_FIRST:
            if data[at] != zigzag:
                return None
            at += 1
        elif index < _DELTA_2_END:
            if data[at] != (zigzag & 0x7F) | 0x80 or data[at + 1] != zigzag >> 7:
                return None
            at += 2
        else:
            return None
        for _ in ("key", "value"):
            size, at = _short_varint(data, at, pos, fixed)
            if size is None or size < -1:
                return None
            at += max(size, 0)
        if data[at] != 0:
            return None  # headers: decoded record by record
        fixed.append(at - pos)
        at += 1
    except IndexError:
        return None
    if at != record_end:
        return None
    return at - pos, fixed, timestamp_at, delta_at


def _short_varint(data: bytes, at: int, pos: int, fixed: list[int]) -> tuple[int | None, int]:
    """A zigzag varint of one or two bytes at ``at``, and the position after it; its bytes'
    positions (from ``pos``) join ``fixed``. (None, at) for a longer one."""
    byte = data[at]
    if byte < 0x80:
        fixed.append(at - pos)
        return (byte >> 1) ^ -(byte & 1), at + 1
    second = data[at + 1]
    if second >= 0x80:
        return None, at
    fixed.extend((at - pos, at + 1 - pos))
    raw = (byte & 0x7F) | (second << 7)
    return (raw >> 1) ^ -(raw & 1), at + 2


def records_walk_valid(data: bytes, count: int) -> bool:
    """True when ``data`` is ``count`` records that decode, with offset deltas 0..count-1:
    the decoder's checks, field by field, without building keys, values or records (about half
    its cost). False when any check fails or a read runs past the end: decode to learn why."""
    read = read_varint
    varint = VARINT_MAX_SHIFT
    end = len(data)
    pos = 0
    try:
        for index in range(count):
            byte = data[pos]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                length, pos = read(data, pos, varint)
            record_end = pos + length
            if length < 0 or record_end > end:
                return False
            pos += 1  # attributes
            if data[pos] < 0x80:  # timestamp delta
                pos += 1
            else:
                pos = read(data, pos, VARLONG_MAX_SHIFT)[1]
            byte = data[pos]
            if byte < 0x80:
                if byte != 2 * index:  # zigzag of the index
                    return False
                pos += 1
            else:
                delta, pos = read(data, pos, varint)
                if delta != index:
                    return False
            for _field in ("key", "value"):  # -1: null
                byte = data[pos]
                if byte < 0x80:
                    size = (byte >> 1) ^ -(byte & 1)
                    pos += 1
                elif data[pos + 1] < 0x80:
                    raw = (byte & 0x7F) | (data[pos + 1] << 7)
                    size = (raw >> 1) ^ -(raw & 1)
                    pos += 2
                else:
                    size, pos = read(data, pos, varint)
                if size >= 0:
                    pos += size
                    if pos > record_end:
                        return False
                elif size != -1:
                    return False
            if data[pos] == 0:
                pos += 1
            else:
                pos = _headers_end(data, pos, record_end)
                if pos < 0:
                    return False
            if pos != record_end:
                return False
    except (IndexError, CorruptRecordError):
        return False
    return pos == end


def _headers_end(data: bytes, pos: int, record_end: int) -> int:
    """Where a record's headers at ``pos`` end, or -1 when the decoder would refuse them (a
    negative count, a null or non-UTF-8 key, a field past the record's end)."""
    count, pos = read_varint(data, pos, VARINT_MAX_SHIFT)
    if count < 0:
        return -1
    for _ in range(count):
        key_size, pos = read_varint(data, pos, VARINT_MAX_SHIFT)
        if key_size < 0 or pos + key_size > record_end:
            return -1
        try:
            data[pos : pos + key_size].decode("utf-8")
        except UnicodeDecodeError:
            return -1
        pos += key_size
        value_size, pos = read_varint(data, pos, VARINT_MAX_SHIFT)
        if value_size >= 0:
            pos += value_size
            if pos > record_end:
                return -1
        elif value_size != -1:
            return -1
    return pos
