"""``LineThrottle``: at most one log line per interval about a thing that can happen in floods
(a malformed HTTP request, a connection refused past ``broker.max_connections``), the next
line saying how many were held back meanwhile, so a flood never becomes a flood of lines.

Thread-safety: one owner, the node's event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["LineThrottle"]


class LineThrottle:
    """Allows one line per ``interval_s`` (by ``clock``) and counts the ones it holds back."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._last_line: float | None = None
        self._held_back = 0

    def due(self) -> int | None:
        """``None`` when a line now would come too soon (it is counted as held back); else a
        line is due, and how many were held back since the last one."""
        now = self._clock()
        if self._last_line is not None and now - self._last_line < self._interval_s:
            self._held_back += 1
            return None
        self._last_line = now
        held_back, self._held_back = self._held_back, 0
        return held_back
