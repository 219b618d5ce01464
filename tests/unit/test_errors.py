"""Kafka's error-code table in flux.protocol.errors.

Names and numbers come from Kafka's ``org.apache.kafka.common.protocol.Errors``; the table is
cross-checked against two independent clients' tables: kafka-python's ``kafka.errors`` and
librdkafka's (confluent-kafka's ``KafkaError`` constants).
"""

from __future__ import annotations

import confluent_kafka
import kafka.errors
import pytest
from flux.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    FrameTooLargeError,
    InvalidFrameError,
    ProtocolError,
    UnsupportedVersionError,
)


def test_exception_tree_is_unchanged() -> None:
    assert issubclass(InvalidFrameError, ProtocolError)
    assert issubclass(FrameTooLargeError, InvalidFrameError)
    assert issubclass(UnsupportedVersionError, ProtocolError)
    assert issubclass(CorruptRecordError, ProtocolError)
    error = FrameTooLargeError(10, 5)
    assert (error.size, error.limit) == (10, 5)
    unsupported = UnsupportedVersionError(18, 9, correlation_id=7)
    assert (unsupported.api_key, unsupported.api_version, unsupported.correlation_id) == (18, 9, 7)


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("UNKNOWN_SERVER_ERROR", -1),
        ("NONE", 0),
        ("OFFSET_OUT_OF_RANGE", 1),
        ("CORRUPT_MESSAGE", 2),
        ("UNKNOWN_TOPIC_OR_PARTITION", 3),
        ("NOT_LEADER_OR_FOLLOWER", 6),
        ("REQUEST_TIMED_OUT", 7),
        ("INVALID_TOPIC_EXCEPTION", 17),
        ("RECORD_LIST_TOO_LARGE", 18),
        ("NOT_ENOUGH_REPLICAS", 19),
        ("NOT_ENOUGH_REPLICAS_AFTER_APPEND", 20),
        ("NOT_COORDINATOR", 16),
        ("UNSUPPORTED_VERSION", 35),
        ("TOPIC_ALREADY_EXISTS", 36),
        ("INVALID_PARTITIONS", 37),
        ("INVALID_REPLICATION_FACTOR", 38),
        ("OUT_OF_ORDER_SEQUENCE_NUMBER", 45),
        ("DUPLICATE_SEQUENCE_NUMBER", 46),
        ("INVALID_PRODUCER_EPOCH", 47),
        ("FENCED_LEADER_EPOCH", 74),
        ("MEMBER_ID_REQUIRED", 79),
        ("PRODUCER_FENCED", 90),
        ("UNKNOWN_TOPIC_ID", 100),
        ("STALE_MEMBER_EPOCH", 113),
        ("SHARE_SESSION_LIMIT_REACHED", 133),
    ],
)
def test_codes_match_kafka(name: str, code: int) -> None:
    assert ErrorCode[name] == code
    assert ErrorCode(code).name == name


def test_table_is_dense_from_minus_one_to_the_last_code() -> None:
    # Kafka allocates codes without gaps; a gap here means a code was forgotten.
    codes = sorted(int(code) for code in ErrorCode)
    assert codes == list(range(-1, codes[-1] + 1))
    assert codes[-1] >= 133


def test_every_code_has_a_short_message() -> None:
    for code in ErrorCode:
        assert code.message
        assert len(code.message) <= 100, code


def test_retriable_matches_kafkas_retriable_exceptions() -> None:
    retriable = {code.name for code in ErrorCode if code.retriable}
    assert retriable == {
        "CORRUPT_MESSAGE",
        "UNKNOWN_TOPIC_OR_PARTITION",
        "LEADER_NOT_AVAILABLE",
        "NOT_LEADER_OR_FOLLOWER",
        "REQUEST_TIMED_OUT",
        "REPLICA_NOT_AVAILABLE",
        "NETWORK_EXCEPTION",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_COORDINATOR",
        "NOT_ENOUGH_REPLICAS",
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "NOT_CONTROLLER",
        "CONCURRENT_TRANSACTIONS",
        "KAFKA_STORAGE_ERROR",
        "FETCH_SESSION_ID_NOT_FOUND",
        "INVALID_FETCH_SESSION_EPOCH",
        "LISTENER_NOT_FOUND",
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "OFFSET_NOT_AVAILABLE",
        "PREFERRED_LEADER_NOT_AVAILABLE",
        "ELIGIBLE_LEADERS_NOT_AVAILABLE",
        "ELECTION_NOT_NEEDED",
        "UNSTABLE_OFFSET_COMMIT",
        "THROTTLING_QUOTA_EXCEEDED",
        "UNKNOWN_TOPIC_ID",
        "INCONSISTENT_TOPIC_ID",
        "FETCH_SESSION_TOPIC_ID_ERROR",
        "SHARE_SESSION_NOT_FOUND",
        "INVALID_SHARE_SESSION_EPOCH",
        "SHARE_SESSION_LIMIT_REACHED",
    }
    assert not ErrorCode.NONE.retriable
    assert not ErrorCode.UNKNOWN_SERVER_ERROR.retriable


def test_from_code_maps_unknown_codes_to_unknown_server_error() -> None:
    assert ErrorCode.from_code(6) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert ErrorCode.from_code(32000) is ErrorCode.UNKNOWN_SERVER_ERROR
    assert ErrorCode.from_code(-50) is ErrorCode.UNKNOWN_SERVER_ERROR


def _kafka_python_table() -> dict[int, type[kafka.errors.BrokerResponseError]]:
    table = {}
    for value in vars(kafka.errors).values():
        if (
            isinstance(value, type)
            and issubclass(value, kafka.errors.BrokerResponseError)
            and value.errno is not None
        ):
            table[value.errno] = value
    return table


def test_agrees_with_kafka_python() -> None:
    table = _kafka_python_table()
    assert len(table) > 100
    for errno, error_class in table.items():
        code = ErrorCode(errno)  # every code kafka-python knows exists here
        if code is ErrorCode.CORRUPT_MESSAGE:
            # kafka-python marks it fatal; Kafka's CorruptRecordException is a
            # RetriableException, and that is what we follow.
            continue
        assert code.retriable == error_class.retriable, code


# librdkafka abbreviates a few of Kafka's names (rdkafka.h, RD_KAFKA_RESP_ERR_*).
_LIBRDKAFKA_NAMES = {
    "UNKNOWN_SERVER_ERROR": "UNKNOWN",
    "NONE": "NO_ERROR",
    "CORRUPT_MESSAGE": "INVALID_MSG",
    "UNKNOWN_TOPIC_OR_PARTITION": "UNKNOWN_TOPIC_OR_PART",
    "INVALID_FETCH_SIZE": "INVALID_MSG_SIZE",
    "NOT_LEADER_OR_FOLLOWER": "NOT_LEADER_FOR_PARTITION",
    "MESSAGE_TOO_LARGE": "MSG_SIZE_TOO_LARGE",
    "STALE_CONTROLLER_EPOCH": "STALE_CTRL_EPOCH",
    "INVALID_TOPIC_EXCEPTION": "TOPIC_EXCEPTION",
}


def test_agrees_with_librdkafka() -> None:
    librdkafka = {
        value: name
        for name, value in vars(confluent_kafka.KafkaError).items()
        if isinstance(value, int) and not name.startswith("_") and -1 <= value < 1000
    }
    assert len(librdkafka) > 100
    for value, name in librdkafka.items():
        code = ErrorCode(value)
        assert _LIBRDKAFKA_NAMES.get(code.name, code.name) == name
