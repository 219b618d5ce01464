"""The values ``flux.sdk`` users hand in and get back: ``Message`` to send, ``RecordMetadata``
for a delivered record, ``ConsumedRecord`` for a read one, ``TopicPartition``,
``ConsumerGroupMetadata`` (a consumer's group membership, for transactional offset commits);
and the decoding of a partition's Fetch answer (``decode_fetched``), with Kafka's
``read_committed`` filter of aborted transactions (``committed_batches``).

Keys, values and header values may be given as ``bytes`` or ``str`` (encoded as UTF-8); they
come back as ``bytes``. ``Message.id`` becomes the ``flux-msg-id`` header, by which brokers
deduplicate messages within ``dedup.window.ms``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from flux.protocol.control import ABORT, control_type
from flux.protocol.errors import CorruptRecordError
from flux.protocol.records import BatchHeader, decode_record_fields, iter_batches

from .errors import ConfigurationError, FluxProtocolError

__all__ = [
    "MESSAGE_ID_HEADER",
    "AbortedTransaction",
    "ConsumedRecord",
    "ConsumerGroupMetadata",
    "HeadersInput",
    "Message",
    "MessageInput",
    "RecordMetadata",
    "TopicPartition",
    "as_message",
    "committed_batches",
    "decode_fetched",
]

#: The record header that carries a producer-chosen message id (DESIGN.md §7).
MESSAGE_ID_HEADER = "flux-msg-id"

HeadersInput = Mapping[str, bytes | str | None] | Sequence[tuple[str, bytes | str | None]]


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class Message:
    """A record to send. ``partition`` None: by the key's murmur2 hash, or (no key) the
    producer's sticky partition; ``id``: deduplication id (the ``flux-msg-id`` header)."""

    value: bytes | str | None = None
    key: bytes | str | None = None
    headers: HeadersInput | None = None
    partition: int | None = None
    timestamp_ms: int | None = None
    id: bytes | str | None = None


#: What ``Producer.send`` accepts per message: a ``Message``, a value (bytes, str, None), or a
#: dict with ``Message``'s field names.
MessageInput = Message | bytes | str | None | Mapping[str, Any]


