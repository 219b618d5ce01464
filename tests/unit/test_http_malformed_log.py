"""``MalformedRequestLog``: aiohttp's parse errors become one counted, rate-limited line;
everything else reaches the log as it came."""

from __future__ import annotations

import logging

import pytest
from aiohttp.http_exceptions import BadHttpMessage, BadHttpMethod, InvalidHeader, LineTooLong
from flux.cluster.http.malformed import MAX_PROBLEM_CHARS, MalformedRequestLog


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG, logger="flux.test.malformed")
    return caplog


def data_received(error: BaseException) -> BaseException:
    """``error`` as aiohttp's protocol catches a parse error: raised and caught in a function
    of this name (``RequestHandler.data_received`` around its parser's ``feed_data``)."""
    try:
        raise error
    except BaseException as caught:  # noqa: BLE001 - returned to the test
        return caught


def _adapter(counted: list[int], clock: _Clock) -> MalformedRequestLog:
    return MalformedRequestLog(
        logging.getLogger("flux.test.malformed"),
        count=lambda: counted.append(1),
        interval_s=10.0,
        clock=clock,
    )


def test_a_parse_error_is_one_warning_line_without_a_traceback(logged) -> None:
    counted: list[int] = []
    log = _adapter(counted, _Clock())
    error = InvalidHeader(b"X-Bad\x00: 1\r\n\r\n")
    log.exception("Error handling request from %s", "10.1.2.3", exc_info=data_received(error))
    [record] = logged.records
    assert record.levelno == logging.WARNING
    assert record.exc_info is None and record.exc_text is None
    message = record.getMessage()
    assert message.startswith("malformed HTTP request from 10.1.2.3 answered 400: ")
    assert "Invalid HTTP header" in message and "\n" not in message
    assert counted == [1]


def test_lines_are_rate_limited_and_say_how_many_were_left_out(logged) -> None:
    counted: list[int] = []
    clock = _Clock()
    log = _adapter(counted, clock)
    for index in range(5):
        clock.now += 1.0
        log.exception(
            "Error handling request from %s",
            f"peer-{index}",
            exc_info=data_received(BadHttpMessage("x")),
        )
    assert [r.getMessage() for r in logged.records] == [
        "malformed HTTP request from peer-0 answered 400: x"
    ]
    clock.now += 10.0
    log.exception(
        "Error handling request from %s",
        "peer-5",
        exc_info=data_received(LineTooLong(b"GET /aaa", 8190)),
    )
    assert len(logged.records) == 2
    last = logged.records[-1].getMessage()
    assert last.startswith("malformed HTTP request from peer-5 answered 400: Got more than 8190")
    assert last.endswith("(4 more since the last such line)")
    assert len(counted) == 6  # every one counted, logged or not


def test_a_long_problem_is_cut(logged) -> None:
    log = _adapter([], _Clock())
    log.exception(
        "Error handling request from %s", "p", exc_info=data_received(BadHttpMessage("y" * 5000))
    )
    message = logged.records[0].getMessage()
    assert message.endswith("...") and len(message) < MAX_PROBLEM_CHARS + 100


def test_a_debug_level_parse_error_stays_at_debug(logged) -> None:
    """aiohttp logs non-HTTP bytes on a new connection (TLS to a plaintext port) at DEBUG."""
    log = _adapter([], _Clock())
    log.debug(
        "Error handling request from %s", "p", exc_info=data_received(BadHttpMethod("\x16\x03\x01"))
    )
    [record] = logged.records
    assert record.levelno == logging.DEBUG and record.exc_info is None
    assert "Received HTTPS traffic on an HTTP port" in record.getMessage()


def test_other_records_pass_unchanged_with_their_tracebacks(logged) -> None:
    counted: list[int] = []
    log = _adapter(counted, _Clock())
    try:
        raise RuntimeError("a bug in a handler")
    except RuntimeError as error:
        log.exception("Error handling request from %s", "p", exc_info=error)
    log.warning("plain %s", "line")
    first, second = logged.records
    assert first.levelno == logging.ERROR and first.exc_info is not None
    assert first.getMessage() == "Error handling request from p"
    assert second.getMessage() == "plain line" and second.exc_info is None
    assert counted == []


def test_a_parse_error_out_of_a_handler_keeps_its_traceback(logged) -> None:
    """aiohttp answers a request whose handler raised 500, whatever the error: a body error a
    handler let escape is a server fault, logged as it came."""
    counted: list[int] = []
    log = _adapter(counted, _Clock())

    def _handle_request() -> None:
        raise BadHttpMessage("Not enough data to satisfy content length header.")

    try:
        _handle_request()
    except BadHttpMessage as error:
        log.exception("Error handling request from %s", "p", exc_info=error)
    [record] = logged.records
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert counted == []
