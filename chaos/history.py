"""The operation history of a chaos run: what every client and the nemesis did, and how it ended.

Jepsen's model: an operation is *invoked* by a process and *completes* with one of three
outcomes:

* ``ok``: it happened (a send was acknowledged, a poll returned these records);
* ``fail``: it certainly did not happen (the client proved nothing was written);
* ``info``: nobody knows (a timeout, a lost connection, a killed client). An ``info`` is never a
  failure: an ``info`` send may have been written, and the checker must allow that.

A ``process`` is one logical client (a producer thread, a consumer, a group member, the
nemesis). A process runs one operation at a time, so its invoke is always followed by its own
completion before its next invoke; a process that crashes mid-operation is completed with
``info`` by its owner and gets a new process name for its next life.

Every op is ``(index, time, process, type, f, value)``: ``index`` is the position in the
history, ``time`` seconds on the run's monotonic clock (``time.monotonic``, which on Linux is
one clock for every process on the machine, so group members in child processes can stamp
their own ops). The history is saved as JSON Lines, one op per line, next to the run's logs.

Thread-safety: ``History`` is appended to by many worker threads; ``append``, ``invoke`` and
``complete`` take one lock. Ops are frozen; the list only grows.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import limits

__all__ = [
    "COMPLETION_TYPES",
    "OP_TYPES",
    "History",
    "HistoryFullError",
    "Op",
    "load",
    "pairs",
    "save",
]

OP_TYPES = ("invoke", "ok", "fail", "info")
COMPLETION_TYPES = ("ok", "fail", "info")


class HistoryFullError(RuntimeError):
    """More ops than ``limits.HISTORY_OPS_MAX``: the run's rates or duration are too high."""


@dataclass(frozen=True, slots=True)
class Op:
    """One line of the history. ``value`` is plain JSON data (dicts, lists, str, int)."""

    index: int
    time: float
    process: str
    type: str
    f: str
    value: Any = None

    def __post_init__(self) -> None:
        assert self.type in OP_TYPES, self.type

    def to_json(self) -> str:
        return json.dumps(
            {
                "index": self.index,
                "time": round(self.time, 6),
                "process": self.process,
                "type": self.type,
                "f": self.f,
                "value": self.value,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, line: str) -> Op:
        data = json.loads(line)
        return cls(
            index=int(data["index"]),
            time=float(data["time"]),
            process=str(data["process"]),
            type=str(data["type"]),
            f=str(data["f"]),
            value=data.get("value"),
        )


class History:
    """An append-only, thread-safe list of ops with a shared clock (``time.monotonic`` unless
    one is injected, e.g. by tests)."""

    def __init__(
        self,
        ops: Iterable[Op] = (),
        *,
        clock: Callable[[], float] = time.monotonic,
        ops_max: int = limits.HISTORY_OPS_MAX,
    ) -> None:
        self._ops: list[Op] = list(ops)
        self._clock = clock
        self._ops_max = ops_max
        self._lock = threading.Lock()

    def ops(self) -> list[Op]:
        """A snapshot of the ops so far."""
        with self._lock:
            return list(self._ops)

    def now(self) -> float:
        return self._clock()

    def append(
        self, process: str, type: str, f: str, value: Any = None, *, time: float | None = None
    ) -> Op:
        """Add one op (stamped now unless ``time`` is given) and return it."""
        with self._lock:
            if len(self._ops) >= self._ops_max:
                raise HistoryFullError(f"history holds {self._ops_max} ops already")
            op = Op(
                index=len(self._ops),
                time=self._clock() if time is None else time,
                process=process,
                type=type,
                f=f,
                value=value,
            )
            self._ops.append(op)
            return op

    def invoke(self, process: str, f: str, value: Any = None) -> Op:
        return self.append(process, "invoke", f, value)

    def complete(self, invocation: Op, type: str, value: Any = None) -> Op:
        """Complete ``invocation`` (same process and f) with ``ok``, ``fail`` or ``info``."""
        assert invocation.type == "invoke" and type in COMPLETION_TYPES, (invocation, type)
        return self.append(invocation.process, type, invocation.f, value)


def save(ops: Iterable[Op], path: Path) -> None:
    """Write ``ops`` as JSON Lines."""
    with open(path, "w", encoding="utf-8") as output:
        for op in ops:
            output.write(op.to_json())
            output.write("\n")


def load(path: Path) -> list[Op]:
    """Read a JSON Lines history written by ``save``."""
    with open(path, encoding="utf-8") as source:
        return [Op.from_json(line) for line in source if line.strip()]


def pairs(ops: Iterable[Op]) -> list[tuple[Op, Op | None]]:
    """Each invocation with its completion (None if the history ends before it completed),
    in invocation order."""
    open_by_process: dict[str, list[Any]] = {}
    entries: list[list[Any]] = []
    for op in ops:
        if op.type == "invoke":
            entry = [op, None]
            open_by_process[op.process] = entry
            entries.append(entry)
        else:
            entry = open_by_process.pop(op.process, None)
            if entry is not None:
                entry[1] = op
    return [(invocation, completion) for invocation, completion in entries]
