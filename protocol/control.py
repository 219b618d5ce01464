"""Control records: the transaction markers a transaction coordinator writes.

A control batch (attributes bit 5, always transactional, as Kafka writes it) holds one record
whose key is ``version int16 (0), type int16`` (Kafka's ``ControlRecordType``: 0 ABORT,
1 COMMIT) and, for those two, whose value is Kafka's ``EndTxnMarker``: ``version int16 (0),
coordinator epoch int32``. Readers skip control batches; the broker reads the type to end the
producer's transaction in its producer state and, for an abort, index it, and the coordinator
epoch to fence a coordinator older than the last one that ended a transaction of the producer.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from flux.protocol.errors import CorruptRecordError
from flux.protocol.records import build_batch, decode_record_fields

__all__ = [
    "ABORT",
    "COMMIT",
    "ControlMarker",
    "control_marker",
    "control_type",
    "end_txn_marker_batch",
]

ABORT: Final = 0
COMMIT: Final = 1
_KEY: Final = struct.Struct(">hh")
_MARKER_VALUE: Final = struct.Struct(">hi")


def end_txn_marker_batch(
    producer_id: int,
    producer_epoch: int,
    *,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int | None = None,
) -> bytes:
    """One control batch holding the commit or abort marker of ``producer_id``'s transaction
    (offsets from 0: the log assigns them)."""
    return build_batch(
        [
            (
                _KEY.pack(0, COMMIT if commit else ABORT),
                _MARKER_VALUE.pack(0, coordinator_epoch),
                (),
                timestamp_ms,
            )
        ],
        base_timestamp_ms=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


class ControlMarker(NamedTuple):
    """What a control batch says: its record type, and for a commit or abort marker the epoch
    of the coordinator that wrote it (-1 for another type, or a marker value too short)."""

    kind: int
    coordinator_epoch: int


def control_marker(batch: bytes | memoryview) -> ControlMarker | None:
    """The control record of one control batch; None when the batch holds no record. Raises
    ``CorruptRecordError`` for a batch that cannot be decoded or a record without a key."""
    records = decode_record_fields(batch, verify_crc=False)
    if not records:
        return None
    key, value = records[0][2], records[0][3]
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError("a control record without a version and type key")
    version, kind = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key version {version}")
    epoch = -1
    if kind in (ABORT, COMMIT) and value is not None and len(value) >= _MARKER_VALUE.size:
        _value_version, epoch = _MARKER_VALUE.unpack_from(value)
    return ControlMarker(kind, epoch)


def control_type(batch: bytes | memoryview) -> int | None:
    """The control record type of one control batch (``ABORT``, ``COMMIT`` or another
    type); None when its first record has no readable key. Raises ``CorruptRecordError`` for a
    batch that cannot be decoded."""
    marker = control_marker(batch)
    return None if marker is None else marker.kind
