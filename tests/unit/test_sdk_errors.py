"""flux.sdk.errors: the exception tree, the one code -> class table, and error_for."""

from __future__ import annotations

import pickle

import pytest
from flux.protocol.errors import ErrorCode
from flux.sdk import errors
from flux.sdk.errors import (
    ERROR_CLASSES,
    ConfigurationError,
    FluxConnectionError,
    FluxError,
    FluxProtocolError,
    FluxTimeoutError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    KafkaError,
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetOutOfRangeError,
    PolicyViolation,
    PolicyViolationError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicError,
    error_for,
)


def test_tree_roots() -> None:
    for cls in (ConfigurationError, FluxConnectionError, FluxTimeoutError, FluxProtocolError):
        assert issubclass(cls, FluxError)
        assert not issubclass(cls, KafkaError)
    assert issubclass(KafkaError, FluxError)
    for cls in set(ERROR_CLASSES.values()):
        assert issubclass(cls, KafkaError) and cls is not KafkaError, cls


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UnknownTopicError),
        (ErrorCode.UNKNOWN_TOPIC_ID, UnknownTopicError),
        (ErrorCode.TOPIC_ALREADY_EXISTS, TopicAlreadyExistsError),
        (ErrorCode.INVALID_TOPIC_EXCEPTION, InvalidTopicError),
        (ErrorCode.INVALID_PARTITIONS, InvalidPartitionsError),
        (ErrorCode.INVALID_REPLICATION_FACTOR, InvalidReplicationFactorError),
        (ErrorCode.INVALID_CONFIG, InvalidConfigError),
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, NotLeaderError),
        (ErrorCode.OFFSET_OUT_OF_RANGE, OffsetOutOfRangeError),
        (ErrorCode.NOT_ENOUGH_REPLICAS, NotEnoughReplicasError),
        (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, NotEnoughReplicasError),
        (ErrorCode.REQUEST_TIMED_OUT, RequestTimedOutError),
        (ErrorCode.POLICY_VIOLATION, PolicyViolationError),
    ],
)
def test_error_for_maps_codes_to_classes(code: ErrorCode, cls: type[KafkaError]) -> None:
    error = error_for(int(code), "broker says no")
    assert type(error) is cls
    assert error.code is code
    assert error.message == "broker says no" == str(error)
    assert error.retriable is code.retriable


def test_retriable_comes_from_the_code_not_the_class() -> None:
    assert error_for(ErrorCode.NOT_LEADER_OR_FOLLOWER).retriable is True
    assert error_for(ErrorCode.TOPIC_ALREADY_EXISTS).retriable is False
    # One class, two codes: retriable for one, not for the other.
    assert error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION).retriable is True
    assert type(error_for(ErrorCode.UNKNOWN_TOPIC_ID)) is UnknownTopicError


def test_default_message_is_the_code_description() -> None:
    error = error_for(ErrorCode.INVALID_CONFIG)
    assert error.message == ErrorCode.INVALID_CONFIG.message
    assert error_for(ErrorCode.INVALID_CONFIG, "").message == ErrorCode.INVALID_CONFIG.message


def test_unmapped_and_unknown_codes_raise_plain_kafka_error() -> None:
    unmapped = error_for(ErrorCode.GROUP_MAX_SIZE_REACHED)
    assert type(unmapped) is KafkaError and unmapped.code is ErrorCode.GROUP_MAX_SIZE_REACHED
    unknown = error_for(31999)
    assert unknown.code is ErrorCode.UNKNOWN_SERVER_ERROR


def test_error_for_refuses_none() -> None:
    with pytest.raises(ValueError, match="not an error"):
        error_for(ErrorCode.NONE)


def test_table_keys_are_error_codes_and_every_mapped_class_is_exported() -> None:
    assert all(isinstance(code, ErrorCode) for code in ERROR_CLASSES)
    assert ErrorCode.NONE not in ERROR_CLASSES
    for cls in ERROR_CLASSES.values():
        assert cls.__name__ in errors.__all__
        assert getattr(errors, cls.__name__) is cls


def test_policy_violation_alias() -> None:
    assert PolicyViolation is PolicyViolationError
    assert isinstance(error_for(ErrorCode.POLICY_VIOLATION), PolicyViolation)


def test_errors_pickle_and_repr() -> None:
    error = error_for(ErrorCode.TOPIC_ALREADY_EXISTS, "topic 'a' already exists")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is TopicAlreadyExistsError
    assert (copy.code, copy.message) == (error.code, error.message)
    assert (
        repr(error) == "TopicAlreadyExistsError(TOPIC_ALREADY_EXISTS, \"topic 'a' already exists\")"
    )


def test_connection_error_keeps_addresses() -> None:
    error = FluxConnectionError("nobody home", addresses=("127.0.0.1:1",))
    assert error.addresses == ("127.0.0.1:1",)
    assert str(error) == "nobody home"


def test_docstring_tree_names_every_class() -> None:
    doc = errors.__doc__ or ""
    for name in errors.__all__:
        obj = getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, Exception) and name != "PolicyViolation":
            assert name in doc, f"{name} is missing from the tree in the module docstring"
