"""Named bounds of the chaos harness, kept together (STYLE.md: limits on everything)."""

from __future__ import annotations

__all__ = [
    "EXAMPLES_PER_ANOMALY",
    "FINAL_READ_TIMEOUT_S",
    "HISTORY_OPS_MAX",
    "NEMESIS_STEP_TIMEOUT_S",
    "OP_TIMEOUT_S",
    "POLL_RECORDS_MAX",
    "REPLICA_LOG_BYTES_MAX",
    "SEND_RATE_PER_PRODUCER",
    "STABILIZE_TIMEOUT_S",
]

#: A history holds at most this many ops (about 200 bytes each as JSON): a 10-minute run at
#: the default rates stays far below it.
HISTORY_OPS_MAX = 2_000_000
#: A report quotes at most this many examples of each anomaly (the counts are exact).
EXAMPLES_PER_ANOMALY = 8
#: Sends per second of one producer (a sleep paces it): enough for thousands of values per
#: partition in a short run, few enough that two cores also run the cluster.
SEND_RATE_PER_PRODUCER = 40
#: One client operation (send, poll, commit) gives up after this long: the outcome is then
#: ``info`` (unknown), never ``fail``.
OP_TIMEOUT_S = 10.0
#: One poll returns at most this many records.
POLL_RECORDS_MAX = 500
#: One nemesis step (kill, restart and wait for readiness, corrupt) gives up after this long.
NEMESIS_STEP_TIMEOUT_S = 60.0
#: After the faults heal, the cluster gets this long to elect leaders and refill every ISR.
STABILIZE_TIMEOUT_S = 60.0
#: The final read of every partition up to its high watermark gives up after this long.
FINAL_READ_TIMEOUT_S = 60.0
#: The replica check reads at most this many bytes of segments per replica (a 10-minute run
#: at the default rates writes a few MiB per partition).
REPLICA_LOG_BYTES_MAX = 256 * 1024 * 1024
