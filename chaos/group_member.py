"""One consumer-group member in its own process, so the group workload can SIGKILL it.

    python -m flux.chaos.group_member CLIENT BOOTSTRAP GROUP TOPIC

CLIENT is ``confluent`` or ``flux``. A secured cluster's client settings (Kafka's dotted names,
e.g. ``security.protocol``, ``sasl.password``) come as a JSON object in the environment
variable ``FLUX_CHAOS_CLIENT_CONFIG`` (not on the command line, which ``ps`` shows to every
user). The member subscribes to TOPIC, polls, and after each
poll that returned records commits the next offsets of those partitions synchronously. It
writes its ops to stdout as JSON Lines ``{"type", "f", "value", "time"}`` (``time`` on
``time.monotonic``, the machine-wide clock the parent's history uses), flushed per line; the
parent (``flux.chaos.workloads.GroupWorkload``) gives them the member's process name. On every
assignment it records ``assign`` and the offsets it found ``committed``. Runs until killed or
SIGTERM (then it leaves the group).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

__all__ = ["CLIENT_CONFIG_ENV", "SESSION_TIMEOUT_MS", "main"]

#: The environment variable holding the client settings of a secured cluster (JSON object).
CLIENT_CONFIG_ENV = "FLUX_CHAOS_CLIENT_CONFIG"

#: The broker's minimum session timeout: a SIGKILLed member's partitions move after this.
SESSION_TIMEOUT_MS = 6000
_POLL_TIMEOUT_S = 0.5
_POLL_RECORDS = 100


class _Stopped(Exception):
    """SIGTERM: leave the group and exit."""


def _emit(type: str, f: str, value: Any = None) -> None:
    line = json.dumps({"type": type, "f": f, "value": value, "time": time.monotonic()})
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _complete(f: str, value: Any, call: Any) -> Any:
    """Emit invoke, run ``call``, emit ok with its result (or info with the error)."""
    _emit("invoke", f, value)
    try:
        result = call()
    except _Stopped:
        raise
    except Exception as error:  # any client error: the outcome is unknown
        _emit("info", f, {**(value or {}), "error": f"{type(error).__name__}: {error}"})
        return None
    _emit("ok", f, result)
    return result


def _next_offsets(records: list[list[Any]]) -> list[list[int]]:
    last: dict[int, int] = {}
    for partition, offset, _ in records:
        last[partition] = max(last.get(partition, -1), offset)
    return [[partition, offset + 1] for partition, offset in sorted(last.items())]


def run_confluent(
    bootstrap: str, group: str, topic: str, client_config: dict[str, str] | None = None
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **(client_config or {}),
            "bootstrap.servers": bootstrap,
            "log_level": 2,  # librdkafka: critical only; failures are expected here
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range",
            "topic.metadata.refresh.interval.ms": 1000,
            "reconnect.backoff.max.ms": 500,
        }
    )

    def on_assign(consumer: Any, partitions: list[Any]) -> None:
        _emit("ok", "assign", {"partitions": sorted(p.partition for p in partitions)})

        def committed() -> dict[str, Any]:
            found = consumer.committed(partitions, timeout=5)
            offsets = [[p.partition, p.offset] for p in found if p.offset >= 0]
            return {"group": group, "offsets": sorted(offsets)}

        _complete("committed", {"group": group}, committed)

    consumer.subscribe([topic], on_assign=on_assign)
    try:
        while True:
            messages = consumer.consume(num_messages=_POLL_RECORDS, timeout=_POLL_TIMEOUT_S)
            records = [
                [m.partition(), m.offset(), m.value().decode()]
                for m in messages
                if m.error() is None
            ]
            if not records:
                continue
            _emit("invoke", "poll", None)
            _emit("ok", "poll", {"records": records})
            offsets = _next_offsets(records)

            def commit(offsets: list[list[int]] = offsets) -> dict[str, Any]:
                answer = consumer.commit(
                    offsets=[TopicPartition(topic, p, o) for p, o in offsets],
                    asynchronous=False,
                )
                errors = [str(tp.error) for tp in answer or () if tp.error is not None]
                if errors:
                    raise RuntimeError("; ".join(errors))
                return {"group": group, "offsets": offsets}

            _complete("commit", {"group": group, "offsets": offsets}, commit)
    except _Stopped:
        consumer.close()


def run_flux(
    bootstrap: str, group: str, topic: str, client_config: dict[str, str] | None = None
) -> None:
    from flux.sdk import Admin, GroupConsumer

    security = client_config or None
    admin = Admin(bootstrap, timeout_s=5, security=security)

    def on_assign(assigned: list[tuple[str, int]]) -> None:
        _emit("ok", "assign", {"partitions": sorted(p for _, p in assigned)})

        def committed() -> dict[str, Any]:
            mine = {p for _, p in assigned}
            offsets = [
                [p, o]
                for (t, p), o in admin.committed_offsets(group).items()
                if t == topic and p in mine and o >= 0
            ]
            return {"group": group, "offsets": sorted(offsets)}

        _complete("committed", {"group": group}, committed)

    consumer = GroupConsumer(
        bootstrap,
        group,
        topics=[topic],
        client_id="chaos-member",
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=500,
        on_assign=on_assign,
        timeout_s=10,
        security=security,
    )
    try:
        while True:
            try:
                polled = consumer.poll(timeout_s=_POLL_TIMEOUT_S, max_records=_POLL_RECORDS)
            except _Stopped:
                raise
            except Exception as error:  # the next poll rejoins or retries
                _emit("invoke", "poll", None)
                _emit("info", "poll", {"error": f"{type(error).__name__}: {error}"})
                continue
            records = [[r.partition, r.offset, (r.value or b"").decode()] for r in polled]
            if not records:
                continue
            _emit("invoke", "poll", None)
            _emit("ok", "poll", {"records": records})
            offsets = _next_offsets(records)

            def commit(offsets: list[list[int]] = offsets) -> dict[str, Any]:
                # GroupConsumer commits the position of every assigned partition, which after
                # this poll is the next offset of each partition it returned records of.
                consumer.commit()
                return {"group": group, "offsets": offsets}

            _complete("commit", {"group": group, "offsets": offsets}, commit)
    except _Stopped:
        consumer.close()
        admin.close()


def main() -> None:
    client, bootstrap, group, topic = sys.argv[1:5]

    def stop(*_: object) -> None:
        raise _Stopped

    signal.signal(signal.SIGTERM, stop)
    client_config = json.loads(os.environ.get(CLIENT_CONFIG_ENV) or "{}")
    (run_confluent if client == "confluent" else run_flux)(bootstrap, group, topic, client_config)


if __name__ == "__main__":
    main()
