"""The pure parts of the transactional producer: its state machine (``TransactionManager``),
the request bodies and answer readers of the transaction APIs, the classification of their
errors, and the normalization of ``send_offsets_to_transaction``'s arguments.

No I/O: ``flux.sdk.producer.AsyncProducer`` sends the requests and reports the outcomes here,
so the rules below are unit-tested with literal inputs.

**States** (Kafka's ``TransactionManager.State``)::

    UNINITIALIZED --init_transactions--> READY --begin_transaction--> IN_TRANSACTION
    IN_TRANSACTION --commit_transaction--> COMMITTING --EndTxn(commit) ok--> READY
    IN_TRANSACTION | ABORTABLE_ERROR --abort_transaction--> ABORTING --EndTxn(abort) ok--> READY
    IN_TRANSACTION | COMMITTING --a record or a partition failed--> ABORTABLE_ERROR
    any state --fenced, or an error nothing can repair--> FATAL_ERROR (final)

A commit or abort whose outcome is unknown (the EndTxn retries ran out) stays in COMMITTING /
ABORTING: the same call may be made again (EndTxn is idempotent at the coordinator), the other
one may not, as in Kafka's Java client.

**Errors.** ``PRODUCER_FENCED`` and ``INVALID_PRODUCER_EPOCH`` (``FENCED_CODES``) raise
``ProducerFencedError``; they and ``FATAL_CODES`` (an unauthorized transactional id, a
transaction in a state the coordinator did not expect, an invalid timeout) make the producer
unusable: every later call raises the error again. ``RETRY_CODES`` are retried with backoff
(the coordinator codes after looking the coordinator up again). Anything else that fails a
transaction's record, partition or offsets makes the transaction abortable: it must be
aborted, and the producer then goes on.

Thread-safety: none; one ``AsyncProducer`` (on one event loop) owns a ``TransactionManager``.
Invariants: ``partitions`` is empty and ``started`` false in UNINITIALIZED and READY;
``fatal_error`` is set exactly in FATAL_ERROR; ``abortable_error`` is set in ABORTABLE_ERROR;
the producer id is known (>= 0) in every phase but UNINITIALIZED (and FATAL_ERROR reached
from it); the phase changes only along the transitions above (asserted).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any

from flux.protocol.errors import ErrorCode

from .errors import (
    ConfigurationError,
    FluxError,
    KafkaError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionAbortRequiredError,
    TransactionStateError,
    error_for,
)
from .messages import ConsumerGroupMetadata

__all__ = [
    "FATAL_CODES",
    "FENCED_CODES",
    "RETRY_CODES",
    "Offsets",
    "TransactionManager",
    "TxnPhase",
    "add_offsets_body",
    "add_partitions_body",
    "as_fenced",
    "as_group_metadata",
    "end_txn_body",
    "init_producer_id_body",
    "is_fatal",
    "normalize_offsets",
    "read_add_partitions",
    "read_error_code",
    "read_init_producer_id",
    "read_txn_offset_commit",
    "txn_offset_commit_body",
]

#: (topic, partition) -> the offset of the next record to consume.
Offsets = dict[tuple[str, int], int]

#: A newer producer of the same transactional id (or a coordinator timeout) bumped the epoch.
FENCED_CODES = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})
#: Errors that leave the producer unusable (Kafka's fatal errors), besides being fenced.
FATAL_CODES = frozenset(
    {
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_TXN_STATE,
        ErrorCode.INVALID_TRANSACTION_TIMEOUT,
        ErrorCode.TRANSACTION_COORDINATOR_FENCED,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    }
)
#: Retried with backoff by every transaction request (the coordinator codes also make the
#: client look the coordinator up again: ``ClusterClient.call_coordinator``).
RETRY_CODES = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)


class TxnPhase(Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


_TRANSITIONS: dict[TxnPhase, frozenset[TxnPhase]] = {
    TxnPhase.UNINITIALIZED: frozenset({TxnPhase.READY}),
    TxnPhase.READY: frozenset({TxnPhase.IN_TRANSACTION}),
    TxnPhase.IN_TRANSACTION: frozenset(
        {TxnPhase.COMMITTING, TxnPhase.ABORTING, TxnPhase.ABORTABLE_ERROR}
    ),
    TxnPhase.COMMITTING: frozenset({TxnPhase.COMMITTING, TxnPhase.READY, TxnPhase.ABORTABLE_ERROR}),
    TxnPhase.ABORTING: frozenset({TxnPhase.ABORTING, TxnPhase.READY}),
    TxnPhase.ABORTABLE_ERROR: frozenset({TxnPhase.ABORTING, TxnPhase.ABORTABLE_ERROR}),
    TxnPhase.FATAL_ERROR: frozenset(),
}
#: Phases in which the coordinator may hold a transaction of this producer.
_TRANSACTION_PHASES = frozenset(
    {TxnPhase.IN_TRANSACTION, TxnPhase.COMMITTING, TxnPhase.ABORTING, TxnPhase.ABORTABLE_ERROR}
)


def is_fatal(error: BaseException) -> bool:
    """Whether ``error`` leaves a transactional producer unusable."""
    return isinstance(error, ProducerFencedError) or (
        isinstance(error, KafkaError) and (error.code in FATAL_CODES or error.code in FENCED_CODES)
    )


def as_fenced(error: BaseException) -> BaseException:
    """``error`` as a ``ProducerFencedError`` when its code says the producer was fenced."""
    if (
        isinstance(error, KafkaError)
        and error.code in FENCED_CODES
        and not isinstance(error, ProducerFencedError)
    ):
        fenced = ProducerFencedError(error.code, error.message)
        fenced.__cause__ = error
        return fenced
    return error


class TransactionManager:
    """The transaction state of one transactional producer; see the module docstring.

    ``partitions`` are the partitions added to the running transaction at the coordinator;
    ``started`` says whether the coordinator may hold a transaction to end (a partition or
    the offsets of a group were added); ``epoch_bump_needed`` whether the producer must bump
    its epoch after the abort (a record's outcome is unknown, so its sequence numbers are).
    """

    def __init__(self, transactional_id: str, timeout_ms: int) -> None:
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.phase = TxnPhase.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        self.partitions: set[tuple[str, int]] = set()
        self.started = False
        self.epoch_bump_needed = False
        self.abortable_error: BaseException | None = None
        self.fatal_error: BaseException | None = None

    def __repr__(self) -> str:
        return (
            f"TransactionManager({self.transactional_id!r}, {self.phase.name}, "
            f"producer {self.producer_id}/{self.producer_epoch})"
        )

    # -- checks: each raises what the call must raise in the current phase ------------------

    def check_init(self) -> None:
        self._raise_if_fatal()
        if self.phase is not TxnPhase.UNINITIALIZED:
            raise TransactionStateError(
                f"init_transactions: the producer is already initialized ({self.phase.value})"
            )

    def check_begin(self) -> None:
        self._raise_if_fatal()
        self._raise_if_uninitialized("begin_transaction")
        if self.phase is not TxnPhase.READY:
            raise TransactionStateError(
                f"begin_transaction: a transaction is already running ({self.phase.value})"
            )

    def check_send(self) -> None:
        """A record may join the transaction now (``produce``, ``send``): only between
        ``begin_transaction`` and ``commit_transaction`` / ``abort_transaction``. (Its batch
        may still be sent while the commit flushes: ``may_send_batch``.)"""
        if self.phase is TxnPhase.IN_TRANSACTION:
            return
        self._raise_if_fatal()
        self._raise_if_abortable("produce")
        self._raise_if_uninitialized("produce")
        raise TransactionStateError(
            f"produce outside a transaction ({self.phase.value}): call begin_transaction() first"
        )

    def check_offsets(self) -> None:
        self._raise_if_fatal()
        self._raise_if_abortable("send_offsets_to_transaction")
        self._raise_if_uninitialized("send_offsets_to_transaction")
        if self.phase is not TxnPhase.IN_TRANSACTION:
            raise TransactionStateError(
                f"send_offsets_to_transaction outside a transaction ({self.phase.value})"
            )

    def may_send_batch(self) -> bool:
        return self.phase in (TxnPhase.IN_TRANSACTION, TxnPhase.COMMITTING)

    def raise_for_batch(self) -> None:
        """What a batch that may not be sent now fails with (``may_send_batch`` is False)."""
        self._raise_if_fatal()
        self._raise_if_abortable("sending a batch")
        if self.phase is TxnPhase.ABORTING:
            raise TransactionAbortedError("the transaction was aborted before delivery")
        raise TransactionStateError(f"a batch of no running transaction ({self.phase.value})")

    def _raise_if_fatal(self) -> None:
        if self.fatal_error is not None:
            raise _again(self.fatal_error)

    def _raise_if_abortable(self, what: str) -> None:
        if self.phase is TxnPhase.ABORTABLE_ERROR:
            raise TransactionAbortRequiredError(
                f"{what}: the transaction failed ({self.abortable_error!r}); "
                "call abort_transaction()"
            ) from self.abortable_error

    def _raise_if_uninitialized(self, what: str) -> None:
        if self.phase is TxnPhase.UNINITIALIZED:
            raise TransactionStateError(f"{what}: call init_transactions() first")

    # -- transitions -----------------------------------------------------------------------

    def _move(self, phase: TxnPhase) -> None:
        assert phase in _TRANSITIONS[self.phase], f"{self.phase.name} -> {phase.name}"
        self.phase = phase

    def initialized(self, producer_id: int, producer_epoch: int) -> None:
        assert producer_id >= 0 and producer_epoch >= 0, (producer_id, producer_epoch)
        self._move(TxnPhase.READY)
        self.producer_id, self.producer_epoch = producer_id, producer_epoch

    def begin(self) -> None:
        self.check_begin()
        self._move(TxnPhase.IN_TRANSACTION)
        assert not self.partitions and not self.started

    def begin_commit(self) -> None:
        """``commit_transaction`` starts (or is called again after an unknown outcome)."""
        self._raise_if_fatal()
        self._raise_if_abortable("commit_transaction")
        self._raise_if_uninitialized("commit_transaction")
        if self.phase is TxnPhase.ABORTING:
            raise TransactionStateError(
                "commit_transaction: the previous abort_transaction did not complete; "
                "call abort_transaction() again"
            )
        if self.phase not in (TxnPhase.IN_TRANSACTION, TxnPhase.COMMITTING):
            raise TransactionStateError(
                f"commit_transaction: no transaction is running ({self.phase.value})"
            )
        self._move(TxnPhase.COMMITTING)

    def begin_abort(self) -> None:
        """``abort_transaction`` starts (or is called again after an unknown outcome)."""
        self._raise_if_fatal()
        self._raise_if_uninitialized("abort_transaction")
        if self.phase is TxnPhase.COMMITTING:
            raise TransactionStateError(
                "abort_transaction: the previous commit_transaction did not complete; "
                "call commit_transaction() again"
            )
        if self.phase not in (
            TxnPhase.IN_TRANSACTION,
            TxnPhase.ABORTABLE_ERROR,
            TxnPhase.ABORTING,
        ):
            raise TransactionStateError(
                f"abort_transaction: no transaction is running ({self.phase.value})"
            )
        self._move(TxnPhase.ABORTING)

    def added(self, partitions: Iterable[tuple[str, int]]) -> None:
        """AddPartitionsToTxn succeeded for ``partitions``."""
        assert self.phase in _TRANSACTION_PHASES, self.phase
        self.partitions.update(partitions)
        self.started = True

    def offsets_added(self) -> None:
        """AddOffsetsToTxn succeeded: the group's offsets partition is in the transaction."""
        assert self.phase in _TRANSACTION_PHASES, self.phase
        self.started = True

    def completed(self) -> None:
        """EndTxn succeeded (or there was nothing to end): ready for the next transaction."""
        assert self.phase in (TxnPhase.COMMITTING, TxnPhase.ABORTING), self.phase
        self._move(TxnPhase.READY)
        self.partitions.clear()
        self.started = False
        self.abortable_error = None

    def bumped(self, producer_id: int, producer_epoch: int) -> None:
        """InitProducerId gave the producer a new epoch (after an abort): sequences restart."""
        assert self.phase is TxnPhase.ABORTING, self.phase
        assert (producer_id, producer_epoch) != (self.producer_id, self.producer_epoch)
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.epoch_bump_needed = False

    def fail(self, error: BaseException, *, unknown_outcome: bool = False) -> BaseException:
        """A request of the transaction failed with ``error``: fatal errors end the producer,
        any other one makes the running transaction abortable. ``unknown_outcome``: the
        broker may have applied the request (a record written, a partition added), so the
        producer bumps its epoch after the abort. Returns the error to raise."""
        error = as_fenced(error)
        if is_fatal(error):
            self.fail_fatal(error)
            return error
        if unknown_outcome:
            self.epoch_bump_needed = True
        if self.phase in (TxnPhase.IN_TRANSACTION, TxnPhase.COMMITTING):
            self._move(TxnPhase.ABORTABLE_ERROR)
            self.abortable_error = error
        return error

    def fail_fatal(self, error: BaseException) -> None:
        if self.fatal_error is None:
            self.fatal_error = error
        self.phase = TxnPhase.FATAL_ERROR  # from any phase: nothing leaves it

    def abort_required(self, what: str) -> TransactionAbortRequiredError:
        """The error a call that made the transaction abortable raises (cause chained)."""
        assert self.abortable_error is not None
        error = TransactionAbortRequiredError(
            f"{what}: {self.abortable_error}; call abort_transaction()"
        )
        error.__cause__ = self.abortable_error
        return error


def _again(error: BaseException) -> BaseException:
    """A fresh copy of a fatal error to raise once more (one exception object raised from
    many calls would collect all their tracebacks)."""
    if isinstance(error, KafkaError):
        same = type(error)(error.code, error.message)
        same.__cause__ = error.__cause__
        return same
    wrapped = FluxError(str(error))
    wrapped.__cause__ = error
    return wrapped


# -- offsets and groups -----------------------------------------------------------------------


def normalize_offsets(offsets: Any) -> Offsets:
    """``send_offsets_to_transaction``'s offsets as ``{(topic, partition): offset}``.

    Accepted: a mapping of ``(topic, partition)`` (or a ``TopicPartition``) to the offset of
    the next record to consume, or an iterable of objects with ``topic``, ``partition`` and
    ``offset`` attributes (confluent-kafka's ``TopicPartition``) or of ``(topic, partition,
    offset)`` tuples. ``ConfigurationError`` for anything else or a negative offset."""
    pairs: list[tuple[Any, Any, Any]] = []
    if isinstance(offsets, Mapping):
        for key, offset in offsets.items():
            if not isinstance(key, tuple) or len(key) != 2:
                raise ConfigurationError(f"offsets keys are (topic, partition), got {key!r}")
            pairs.append((key[0], key[1], offset))
    elif isinstance(offsets, Iterable) and not isinstance(offsets, (str, bytes)):
        for item in offsets:
            if all(hasattr(item, name) for name in ("topic", "partition", "offset")):
                pairs.append((item.topic, item.partition, item.offset))
            elif isinstance(item, tuple) and len(item) == 3:
                pairs.append(item)
            else:
                raise ConfigurationError(
                    "offsets items need topic, partition and offset (a (topic, partition, "
                    f"offset) tuple or a TopicPartition with an offset), got {item!r}"
                )
    else:
        raise ConfigurationError(
            f"offsets must be a dict or a list of TopicPartition, got {type(offsets).__name__}"
        )
    normalized: Offsets = {}
    for topic, partition, offset in pairs:
        if not isinstance(topic, str) or not topic:
            raise ConfigurationError(f"offsets: a topic must be a non-empty string, got {topic!r}")
        for name, value in (("partition", partition), ("offset", offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(
                    f"offsets: {name} of {topic!r} must be an int >= 0, got {value!r}"
                )
        normalized[(topic, partition)] = offset
    return normalized


def as_group_metadata(group: str | ConsumerGroupMetadata) -> ConsumerGroupMetadata:
    """A group id, or a consumer's ``group_metadata()`` (generation and member id too)."""
    if isinstance(group, ConsumerGroupMetadata):
        return group
    if isinstance(group, str) and group:
        return ConsumerGroupMetadata(group)
    raise ConfigurationError(
        f"group must be a group id or a consumer's group_metadata(), got {group!r}"
    )


# -- request bodies and answer readers --------------------------------------------------------


def init_producer_id_body(
    transactional_id: str, timeout_ms: int, *, producer_id: int = -1, producer_epoch: int = -1
) -> dict[str, Any]:
    """InitProducerId; with the current ``producer_id`` and ``producer_epoch`` (v3+) it
    bumps the epoch of this producer, and is refused (PRODUCER_FENCED) to a fenced one."""
    return {
        "transactional_id": transactional_id,
        "transaction_timeout_ms": timeout_ms,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
    }


def read_init_producer_id(response: dict[str, Any], version: int) -> tuple[int, int]:
    read_error_code(response, version, what="InitProducerId")
    return int(response["producer_id"]), int(response["producer_epoch"])


def add_partitions_body(
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[tuple[str, int]],
) -> dict[str, Any]:
    """AddPartitionsToTxn v0-3 (the client form)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(set(partitions)):
        by_topic.setdefault(topic, []).append(partition)
    return {
        "v3_and_below_transactional_id": transactional_id,
        "v3_and_below_producer_id": producer_id,
        "v3_and_below_producer_epoch": producer_epoch,
        "v3_and_below_topics": [
            {"name": topic, "partitions": indexes} for topic, indexes in by_topic.items()
        ],
    }


def _severity(code: ErrorCode) -> int:
    """Which of several per-partition errors to raise: the one that decides the outcome."""
    if code in FENCED_CODES:
        return 4
    if code in FATAL_CODES:
        return 3
    if code in RETRY_CODES or code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return 1
    if code is ErrorCode.OPERATION_NOT_ATTEMPTED:
        return 0  # only sent alongside the error that stopped the others
    return 2


def read_add_partitions(response: dict[str, Any], version: int) -> None:
    """Raise the typed error of the answer's most decisive partition error (the coordinator
    adds all of the request's partitions or none)."""
    worst: tuple[int, ErrorCode, str] | None = None
    for topic in response["results_by_topic_v3_and_below"]:
        for result in topic["results_by_partition"]:
            code = ErrorCode.from_code(result["partition_error_code"])
            if code is ErrorCode.NONE:
                continue
            where = f"{topic['name']}-{result['partition_index']}"
            if worst is None or _severity(code) > worst[0]:
                worst = (_severity(code), code, where)
    if worst is not None:
        _, code, where = worst
        raise error_for(code, f"AddPartitionsToTxn {where}: {code.message}")


def add_offsets_body(
    transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
) -> dict[str, Any]:
    return {
        "transactional_id": transactional_id,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "group_id": group_id,
    }


def end_txn_body(
    transactional_id: str, producer_id: int, producer_epoch: int, *, committed: bool
) -> dict[str, Any]:
    return {
        "transactional_id": transactional_id,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "committed": committed,
    }


def read_error_code(response: dict[str, Any], version: int, *, what: str = "") -> None:
    """Raise the typed error of a response's top-level ``error_code`` (none: return)."""
    code = ErrorCode.from_code(response["error_code"])
    if code is not ErrorCode.NONE:
        raise error_for(code, f"{what}: {code.message}" if what else None)


def txn_offset_commit_body(
    transactional_id: str,
    group: ConsumerGroupMetadata,
    producer_id: int,
    producer_epoch: int,
    offsets: Mapping[tuple[str, int], int],
) -> dict[str, Any]:
    """TxnOffsetCommit v0-3 (v3 carries the consumer's generation and member id)."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "committed_metadata": None,
            }
        )
    return {
        "transactional_id": transactional_id,
        "group_id": group.group_id,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "generation_id": group.generation_id,
        "member_id": group.member_id,
        "group_instance_id": group.group_instance_id,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
    }


def read_txn_offset_commit(response: dict[str, Any], version: int) -> None:
    """Raise the typed error of the most decisive partition error of a TxnOffsetCommit."""
    worst: tuple[int, ErrorCode, str] | None = None
    for topic in response["topics"]:
        for result in topic["partitions"]:
            code = ErrorCode.from_code(result["error_code"])
            if code is ErrorCode.NONE:
                continue
            where = f"{topic['name']}-{result['partition_index']}"
            if worst is None or _severity(code) > worst[0]:
                worst = (_severity(code), code, where)
    if worst is not None:
        _, code, where = worst
        raise error_for(code, f"TxnOffsetCommit {where}: {code.message}")
