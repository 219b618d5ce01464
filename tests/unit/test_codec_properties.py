"""Property tests of the Kafka wire codec, driven by the same schema descriptions it runs.

For every supported API, version and direction: a random valid body survives encode/decode
unchanged, and kafka-python (whose codec is generated from Kafka's own JSON definitions) reads
our bytes and writes back the very same bytes. Arbitrary and mutated frames only ever raise
``ProtocolError`` subclasses.
"""

from __future__ import annotations

import importlib
import struct
from typing import Any

import pytest
from flux.protocol.api import (
    SUPPORTED_VERSIONS,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from flux.protocol.errors import ProtocolError
from flux.protocol.messages import REQUESTS, RESPONSES
from flux.protocol.schema import Field, Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# kafka-python loads its schemas with deprecated importlib.resources calls.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

EXAMPLES = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# The cross-check with kafka-python is slower (its codec compiles per class and version).
CROSS_CHECK_EXAMPLES = settings(EXAMPLES, max_examples=12)

_INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "uint16": (0, (1 << 16) - 1),
    "uint32": (0, (1 << 32) - 1),
}


# ------------------------------------------------------------------- strategies from schema


def _scalar(kind: str) -> st.SearchStrategy[Any]:
    if kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]
        # Mix in the boundaries and small values, which random draws rarely reach.
        return st.one_of(
            st.sampled_from([low, high, 0, -1 if low < 0 else 1]), st.integers(low, high)
        )
    if kind == "float64":
        return st.floats(allow_nan=False)
    if kind == "bool":
        return st.booleans()
    if kind == "string":
        return st.text(max_size=12)
    if kind in ("bytes", "records"):
        return st.binary(max_size=48)
    if kind == "uuid":
        return st.uuids()
    raise AssertionError(kind)


def value_strategy(spec: Field, version: int) -> st.SearchStrategy[Any]:
    """Any valid value of ``spec`` at ``version``; its default if the version lacks it."""
    if not spec.present_in(version):
        return st.builds(spec.default_value)
    if spec.is_array:
        element = (
            struct_strategy(spec.fields, version) if spec.is_struct else _scalar(spec.element_type)
        )
        strategy: st.SearchStrategy[Any] = st.lists(element, max_size=3)
    elif spec.is_struct:
        strategy = struct_strategy(spec.fields, version)
    else:
        strategy = _scalar(spec.type)
    if spec.nullable_in(version):
        strategy = st.none() | strategy
    return strategy


def struct_strategy(fields: tuple[Field, ...], version: int) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({spec.key: value_strategy(spec, version) for spec in fields})


def body_strategy(message: Message, version: int) -> st.SearchStrategy[dict[str, Any]]:
    return struct_strategy(message.fields, version)


def _cases(table: dict[int, Message]) -> list[tuple[int, int]]:
    return [
        (api_key, version)
        for api_key in sorted(table)
        if api_key in SUPPORTED_VERSIONS
        for version in range(SUPPORTED_VERSIONS[api_key][0], SUPPORTED_VERSIONS[api_key][1] + 1)
    ]


REQUEST_CASES = _cases(REQUESTS)
RESPONSE_CASES = _cases(RESPONSES)


def _case_id(case: tuple[int, int]) -> str:
    return f"{REQUESTS[case[0]].name.removesuffix('Request')}-v{case[1]}"


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("case", REQUEST_CASES, ids=_case_id)
@EXAMPLES
@given(data=st.data())
def test_request_round_trip(case: tuple[int, int], data: st.DataObject) -> None:
    api_key, version = case
    body = data.draw(body_strategy(REQUESTS[api_key], version))
    client_id = data.draw(st.none() | st.text(max_size=8))
    correlation_id = data.draw(st.integers(-(1 << 31), (1 << 31) - 1))
    frame = encode_request(api_key, version, correlation_id, client_id, body)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    header, decoded = decode_request(frame[4:])
    assert header == RequestHeader(api_key, version, correlation_id, client_id)
    assert decoded == body
    # Re-encoding what was decoded gives the same bytes.
    assert encode_request(api_key, version, correlation_id, client_id, decoded) == frame


@pytest.mark.parametrize("case", RESPONSE_CASES, ids=_case_id)
@EXAMPLES
@given(data=st.data())
def test_response_round_trip(case: tuple[int, int], data: st.DataObject) -> None:
    api_key, version = case
    body = data.draw(body_strategy(RESPONSES[api_key], version))
    correlation_id = data.draw(st.integers(-(1 << 31), (1 << 31) - 1))
    header = RequestHeader(api_key, version, correlation_id, "client")
    frame = encode_response(header, body)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    assert decode_response(api_key, version, frame[4:]) == (correlation_id, body)
    assert decode_response(api_key, version, memoryview(frame)[4:]) == (correlation_id, body)


@pytest.mark.parametrize("case", REQUEST_CASES, ids=_case_id)
def test_empty_request_body_takes_defaults(case: tuple[int, int]) -> None:
    api_key, version = case
    message = REQUESTS[api_key]
    _, decoded = decode_request(encode_request(api_key, version, 1, None, {})[4:])
    assert decoded == message.default_body()


@pytest.mark.parametrize("case", RESPONSE_CASES, ids=_case_id)
def test_empty_response_body_takes_defaults(case: tuple[int, int]) -> None:
    api_key, version = case
    message = RESPONSES[api_key]
    frame = encode_response(RequestHeader(api_key, version, 1, None), {})
    assert decode_response(api_key, version, frame[4:]) == (1, message.default_body())


