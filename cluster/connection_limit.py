"""``broker.max_connections`` on each of a node's listeners: refusing the connections past it.

A listener (each Kafka listener, and the broker's HTTP port) serves at most ``limit``
connections at once, as Kafka's ``max.connections`` bounds each listener. On a Kafka listener a
connection past the limit is closed as soon as it is accepted, before any byte of it is read:
the client sees the connection closed, backs off and reconnects. The HTTP port reads its
request line first, serves other brokers' within a reserve and answers clients ``503``
(``http/server.py``). Without the bound, a client that leaks connections, or a flood of them,
would hold one file descriptor each until the process ran out (``open_files.py``), and then
the node could neither open a log segment nor accept its own peers' connections.

``ConnectionLimit`` holds what is shared by the listeners' two implementations (asyncio
streams for Kafka, aiohttp for HTTP): the decision, the count of refusals (a metric), and the
log, one WARNING line at most every ``REFUSAL_LOG_INTERVAL_S`` (``log_throttle.py``: the next
one says how many were left out), so a flood does not become a flood of log lines.

Thread-safety: one owner, the node's event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from .log_throttle import LineThrottle

__all__ = ["REFUSAL_LOG_INTERVAL_S", "ConnectionLimit"]

#: The shortest time between two log lines about refused connections, per listener.
REFUSAL_LOG_INTERVAL_S = 10.0


class ConnectionLimit:
    """At most ``limit`` connections on the listener ``listener``; ``on_refused`` is called for
    each connection refused (``flux_connections_refused_total``)."""

    def __init__(
        self,
        listener: str,
        limit: int,
        *,
        log: logging.Logger,
        on_refused: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1:
            raise ValueError(f"a listener's connection limit must be at least 1, not {limit}")
        self.listener = listener
        self.limit = limit
        self._log = log
        self._on_refused = on_refused
        self._throttle = LineThrottle(REFUSAL_LOG_INTERVAL_S, clock)

    def admits(self, open_connections: int, peer: object) -> bool:
        """Whether a new connection from ``peer`` may be served, with ``open_connections``
        already open on the listener; a refusal is counted and logged (``refuse``)."""
        if open_connections < self.limit:
            return True
        self.refuse(open_connections, peer)
        return False

    def refuse(self, open_connections: int, peer: object) -> None:
        """Count a connection from ``peer`` refused with ``open_connections`` open, and log it
        (one line per ``REFUSAL_LOG_INTERVAL_S`` at most)."""
        if self._on_refused is not None:
            self._on_refused()
        left_out = self._throttle.due()
        if left_out is None:
            return
        more = f" ({left_out} more refused since the last such line)" if left_out else ""
        self._log.warning(
            "refusing a connection from %s on listener %s: %d connections open, the limit "
            "(broker.max_connections)%s",
            peer,
            self.listener,
            open_connections,
            more,
        )
