"""Cases for the broker-to-broker doors (pure, seeded): ``replication_case(seed, index, ctx)``.

A bogus peer (wrong or missing broker epoch, a real broker's id, the leader's own id, ids out
of range) opens the replication fetch session (``GET /replication/session``, a WebSocket of
binary fetch requests, ``cluster/replication/wire.py``) and sends valid and malformed frames:
bit flips, truncations, lying counts and string lengths, unknown format versions, trailing
bytes, text frames, empty frames, more queued requests than a session may hold. Other cases
open the forwarded-produce link (``GET /internal/produce-link``, JSON text frames) or call the
``/internal/...`` JSON endpoints with malformed bodies. Every one of them must be refused (an
error answer or a closed socket) without disturbing real replication: the runner checks the
canary's ISR and high watermarks afterwards.

Requests that could write name only scratch topics (and the canary only with bodies that
cannot be valid).
"""

from __future__ import annotations

import json
import random
import struct
from dataclasses import dataclass

from .context import FuzzContext
from .kafka_requests import case_rng

__all__ = ["ReplicationCase", "decode_fetch_answer", "encode_fetch_request", "replication_case"]

# The replication wire format (``cluster/replication/wire.py``), written again here: ``flux.chaos``
# imports only ``flux.sdk`` and ``flux.protocol`` of ours, and a fuzzer should not share the
# code it tests anyway. An entry is (topic, partition, topic_id, fetch_offset,
# last_fetched_epoch, leader_epoch, partition_max_bytes).
FetchEntry = tuple[str, int, str, int, int, int, int]
_FORMAT_VERSION = 1


@dataclass(frozen=True)
class FetchRequest:
    max_wait_ms: int
    max_bytes: int
    entries: list[FetchEntry]
    forgotten: list[tuple[str, int]]


def _key(topic: str, partition: int) -> bytes:
    encoded = topic.encode()
    return struct.pack(">H", len(encoded)) + encoded + struct.pack(">i", partition)


def encode_fetch_request(request: FetchRequest) -> bytes:
    parts = [
        struct.pack(
            ">BiiI", _FORMAT_VERSION, request.max_wait_ms, request.max_bytes, len(request.entries)
        )
    ]
    for topic, partition, topic_id, offset, last_epoch, leader_epoch, max_bytes in request.entries:
        raw_id = topic_id.encode()
        parts.append(_key(topic, partition) + struct.pack(">B", len(raw_id)) + raw_id)
        parts.append(struct.pack(">qiii", offset, last_epoch, leader_epoch, max_bytes))
    parts.append(struct.pack(">I", len(request.forgotten)))
    parts.extend(_key(topic, partition) for topic, partition in request.forgotten)
    return b"".join(parts)


def decode_fetch_answer(body: bytes) -> list[tuple[str, int, int, int]]:
    """``(topic, partition, error_code, records_length)`` of each partition of an answer;
    raises ``ValueError`` if it cannot be read."""
    version, count = struct.unpack_from(">BI", body, 0)
    if version != _FORMAT_VERSION:
        raise ValueError(f"answer format version {version}")
    position = 5
    found = []
    for _ in range(count):
        (size,) = struct.unpack_from(">I", body, position)
        end = position + 4 + size
        (topic_length,) = struct.unpack_from(">H", body, position + 4)
        start = position + 6
        topic = body[start : start + topic_length].decode()
        fixed = struct.unpack_from(">ihqqiiqI", body, start + topic_length)
        partition, error_code, records_length = fixed[0], fixed[1], fixed[-1]
        found.append((topic, partition, error_code, records_length))
        position = end
    return found


@dataclass(frozen=True)
class ReplicationCase:
    seed: int
    index: int
    #: "session" (replication WebSocket), "link" (produce-link WebSocket) or "http".
    door: str
    method: str
    path: str
    #: WebSocket frames: (True, bytes) binary, (False, text) text.
    frames: tuple[tuple[bool, bytes | str], ...]
    body: bytes | None
    mutations: tuple[str, ...]

    @property
    def label(self) -> str:
        return (
            f"replication seed={self.seed} index={self.index} {self.door} "
            f"{self.path[:80]} {'+'.join(self.mutations) or 'valid'}"
        )


def replication_case(seed: int, index: int, context: FuzzContext) -> ReplicationCase:
    rng = case_rng(seed, index, "replication")
    roll = rng.random()
    if roll < 0.6:
        return _session_case(rng, seed, index, context)
    if roll < 0.8:
        return _link_case(rng, seed, index, context)
    return _internal_http_case(rng, seed, index, context)


def _fetch_request(rng: random.Random, context: FuzzContext) -> FetchRequest:
    topics = [context.canary, *context.scratch]
    entries = []
    for _ in range(rng.randint(0, 3)):
        topic = rng.choice(topics)
        entries.append(
            (
                topic.name,
                rng.randrange(topic.partitions),
                str(topic.topic_id) if rng.random() < 0.5 else rng.randbytes(4).hex(),
                rng.choice((0, 1, 10, 1 << 40, -1)),
                rng.choice((-1, 0, 1)),
                rng.choice((-1, 0, 1, 5)),
                rng.choice((1024, 1 << 20, 0, -1)),
            )
        )
    forgotten = [(context.canary.name, 0)] if rng.random() < 0.2 else []
    return FetchRequest(rng.choice((0, 10, 100)), rng.choice((1 << 20, 0, -1)), entries, forgotten)


