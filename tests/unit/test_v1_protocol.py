"""The V1 line protocol's pure parts: request parsing, reply lines, the FNV-1a partitioner,
and how values are shown."""

from __future__ import annotations

import pytest
from flux.cluster.v1.commands import show_value
from flux.cluster.v1.protocol import V1Error, error_line, fnv1a_32, ok_line, parse_request


def test_a_request_has_four_fields_and_args_split_on_whitespace() -> None:
    request = parse_request(b"V1|17|produce|orders  user1:created acks=all\n")
    assert request.correlation_id == "17" and request.command == "PRODUCE"
    assert request.args == ("orders", "user1:created", "acks=all")
    empty = parse_request(b"V1|2|ADMIN_GET_METADATA|\r\n")
    assert empty.args == () and empty.raw_args == ""
    # Everything after the third bar is the args: a value may hold a bar.
    assert parse_request(b"V1|3|PRODUCE|t k:a|b").args == ("t", "k:a|b")


@pytest.mark.parametrize(
    "line",
    [
        b"V1|1|PRODUCE",  # three fields
        b"V1|1|ADMIN_GET_METADATA",  # no closing bar
        b"V2|1|PRODUCE|t k:v",  # another version
        b"V1||PRODUCE|t k:v",  # no correlation id
        b"V1|a b|PRODUCE|t k:v",  # a space in it
        b"V1|1||t k:v",  # no command
        b"V1|1|PRO DUCE|t",  # a malformed one
        b"\xff\xfe\x00garbage",  # not text
        b"",
    ],
)
def test_malformed_lines_are_bad_requests(line: bytes) -> None:
    with pytest.raises(V1Error) as raised:
        parse_request(line)
    assert raised.value.code == "BAD_REQUEST"


def test_reply_lines() -> None:
    assert ok_line("1", {"partition": 2, "offset": 0, "hw": 0}) == (
        b"V1|1|OK|partition=2 offset=0 hw=0\n"
    )
    assert ok_line("9") == b"V1|9|OK\n"
    assert error_line("0", "BAD_REQUEST", "two\nlines") == b"V1|0|ERR|BAD_REQUEST|two lines\n"


def test_fnv1a_32_known_values() -> None:
    # The FNV-1a test vectors (Fowler, Noll, Vo).
    assert fnv1a_32(b"") == 0x811C9DC5
    assert fnv1a_32(b"a") == 0xE40C292C
    assert fnv1a_32(b"foobar") == 0xBF9CF968


def test_values_survive_the_line_framing() -> None:
    assert show_value(b"created") == "created"
    assert show_value(b"a,b c|d%e\n") == "a%2Cb%20c%7Cd%25e%0A"
    assert show_value(None) == ""
    assert show_value("caf\u00e9".encode()) == "caf%C3%A9"