def as_message(item: MessageInput) -> Message:
    if isinstance(item, Message):
        return item
    if item is None or isinstance(item, (bytes, bytearray, memoryview, str)):
        return Message(value=item if not isinstance(item, (bytearray, memoryview)) else bytes(item))
    if isinstance(item, Mapping):
        unknown = set(item) - set(Message.__dataclass_fields__)
        if unknown:
            raise ConfigurationError(f"unknown message fields {sorted(unknown)}")
        return Message(**item)
    raise ConfigurationError(
        f"a message is a Message, bytes, str, None or a dict, got {type(item).__name__}"
    )


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """A consumer's group membership as a transactional producer's
    ``send_offsets_to_transaction`` takes it (``consumer.group_metadata()``): with the
    generation and member id the group coordinator can refuse a zombie member's offsets."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a sent record landed; ``offset`` is -1 with ``acks=0`` (nobody answers)."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]

    @property
    def message_id(self) -> bytes | None:
        """The ``flux-msg-id`` header, if the producer set one."""
        for name, value in self.headers:
            if name == MESSAGE_ID_HEADER:
                return value
        return None


def as_bytes(data: bytes | str | None, *, what: str = "value") -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise ConfigurationError(f"{what} must be bytes, str or None, got {type(data).__name__}")


def encode_headers(
    headers: HeadersInput | None, message_id: bytes | str | None = None
) -> tuple[tuple[str, bytes | None], ...]:
    items: list[tuple[str, bytes | None]] = []
    if headers:
        pairs = headers.items() if isinstance(headers, Mapping) else headers
        items = [(str(name), as_bytes(value, what="a header value")) for name, value in pairs]
    if message_id is not None:
        items.append((MESSAGE_ID_HEADER, as_bytes(message_id, what="id")))
    return tuple(items)


# ``ConsumedRecord`` is frozen, so its generated ``__init__`` sets each field through
# ``object.__setattr__``; setting the slots directly builds the same object in half the time,
# which matters when a poll returns hundreds of thousands of records.
_new_object = object.__new__
_set_topic = ConsumedRecord.topic.__set__  # type: ignore[attr-defined]
_set_partition = ConsumedRecord.partition.__set__  # type: ignore[attr-defined]
_set_offset = ConsumedRecord.offset.__set__  # type: ignore[attr-defined]
_set_timestamp = ConsumedRecord.timestamp.__set__  # type: ignore[attr-defined]
_set_key = ConsumedRecord.key.__set__  # type: ignore[attr-defined]
_set_value = ConsumedRecord.value.__set__  # type: ignore[attr-defined]
_set_headers = ConsumedRecord.headers.__set__  # type: ignore[attr-defined]


def fetched_end(records_data: bytes | None) -> int:
    """The offset after the last whole batch of a Fetch answer (-1: none). A consumer moves
    there once it has handed out the records: a compacted batch keeps its offset span when
    records leave it, and an emptied one holds none, so the last record returned may lie
    well before the batch's end (Kafka's consumers move by the batch, too)."""
    end = -1
    try:
        for header, _batch in iter_batches(records_data or b""):
            end = header.next_offset
    except CorruptRecordError:
        return -1
    return end


class AbortedTransaction(NamedTuple):
    """An entry of a read_committed Fetch answer's ``aborted_transactions``: the producer's
    transaction that starts at ``first_offset`` was aborted (its abort marker follows)."""

    producer_id: int
    first_offset: int


def committed_batches(
    batches: Iterable[tuple[BatchHeader, memoryview]],
    aborted: Iterable[AbortedTransaction],
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """The data batches a ``read_committed`` reader hands out, in order: control batches and
    the batches of aborted transactions are left out (Kafka's ``CompletedFetch``).

    ``aborted`` lists the aborted transactions the batches overlap (any order). A producer's
    transaction becomes aborted where its ``first_offset`` is reached (at or before a batch's
    last offset); from there its transactional batches are dropped until its abort marker.
    Non-transactional batches of the same producer are kept. ``CorruptRecordError`` for a
    control batch without a readable type."""
    pending = [(txn.first_offset, txn.producer_id) for txn in aborted]
    heapq.heapify(pending)
    aborting: set[int] = set()
    for header, batch in batches:
        if header.producer_id >= 0:
            while pending and pending[0][0] <= header.last_offset:
                aborting.add(heapq.heappop(pending)[1])
            if header.is_control:
                if control_type(batch) == ABORT:
                    aborting.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborting:
                continue
        if not header.is_control:
            yield header, batch


def decode_fetched(
    records_data: bytes | None,
    topic: str,
    partition: int,
    offset: int,
    aborted: Iterable[AbortedTransaction] | None = None,
) -> list[ConsumedRecord]:
    """The records of one partition's Fetch answer from ``offset`` on (control batches and
    records below ``offset`` skipped). ``aborted``: read_committed, the answer's aborted
    transactions, whose records are dropped too (``committed_batches``).
    ``FluxProtocolError`` for a corrupt batch."""
    records: list[ConsumedRecord] = []
    append = records.append
    try:
        batches: Iterable[tuple[BatchHeader, memoryview]] = iter_batches(records_data or b"")
        if aborted is not None:
            batches = committed_batches(batches, aborted)
        for header, batch in batches:
            if header.is_control or header.next_offset <= offset:
                continue
            for record_offset, timestamp, key, value, headers in decode_record_fields(batch):
                if record_offset >= offset:
                    record = _new_object(ConsumedRecord)
                    _set_topic(record, topic)
                    _set_partition(record, partition)
                    _set_offset(record, record_offset)
                    _set_timestamp(record, timestamp)
                    _set_key(record, key)
                    _set_value(record, value)
                    _set_headers(record, headers)
                    append(record)
    except CorruptRecordError as error:
        raise FluxProtocolError(f"{topic}-{partition}: corrupt record batch: {error}") from error
    return records
