"""Wall-clock jumps for one local node process: its ``time.time()`` runs ahead or behind.

A node of a chaos cluster with clock jumps starts with ``PYTHONPATH`` pointing at a folder whose
``sitecustomize.py`` (written by ``write_sitecustomize``) calls ``install()`` before anything
else is imported. ``install`` replaces ``time.time``, ``time.time_ns`` and the functions that
default to the current time (``localtime``, ``gmtime``, ``ctime``, ``asctime``, ``strftime``)
by ones that add the offset in seconds written in the file named by ``FLUX_CHAOS_CLOCK_FILE``
(``write_offset``; re-read at most every ``REFRESH_S``). ``time.monotonic`` and
``time.perf_counter`` stay true, as they do when an operator or NTP steps a real clock: only
the wall clock jumps.

Why not the usual tools (measured on Debian 12, Linux 6.x, Python 3.11):

* a time namespace (``unshare --time``) offsets only CLOCK_MONOTONIC and CLOCK_BOOTTIME, never
  CLOCK_REALTIME (time_namespaces(7));
* libfaketime 0.9.10 (``LD_PRELOAD=libfaketime.so.1``) either fakes CLOCK_MONOTONIC too (it
  then jumps backwards with the wall clock, which stalls every asyncio timer for the size of a
  backward jump), or, with ``FAKETIME_DONT_FAKE_MONOTONIC=1``, makes every ``time.sleep`` fail
  with ``EINVAL`` (its ``clock_nanosleep`` wrapper), which pysyncobj's threads call.

Limits: C code that reads the clock itself (``datetime.datetime.now()``, OpenSSL's certificate
dates, file times set by the kernel) sees the true time. Flux's own code reads the wall clock
through ``time.time()`` / ``time.time_ns()`` (record and retention times, group sessions,
transaction timeouts, dedup windows, log lines), which is what the nemesis means to disturb.

Thread-safety: the patched functions may be called from any thread; the cached offset is one
tuple swapped atomically (two threads may both re-read the file, which is harmless).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

__all__ = ["CLOCK_FILE_ENV", "REFRESH_S", "install", "read_offset", "write_offset",
           "write_sitecustomize"]  # fmt: skip

CLOCK_FILE_ENV = "FLUX_CHAOS_CLOCK_FILE"
#: A changed offset takes effect in a running node within this many seconds.
REFRESH_S = 0.05
#: Offsets beyond this many seconds (ten years) are refused: a typo, not a test.
OFFSET_MAX_S = 10 * 365 * 86400.0

_SITECUSTOMIZE = '''\
"""Written by flux.chaos.clock_shim: wall-clock jumps for this chaos node."""
import flux.chaos.clock_shim

flux.chaos.clock_shim.install()
'''


def write_offset(path: Path, offset_s: float) -> None:
    """Set the offset of the node reading ``path`` (atomically: it never reads half)."""
    if not abs(offset_s) <= OFFSET_MAX_S:
        raise ValueError(f"a clock offset of {offset_s} s is beyond {OFFSET_MAX_S:.0f} s")
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(f"{offset_s!r}\n")
    os.replace(temporary, path)


def read_offset(path: str | os.PathLike[str]) -> float:
    """The offset in ``path``; 0 when it is missing or unreadable."""
    try:
        offset_s = float(Path(path).read_text().strip() or 0)
    except (OSError, ValueError):
        return 0.0
    return offset_s if abs(offset_s) <= OFFSET_MAX_S else 0.0


def write_sitecustomize(directory: Path) -> Path:
    """Write the ``sitecustomize.py`` that installs the shim into ``directory`` (put on the
    node's ``PYTHONPATH``); ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    return directory


class _OffsetClock:
    def __init__(self, path: str) -> None:
        self._path = path
        self._real_time_ns = time.time_ns
        self._monotonic = time.monotonic
        # (offset in ns, monotonic time of the next re-read)
        self._state = (0, float("-inf"))

    def offset_ns(self) -> int:
        offset_ns, refresh_at = self._state
        now = self._monotonic()
        if now >= refresh_at:
            offset_ns = int(read_offset(self._path) * 1e9)
            self._state = (offset_ns, now + REFRESH_S)
        return offset_ns

    def time_ns(self) -> int:
        return self._real_time_ns() + self.offset_ns()

    def time(self) -> float:
        return self.time_ns() / 1e9


def install(path: str | None = None) -> bool:
    """Patch ``time`` as the module docstring says, with the offset file ``path`` (default:
    ``$FLUX_CHAOS_CLOCK_FILE``); False (nothing patched) without one."""
    path = path or os.environ.get(CLOCK_FILE_ENV)
    if not path:
        return False
    clock = _OffsetClock(path)
    localtime = time.localtime
    time.time = clock.time
    time.time_ns = clock.time_ns
    for name in ("localtime", "gmtime", "ctime"):
        setattr(time, name, _DefaultsToNow(getattr(time, name), clock.time))
    time.asctime = _DefaultsToNow(time.asctime, lambda: localtime(clock.time()))
    time.strftime = _DefaultsToFormattedNow(time.strftime, lambda: localtime(clock.time()))
    return True


class _DefaultsToNow:
    """``function(value=None)`` called with ``now()`` when no value is given. A callable
    object, not a function: stored as a class attribute (``logging.Formatter.converter =
    time.localtime``) it must not become a method, as the builtin it replaces does not."""

    def __init__(self, function: Any, now: Any) -> None:
        self._function = function
        self._now = now

    def __call__(self, value: Any = None) -> Any:
        return self._function(self._now() if value is None else value)


class _DefaultsToFormattedNow(_DefaultsToNow):
    """``strftime(format, t=None)``."""

    def __call__(self, format: Any, value: Any = None) -> Any:  # noqa: A002 (time's name)
        return self._function(format, self._now() if value is None else value)