# ------------------------------------------------------------- cross-check with kafka-python

_KAFKA_PYTHON_MODULES = (
    "kafka.protocol.metadata",
    "kafka.protocol.producer",
    "kafka.protocol.consumer",
    "kafka.protocol.admin",
)


def _kafka_python_class(name: str) -> Any:
    for module_name in _KAFKA_PYTHON_MODULES:
        module = importlib.import_module(module_name)
        if hasattr(module, name):
            return getattr(module, name)
    pytest.skip(f"kafka-python has no {name}")


@pytest.mark.parametrize("case", REQUEST_CASES, ids=_case_id)
@CROSS_CHECK_EXAMPLES
@given(data=st.data())
def test_kafka_python_reads_and_rewrites_our_requests(
    case: tuple[int, int], data: st.DataObject
) -> None:
    api_key, version = case
    message = REQUESTS[api_key]
    theirs = _kafka_python_class(message.name)
    body = data.draw(body_strategy(message, version))
    frame = encode_request(api_key, version, 42, "flux-test", body)
    decoded = theirs.decode(frame[4:], version=version, header=True)
    assert decoded.header.correlation_id == 42
    assert decoded.header.client_id == "flux-test"
    assert decoded.encode(header=True, framed=True) == frame
    _assert_same_values(body, decoded.to_dict(json=False))


@pytest.mark.parametrize("case", RESPONSE_CASES, ids=_case_id)
@CROSS_CHECK_EXAMPLES
@given(data=st.data())
def test_kafka_python_reads_and_rewrites_our_responses(
    case: tuple[int, int], data: st.DataObject
) -> None:
    api_key, version = case
    message = RESPONSES[api_key]
    theirs = _kafka_python_class(message.name)
    body = data.draw(body_strategy(message, version))
    if api_key == 18:
        # kafka-python reads any ApiVersions response with an error as v0 (what a broker sends
        # for an unsupported version), so only error-free bodies can be compared at v1+.
        body["error_code"] = 0
    frame = encode_response(RequestHeader(api_key, version, 42, None), body)
    decoded = theirs.decode(frame[4:], version=version, header=True)
    assert decoded.header.correlation_id == 42
    assert decoded.encode(header=True, framed=True) == frame
    _assert_same_values(body, decoded.to_dict(json=False))


def _assert_same_values(ours: Any, theirs: Any) -> None:
    """Every key kafka-python reports has the value we encoded (it renames a few; skip them).

    kafka-python reports a tagged struct that was not sent as None; we decode its default...
    """
    if theirs is None and (isinstance(ours, dict) or ours == -(1 << 31)):
        return  # ...and an authorized-operations bit field of INT32_MIN ("not sent") as None.
    if isinstance(theirs, dict):
        for key, value in theirs.items():
            if key in ours:
                _assert_same_values(ours[key], value)
    elif isinstance(theirs, list) and theirs and isinstance(theirs[0], dict):
        assert len(ours) == len(theirs)
        for mine, other in zip(ours, theirs, strict=True):
            _assert_same_values(mine, other)
    elif isinstance(theirs, (bool, int, str, bytes, list)) or theirs is None:
        assert ours == theirs


# --------------------------------------------------------------------- hostile input


@settings(max_examples=300, deadline=None)
@given(frame=st.binary(max_size=128))
def test_decode_request_of_arbitrary_bytes_raises_only_protocol_errors(frame: bytes) -> None:
    try:
        decode_request(frame)
    except ProtocolError:
        pass


_supported_headers = st.sampled_from(REQUEST_CASES).map(
    lambda case: struct.pack(">hhih", case[0], case[1], 7, 1) + b"c"
)


@settings(max_examples=400, deadline=None)
@given(header=_supported_headers, tail=st.binary(max_size=96))
def test_decode_request_with_valid_header_and_garbage_body(header: bytes, tail: bytes) -> None:
    try:
        decode_request(header + tail)
    except ProtocolError:
        pass


@st.composite
def _mutated_request(draw: st.DrawFn) -> bytes:
    api_key, version = draw(st.sampled_from(REQUEST_CASES))
    body = draw(body_strategy(REQUESTS[api_key], version))
    frame = bytearray(encode_request(api_key, version, 1, "c", body)[4:])
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["flip", "truncate", "insert"]))
        position = draw(st.integers(0, max(len(frame) - 1, 0)))
        if action == "flip" and frame:
            frame[position] = draw(st.integers(0, 255))
        elif action == "truncate":
            del frame[position:]
        else:
            frame[position:position] = draw(st.binary(min_size=1, max_size=4))
    return bytes(frame)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frame=_mutated_request())
def test_decode_request_of_mutated_frames_raises_only_protocol_errors(frame: bytes) -> None:
    try:
        decode_request(frame)
    except ProtocolError:
        pass


@settings(max_examples=400, deadline=None)
@given(case=st.sampled_from(RESPONSE_CASES), frame=st.binary(max_size=128))
def test_decode_response_of_arbitrary_bytes_raises_only_protocol_errors(
    case: tuple[int, int], frame: bytes
) -> None:
    try:
        decode_response(case[0], case[1], frame)
    except ProtocolError:
        pass
