"""What the fuzzer knows of the cluster it generates requests for (pure data, no I/O).

Generation is a pure function of ``(seed, index, FuzzContext)``: the context names the topics
that exist (so valid requests name real partitions), which of them a request may damage, and
the broker ids. ``FuzzContext.default()`` is a fixed context for unit tests; the runner builds
the live one from the cluster's metadata before the first case.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

__all__ = ["FuzzContext", "TopicInfo", "case_tag", "parse_case_tags"]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: int
    topic_id: uuid.UUID = uuid.UUID(int=0)


@dataclass(frozen=True)
class FuzzContext:
    """``canary`` is produced to (its log is checked at the end) but never named by a
    destructive request; ``scratch`` topics may be deleted, reconfigured, truncated or
    reassigned; ``scratch_names`` are names destructive requests may create or delete (a
    small pool, so the topic count stays bounded however many cases run)."""

    canary: TopicInfo
    scratch: tuple[TopicInfo, ...]
    others: tuple[TopicInfo, ...] = ()
    scratch_names: tuple[str, ...] = ("fuzz-scratch-0", "fuzz-scratch-1", "fuzz-scratch-2")
    groups: tuple[str, ...] = tuple(f"fuzz-group-{n}" for n in range(6))
    transactional_ids: tuple[str, ...] = tuple(f"fuzz-txn-{n}" for n in range(3))
    broker_ids: tuple[int, ...] = (1, 2, 3)
    #: Broker ids destructive requests (UnregisterBroker, broker configs) may name: none exist.
    absent_broker_ids: tuple[int, ...] = (101, 102, 4242)
    http_canary: str = "fuzz-canary-http"
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def default(cls) -> FuzzContext:
        return cls(
            canary=TopicInfo("fuzz-canary", 3, uuid.UUID(int=0xC0FFEE)),
            scratch=(TopicInfo("fuzz-scratch-0", 2, uuid.UUID(int=0x5C0)),),
            others=(TopicInfo("fuzz-health", 1, uuid.UUID(int=0x4EA1)),),
        )

    @property
    def readable_topics(self) -> tuple[TopicInfo, ...]:
        return (self.canary, *self.scratch, *self.others)


def case_tag(target: str, seed: int, index: int) -> str:
    """The marker every generated value carries, so a record found in a log names the case
    that wrote it."""
    return f"#{target}{seed}:{index}#"


def _decimal(text: str) -> bool:
    return text.isascii() and text.isdecimal()


def parse_case_tags(value: bytes | None) -> list[tuple[str, int, int]]:
    """Every ``(target, seed, index)`` tag found in ``value``."""
    found: list[tuple[str, int, int]] = []
    if not value:
        return found
    text = value.decode("latin-1")
    start = 0
    while True:
        start = text.find("#", start)
        if start < 0:
            return found
        end = text.find("#", start + 1)
        if end < 0:
            return found
        body = text[start + 1 : end]
        target = body[:1]
        seed, colon, index = body[1:].partition(":")
        # ASCII digits only: a mutated byte may be a latin-1 digit int() refuses ("³").
        if target.isalpha() and colon and _decimal(seed) and _decimal(index):
            found.append((target, int(seed), int(index)))
            start = end + 1
        else:
            start = end
