"""The record codec the storage cleaner needs, over ``flux.protocol.records``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flux.protocol.records import filter_batch, record_keys

__all__ = ["RECORD_CODEC", "RecordsCodec"]


class RecordsCodec:
    """``flux.storage.compaction.RecordCodec`` for Kafka record batches v2."""

    def record_keys(self, batch: bytes) -> tuple[Any, bytes, list[Any]]:
        return record_keys(batch)

    def filter_batch(self, batch: bytes, header: Any, data: bytes, kept: Sequence[Any]) -> bytes:
        return filter_batch(batch, header, data, kept)


RECORD_CODEC = RecordsCodec()
