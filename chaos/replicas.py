"""The replica check: after the faults healed, read every replica of the workload topic from
the nodes' data directories and record what each holds, for the checker to compare.

Kafka's promise under ``acks=all`` is about the committed log, and a reassignment copies that
log to new brokers while old ones leave: once nothing writes the topic any more and no
reassignment runs, every replica of a partition must hold the same records (offsets and values)
as the others and as the final read, which read the leader to its high watermark. Reading the
files (``<data_dir>/<topic>-<partition>/<base offset>.log``, record batches v2 end to end,
DESIGN.md §4) rather than asking the brokers keeps the check independent of the code it checks:
a follower's log is never served to clients, so only its bytes can show a divergence.

``replica_check`` records one op of process ``replica-checker``, f ``replicas``:

* ``ok`` ``{"topic", "replication_factor", "reassignments_running": [{"partition",
  "replicas", "adding", "removing"}], "partitions": [{"partition", "replicas", "isr",
  "leader", "logs": [{"node", "log_end_offset", "records", "digest", "error"}], "stray":
  [nodes], "first_difference": {"offset", "values": {node: value}} or None}]}``. A log's
  ``digest`` is ``checker.records_digest`` of its records; ``stray`` are nodes outside the
  replicas that still hold a directory of the partition.
* ``info`` ``{"error"}`` when the logs cannot be read here (a backend without reachable data
  directories).

The check waits (up to ``limits.STABILIZE_TIMEOUT_S``) until no reassignment runs and every
partition's replicas agree, since a follower may still be fetching the last records; what it
records after the wait is what the checker judges.

Thread-safety: none needed; it runs on the runner's thread after the workloads stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flux.protocol.errors import CorruptRecordError
from flux.protocol.records import decode_records, iter_batches
from flux.sdk import Admin, FluxError

from . import limits
from .checker import records_digest
from .history import History
from .nemesis import ClusterControl, NemesisUnsupportedError, wait_reassignments_done

__all__ = ["ReplicaLog", "read_replica_log", "replica_check"]

PROCESS = "replica-checker"


@dataclass(frozen=True, slots=True)
class ReplicaLog:
    """The data records of one replica directory, in log order (``records``: (offset, value)),
    or why it could not be read (``error``; ``records`` then holds what was read before)."""

    node: int
    records: list[tuple[int, str]]
    log_end_offset: int
    error: str | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "log_end_offset": self.log_end_offset,
            "records": len(self.records),
            "digest": records_digest(self.records),
            "error": self.error,
        }


def read_replica_log(node: int, directory: Path) -> ReplicaLog:
    """Every data record of the segments in ``directory`` (control batches skipped; a batch
    cut short at the end of the newest segment, still being written, is left out)."""
    records: list[tuple[int, str]] = []
    log_end_offset = 0
    if not directory.is_dir():
        return ReplicaLog(node, records, log_end_offset, "no replica directory")
    read_bytes = 0
    try:
        for segment in sorted(directory.glob("*.log")):
            data = segment.read_bytes()
            read_bytes += len(data)
            if read_bytes > limits.REPLICA_LOG_BYTES_MAX:
                return ReplicaLog(node, records, log_end_offset, "replica log too large to read")
            for header, batch in iter_batches(data):
                log_end_offset = header.next_offset
                if header.is_control:
                    continue
                records.extend(
                    (record.offset, (record.value or b"").decode(errors="replace"))
                    for record in decode_records(batch)
                )
    except FileNotFoundError:
        return ReplicaLog(node, records, log_end_offset, "replica directory removed while read")
    except CorruptRecordError as error:
        return ReplicaLog(node, records, log_end_offset, f"corrupt batch: {error}")
    return ReplicaLog(node, records, log_end_offset)


def replica_check(
    history: History,
    control: ClusterControl,
    topic: str,
    *,
    replication_factor: int,
    timeout_s: float = limits.STABILIZE_TIMEOUT_S,
    log: Callable[[str], None] = print,
) -> bool:
    """Record the ``replicas`` op described in the module docstring; True if it is ``ok``."""
    invocation = history.invoke(PROCESS, "replicas", {"topic": topic})
    deadline = time.monotonic() + timeout_s
    bootstrap = control.bootstrap_servers()
    client_config = control.client_config()
    running = wait_reassignments_done(bootstrap, timeout_s, client_config=client_config)
    layout: dict[int, dict[str, Any]] = {}
    logs: dict[int, dict[int, ReplicaLog]] = {}
    strays: dict[int, list[int]] = {}
    while True:
        try:
            layout = _layout(bootstrap, topic, client_config)
            logs, strays = _read_logs(control, topic, layout)
        except NemesisUnsupportedError as error:
            history.complete(invocation, "info", {"error": str(error)})
            log(f"chaos: replica check skipped: {error}")
            return False
        except FluxError as error:
            if time.monotonic() >= deadline:
                history.complete(invocation, "info", {"error": f"{type(error).__name__}: {error}"})
                return False
            time.sleep(0.5)  # the cluster is still settling
            continue
        if all(_agree(by_node) for by_node in logs.values()) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)  # a follower may still be fetching the last records
    partitions = [
        {
            **layout[p],
            "logs": [logs[p][node].summary() for node in sorted(logs[p])],
            "stray": strays.get(p, []),
            "first_difference": _first_difference(logs[p]),
        }
        for p in sorted(layout)
    ]
    history.complete(
        invocation,
        "ok",
        {
            "topic": topic,
            "replication_factor": replication_factor,
            "reassignments_running": [
                {"partition": p, **state} for (t, p), state in sorted(running.items())
            ],
            "partitions": partitions,
        },
    )
    compared = sum(len(by_node) for by_node in logs.values())
    log(f"chaos: replica check read {compared} replica logs of {len(layout)} partitions")
    return True


def _layout(
    bootstrap: str, topic: str, client_config: Mapping[str, str]
) -> dict[int, dict[str, Any]]:
    with Admin(bootstrap, timeout_s=limits.OP_TIMEOUT_S, security=client_config or None) as admin:
        description = admin.describe_topic(topic)
    return {
        p.partition: {
            "partition": p.partition,
            "replicas": list(p.replicas),
            "isr": list(p.isr),
            "leader": p.leader,
        }
        for p in description.partitions
    }


def _read_logs(
    control: ClusterControl, topic: str, layout: Mapping[int, Mapping[str, Any]]
) -> tuple[dict[int, dict[int, ReplicaLog]], dict[int, list[int]]]:
    """Each partition's replica logs by node, and the nodes outside its replicas that still
    hold a directory of it."""
    logs: dict[int, dict[int, ReplicaLog]] = {}
    strays: dict[int, list[int]] = {}
    for p, state in layout.items():
        name = f"{topic}-{p}"
        logs[p] = {
            node: read_replica_log(node, control.data_dir(node) / name)
            for node in state["replicas"]
        }
        strays[p] = [
            node
            for node in control.nodes()
            if node not in state["replicas"] and (control.data_dir(node) / name).is_dir()
        ]
    return logs, strays


def _agree(by_node: Mapping[int, ReplicaLog]) -> bool:
    shapes = {(replica.log_end_offset, tuple(replica.records)) for replica in by_node.values()}
    return len(shapes) == 1 and all(replica.error is None for replica in by_node.values())


def _first_difference(by_node: Mapping[int, ReplicaLog]) -> dict[str, Any] | None:
    """The lowest offset at which the replicas' logs do not all hold the same value (a
    missing record is None), or None when they agree record for record."""
    at = {node: dict(replica.records) for node, replica in by_node.items()}
    offsets = sorted({offset for records in at.values() for offset in records})
    for offset in offsets:
        values = {node: records.get(offset) for node, records in sorted(at.items())}
        if len(set(values.values())) > 1:
            return {"offset": offset, "values": {str(n): v for n, v in values.items()}}
    return None
