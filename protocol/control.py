"""Control records: the transaction markers a transaction coordinator writes.

A control batch (attributes bit 5, always transactional, as Kafka writes it) holds one record
whose key is ``version int16 (0), type int16`` (Kafka's ``ControlRecordType``: 0 ABORT,
1 COMMIT) and, for those two, whose value is Kafka's ``EndTxnMarker``: ``version int16 (0),
coordinator epoch int32``. Readers skip control batches; the broker reads the type to end the
producer's transaction in its producer state and, for an abort, index it.
"""

from __future__ import annotations

import struct
from typing import Final

from flux.protocol.errors import CorruptRecordError
from flux.protocol.records import build_batch, decode_record_fields

__all__ = ["ABORT", "COMMIT", "control_type", "end_txn_marker_batch"]

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


def control_type(batch: bytes | memoryview) -> int | None:
    """The control record type of one control batch (``ABORT``, ``COMMIT`` or another
    type); None when its first record has no readable key. Raises ``CorruptRecordError`` for a
    batch that cannot be decoded."""
    records = decode_record_fields(batch, verify_crc=False)
    if not records:
        return None
    key = records[0][2]
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError("a control record without a version and type key")
    version, kind = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key version {version}")
    return kind