def _session_case(
    rng: random.Random, seed: int, index: int, context: FuzzContext
) -> ReplicationCase:
    replica = rng.choice((*context.broker_ids, -1, 0, 2**31 - 1, "x", "", None))
    epoch = rng.choice(("bogus", "", "0", "1" * 300, None))
    query = []
    if replica is not None:
        query.append(f"replica_id={replica}")
    if epoch is not None:
        query.append(f"broker_epoch={epoch}")
    frames: list[tuple[bool, bytes | str]] = []
    mutations = []
    for _ in range(rng.choice((1, 1, 2, 3, 20))):
        frame = encode_fetch_request(_fetch_request(rng, context))
        choice = rng.randrange(9)
        if choice == 0:
            mutations.append("valid")
        elif choice == 1:
            data = bytearray(frame)
            for _ in range(rng.randint(1, 6)):
                bit = rng.randrange(len(data) * 8)
                data[bit // 8] ^= 1 << (bit % 8)
            frame = bytes(data)
            mutations.append("bitflip")
        elif choice == 2:
            frame = frame[: rng.randrange(len(frame))]
            mutations.append("truncate")
        elif choice == 3:
            frame = frame[:9] + struct.pack(">I", rng.choice((100_001, 2**32 - 1, 50))) + frame[13:]
            mutations.append("count")
        elif choice == 4:
            frame = bytes([rng.choice((0, 2, 255))]) + frame[1:]
            mutations.append("version")
        elif choice == 5:
            frame = frame + rng.randbytes(rng.randint(1, 8))
            mutations.append("trailing")
        elif choice == 6:
            frames.append((False, rng.choice(("hello", "{}", "\x00"))))
            mutations.append("text")
            continue
        elif choice == 7:
            frame = b""
            mutations.append("empty")
        else:
            # A topic length that runs past the frame.
            frame = frame[:13] + struct.pack(">H", 0xFFFF) + frame[15:]
            mutations.append("topic_length")
        frames.append((True, frame))
    path = "/replication/session" + ("?" + "&".join(query) if query else "")
    return ReplicationCase(
        seed, index, "session", "GET", path, tuple(frames), None, tuple(dict.fromkeys(mutations))
    )


def _link_case(rng: random.Random, seed: int, index: int, context: FuzzContext) -> ReplicationCase:
    scratch = rng.choice(context.scratch_names)
    frames: list[tuple[bool, bytes | str]] = []
    mutations = []
    for number in range(rng.randint(1, 3)):
        choice = rng.randrange(7)
        call: object
        if choice == 0:
            call = {"id": number, "topic": scratch, "partition": 0, "records": [{"value": "x"}]}
            mutations.append("valid_shape")
        elif choice == 1:
            call = {
                "id": number,
                "topic": scratch,
                "partition": rng.choice(("x", None, -1, 10**20, 1.5)),
                "records": [],
            }
            mutations.append("partition")
        elif choice == 2:
            call = {
                "id": number,
                "topic": rng.choice((None, 5, "", "\ud800", scratch)),
                "partition": 0,
                "records": rng.choice((None, "x", 5, [None], [5], [{}], [{"value": 5}], {"a": 1})),
            }
            mutations.append("records")
        elif choice == 3:
            call = rng.choice(([], "x", 5, None))
            mutations.append("not_object")
        elif choice == 4:
            frames.append((True, rng.randbytes(rng.randint(0, 64))))
            mutations.append("binary")
            continue
        elif choice == 5:
            frames.append((False, '{"id": ' + "[" * 50_000))
            mutations.append("deep")
            continue
        else:
            # The canary only with a body that cannot be valid (no records).
            call = {
                "id": number,
                "topic": context.canary.name,
                "partition": 0,
                "records": rng.choice(([], None, [{}])),
            }
            mutations.append("canary_invalid")
        frames.append((False, json.dumps(call)))
    return ReplicationCase(
        seed, index, "link", "GET", "/internal/produce-link", tuple(frames), None, tuple(mutations)
    )


_INTERNAL_BODIES = (
    b"",
    b"{",
    b"[]",
    b"null",
    b'{"records": 5}',
    b'{"records": [5]}',
    b'{"records": [{"value": null}]}',
    b'{"records": [{}]}',
    b'{"offsets": "x"}',
    b'{"offsets": [{"topic": 5}]}',
    b'{"markers": [{}]}',
    b'{"a": "\\ud800"}',
)


def _internal_http_case(
    rng: random.Random, seed: int, index: int, context: FuzzContext
) -> ReplicationCase:
    scratch = rng.choice(context.scratch_names)
    group = rng.choice(context.groups)
    method, path = rng.choice(
        (
            (
                "POST",
                f"/internal/produce/{scratch}/{rng.choice(('0', '-1', 'x', '99999999999999999999'))}",
            ),
            ("POST", f"/internal/produce/{context.canary.name}/0"),  # only invalid bodies
            ("GET", "/internal/committed"),
            ("POST", f"/internal/groups/{group}/commit"),
            ("GET", f"/internal/groups/{group}/offsets"),
            ("GET", "/internal/groups"),
            ("POST", "/internal/txn-markers"),
            ("GET", "/replication/session"),  # not a WebSocket upgrade
            ("POST", "/replication/session?replica_id=2&broker_epoch=x"),
        )
    )
    body = rng.choice(_INTERNAL_BODIES)
    if "/internal/produce/" in path and context.canary.name in path:
        body = rng.choice((b'{"records": []}', b'{"records": 5}', b"{", b'{"records": [5]}'))
    return ReplicationCase(seed, index, "http", method, path, (), body, ("body",))
