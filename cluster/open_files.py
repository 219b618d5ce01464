"""The node process's open-file limit (``RLIMIT_NOFILE``).

A broker holds one file descriptor for each log segment of each replica it hosts
(``flux.storage``) and one for each connection, so a node with a few thousand partitions needs
far more than the 1,024 descriptors many systems give a process by default (its *soft* limit).
Past the limit every open fails with ``EMFILE``: a segment roll or a new replica fails like a
broken disk (the log directory goes offline and the broker is fenced, docs/operations.md), and
new connections are refused.

The JVM raises its soft limit to the hard limit at start (HotSpot's ``-XX:+MaxFDLimit``, on by
default), so a Kafka broker gets the hard limit without asking; a Python process keeps the
soft one. ``raise_open_file_limit`` does what the JVM does, and the node logs the limit it runs
with, with a WARNING when it is below ``LOW_OPEN_FILE_LIMIT``.
"""

from __future__ import annotations

import resource
from pathlib import Path

__all__ = ["LOW_OPEN_FILE_LIMIT", "low_limit_advice", "raise_open_file_limit"]

#: Below this many descriptors the node warns at start: enough for the default 1,000
#: connections and a few thousand segments.
LOW_OPEN_FILE_LIMIT = 10_000

_NR_OPEN = Path("/proc/sys/fs/nr_open")


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard one (capped at the kernel's
    ``fs.nr_open`` when the hard limit is unlimited); the ``(soft, hard)`` limits the process
    has afterwards. A limit the system refuses to raise is left as it was."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            target = int(_NR_OPEN.read_text())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def low_limit_advice(limit: int) -> str:
    """What an operator does about a low limit (the start-up WARNING and the message of a log
    directory that ran out of descriptors end with it)."""
    return (
        f"each log segment of each replica and each connection holds one file descriptor; "
        f"raise the open-file limit (now {limit}) to at least {LOW_OPEN_FILE_LIMIT} "
        f"(`ulimit -n` in the shell that starts the node, LimitNOFILE= in a systemd unit, "
        f"--ulimit nofile= for docker), then restart the node"
    )
