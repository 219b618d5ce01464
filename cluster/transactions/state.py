"""The state of one transactional id, and its records in ``__transaction_state``.

Kafka's ``TransactionMetadata`` and ``TransactionState``: a transactional id maps to a producer
id and epoch and, while a transaction runs, to the partitions it wrote to. The states and their
moves (``TRANSITIONS``):

    EMPTY ──AddPartitions──> ONGOING ──EndTxn(commit)──> PREPARE_COMMIT ──markers──> COMPLETE_COMMIT
      ^                         │  └──EndTxn(abort), timeout, re-init──> PREPARE_ABORT ──> COMPLETE_ABORT
      └──InitProducerId──── COMPLETE_* ──AddPartitions──> ONGOING

A ``PREPARE_*`` state is the decision: once it is written (acks=all) the transaction *will*
end that way, whoever coordinates it next (a coordinator that takes over finishes writing
the markers). ``COMPLETE_*`` is written after every partition has its marker.

Records: key ``b"\\x00\\x00" + transactional id`` (UTF-8; the prefix is a key version, as
Kafka's keys carry one), value a JSON object of ``TxnMetadata`` (version 0). The topic is
compacted: the newest record of an id is its state. Pure: no I/O.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

__all__ = [
    "TRANSITIONS",
    "TxnMetadata",
    "TxnState",
    "decode_record",
    "encode_record",
    "partition_for_txn",
    "record_key",
]

_KEY_PREFIX = b"\x00\x00"


class TxnState(StrEnum):
    """Kafka's transaction states, named as DescribeTransactions reports them."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


_S = TxnState
#: The states each state may move to (Kafka's ``validPreviousStates``, turned around).
TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.ONGOING, _S.PREPARE_ABORT, _S.DEAD}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.PREPARE_COMMIT, _S.PREPARE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.COMPLETE_COMMIT}),
    _S.PREPARE_ABORT: frozenset({_S.COMPLETE_ABORT}),
    _S.COMPLETE_COMMIT: frozenset({_S.EMPTY, _S.ONGOING, _S.PREPARE_ABORT, _S.DEAD}),
    _S.COMPLETE_ABORT: frozenset({_S.EMPTY, _S.ONGOING, _S.PREPARE_ABORT, _S.DEAD}),
    _S.DEAD: frozenset(),
}


@dataclass(frozen=True)
class TxnMetadata:
    """One transactional id's state, as written to ``__transaction_state``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    #: ``(topic, partition)`` of the running (or ending) transaction, sorted.
    partitions: tuple[tuple[str, int], ...] = ()
    #: The producer id and epoch before the last bump (KIP-360: a producer that lost its
    #: answer may re-initialise with the id and epoch it had).
    last_producer_id: int = -1
    last_producer_epoch: int = -1
    start_ms: int = -1
    update_ms: int = -1
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def moved(self, state: TxnState, **changes: Any) -> TxnMetadata:
        """This metadata in ``state`` (which must be a legal move) with ``changes``."""
        if state not in TRANSITIONS[self.state]:
            raise ValueError(f"{self.transactional_id}: {self.state.value} -> {state.value}")
        return replace(self, state=state, **changes)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 0,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "last_producer_id": self.last_producer_id,
            "last_producer_epoch": self.last_producer_epoch,
            "timeout_ms": self.timeout_ms,
            "state": self.state.value,
            "partitions": [[topic, index] for topic, index in self.partitions],
            "start_ms": self.start_ms,
            "update_ms": self.update_ms,
        }

    @classmethod
    def from_json(cls, transactional_id: str, document: dict[str, Any]) -> TxnMetadata:
        if document.get("version") != 0:
            raise ValueError(f"unknown transaction state version {document.get('version')!r}")
        return cls(
            transactional_id=transactional_id,
            producer_id=int(document["producer_id"]),
            producer_epoch=int(document["producer_epoch"]),
            last_producer_id=int(document["last_producer_id"]),
            last_producer_epoch=int(document["last_producer_epoch"]),
            timeout_ms=int(document["timeout_ms"]),
            state=TxnState(document["state"]),
            partitions=tuple(sorted((str(t), int(p)) for t, p in document["partitions"])),
            start_ms=int(document["start_ms"]),
            update_ms=int(document["update_ms"]),
        )


def partition_for_txn(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition of ``transactional_id`` (a stable hash, like the
    groups' ``partition_for_group``)."""
    return zlib.crc32(transactional_id.encode("utf-8")) % partitions


def encode_record(metadata: TxnMetadata) -> tuple[bytes, bytes]:
    key = record_key(metadata.transactional_id)
    return key, json.dumps(metadata.to_json(), separators=(",", ":")).encode()


def record_key(transactional_id: str) -> bytes:
    """The key of ``transactional_id``'s records (a tombstone, value None, removes the id)."""
    return _KEY_PREFIX + transactional_id.encode("utf-8")


def decode_record(key: bytes, value: bytes | None) -> tuple[str, TxnMetadata | None]:
    """``(transactional id, metadata)``; None for a tombstone. Raises ``ValueError`` for a
    record that is not a transaction state record."""
    if not key.startswith(_KEY_PREFIX):
        raise ValueError(f"unknown transaction state key {key[:16]!r}")
    transactional_id = key[len(_KEY_PREFIX) :].decode("utf-8")
    if value is None:
        return transactional_id, None
    return transactional_id, TxnMetadata.from_json(transactional_id, json.loads(value))
