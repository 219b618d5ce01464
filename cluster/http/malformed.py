"""Malformed HTTP requests: counted, and logged as one line at most every few seconds.

aiohttp answers a request it cannot parse (a bad request line, header or chunk, a line too
long) with 400 and closes the connection, which is right; it then logs the parse error at
ERROR with a whole traceback. On a broker port that any client, scanner or broken proxy can
reach, that is an operator's log filling with tracebacks that say nothing is wrong with the
broker (the HTTP fuzzer's 100,000 cases left about 5,600 of them, docs/chaos.md).
``MalformedRequestLog`` is the ``logger`` aiohttp's request handler is given: such an error
becomes one WARNING line naming the peer and the problem, at most one per
``MALFORMED_LOG_INTERVAL_S`` (the next one says how many were left out meanwhile), and each
is counted (``flux_http_malformed_requests_total``). Every other record passes unchanged,
tracebacks included: an error in the server itself is never hidden.

Thread-safety: one owner, the broker's event loop.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError

from ..log_throttle import LineThrottle

__all__ = ["MALFORMED_LOG_INTERVAL_S", "MalformedRequestLog", "problem_of"]

#: The shortest time between two log lines about malformed requests.
MALFORMED_LOG_INTERVAL_S = 10.0
#: The longest description of one malformed request in the log (the rest is cut).
MAX_PROBLEM_CHARS = 300


class MalformedRequestLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """``logger`` for aiohttp's server: a client's malformed request is counted (``count``)
    and logged as one rate-limited WARNING line; everything else goes to ``logger`` as it
    came."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        count: Callable[[], None] | None = None,
        interval_s: float = MALFORMED_LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(logger, {})
        self._count = count
        self._throttle = LineThrottle(interval_s, clock)

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        error = _exception_of(kwargs.get("exc_info"))
        if not _client_error(error):
            self.logger.log(level, msg, *args, **kwargs)
            return
        assert isinstance(error, HttpProcessingError)
        if self._count is not None:
            self._count()
        left_out = self._throttle.due()
        if left_out is None:
            return
        peer = args[0] if args else None
        problem = problem_of(error)
        if len(problem) > MAX_PROBLEM_CHARS:
            problem = problem[:MAX_PROBLEM_CHARS] + "..."
        more = f" ({left_out} more since the last such line)" if left_out else ""
        # A WARNING, or lower where aiohttp chose lower (non-HTTP bytes on a new connection,
        # such as TLS to a plaintext port, it logs at DEBUG).
        self.logger.log(
            min(level, logging.WARNING),
            "malformed HTTP request from %s answered %d: %s%s",
            peer,
            error.code,
            problem,
            more,
        )


def problem_of(error: HttpProcessingError) -> str:
    """What the parser found wrong, on one line (its messages quote the bytes over several)."""
    return " ".join(str(error.message or type(error).__name__).split())


def _exception_of(exc_info: Any) -> BaseException | None:
    """The exception a logging call's ``exc_info`` names (``True``: the one being handled)."""
    if isinstance(exc_info, BaseException):
        return exc_info
    if isinstance(exc_info, tuple) and len(exc_info) == 3:
        return exc_info[1]  # type: ignore[no-any-return]
    if exc_info is True:
        return sys.exc_info()[1]
    return None


def _client_error(error: BaseException | None) -> bool:
    """A request the parser refused (aiohttp answers those with the error's 4xx), not a server
    fault: caught where aiohttp feeds its parser (``data_received``). The same kind of error
    raised out of a handler is answered 500 and stays a traceback (were aiohttp's function
    renamed, every such record would pass unchanged: tracebacks again, nothing hidden)."""
    if not isinstance(error, HttpProcessingError) or not 400 <= (error.code or 0) < 500:
        return False
    caught_in = error.__traceback__
    return caught_in is not None and caught_in.tb_frame.f_code.co_name == "data_received"
