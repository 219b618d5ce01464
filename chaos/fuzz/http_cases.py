"""Cases for the broker's HTTP API (pure, seeded): ``http_case(seed, index, context)``.

Each case starts from a valid request of one endpoint (``POST /publish``, ``POST /topics``,
``POST /topics/<t>/messages``, reads, ``/subscribe``, ``/unsubscribe``, subscriptions, groups,
cluster, metrics) and is then, most of the time, mutated: malformed JSON (truncated, wrong
nesting, deep nesting, NaN, lone surrogates, invalid UTF-8), wrong types and huge, negative or
fractional numbers in each field, missing and unknown fields, strange path segments and query
parameters, wrong methods, bad or lying headers (content type, charset, content length),
oversized bodies; or it is raw bytes on the socket (a broken request line, huge headers, a
body shorter than announced) - ``HttpCase.raw``.

Bodies that publish to the context's HTTP canary carry the case's tag in every value, so the
runner can tell which case wrote any record it finds there. Requests that could delete
something name only scratch topics, the fuzzer's groups and its own subscriptions.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from .context import FuzzContext, case_tag
from .kafka_requests import case_rng

__all__ = ["HttpCase", "http_case", "ENDPOINTS"]

#: A subscriber address nothing listens on (port 9, discard): deliveries fail and retry.
DEAD_SUBSCRIBER = "http://127.0.0.1:9/poll"


@dataclass(frozen=True)
class HttpCase:
    seed: int
    index: int
    endpoint: str
    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes | None
    mutations: tuple[str, ...]
    #: Raw bytes to write on a fresh socket instead of an HTTP request (then half-close).
    raw: bytes | None = None
    #: The case publishes to the HTTP canary (its tag may appear there if answered 2xx).
    canary: bool = False

    @property
    def label(self) -> str:
        return (
            f"http seed={self.seed} index={self.index} {self.method} {self.path[:80]} "
            f"{'+'.join(self.mutations) or 'valid'}"
        )


# --------------------------------------------------------------------------- valid requests

Template = tuple[str, str, Any, bool]  # method, path, JSON body (or None), canary


def _message_value(tag: str, rng: random.Random) -> str:
    return tag + " " + "".join(rng.choice("abcdef0123") for _ in range(rng.randint(0, 16)))


def _publish(rng: random.Random, context: FuzzContext, tag: str) -> Template:
    body = {
        "id": tag + str(rng.randint(0, 9)),
        "message": _message_value(tag, rng),
        "topic": context.http_canary,
    }
    return "POST", "/publish", body, True


def _produce(rng: random.Random, context: FuzzContext, tag: str) -> Template:
    messages = []
    for _ in range(rng.randint(1, 3)):
        message: dict[str, Any] = {"value": _message_value(tag, rng)}
        if rng.random() < 0.5:
            message["key"] = "k" + str(rng.randint(0, 9))
        if rng.random() < 0.3:
            message["headers"] = {"h": "v"}
        if rng.random() < 0.2:
            message["partition"] = 0
        messages.append(message)
    return "POST", f"/topics/{context.http_canary}/messages", {"messages": messages}, True


def _create_topic(rng: random.Random, context: FuzzContext, tag: str) -> Template:
    body = {
        "name": rng.choice(context.scratch_names),
        "partitions": rng.randint(1, 2),
        "replication_factor": rng.randint(1, 3),
    }
    if rng.random() < 0.3:
        body["configs"] = {"retention.ms": "3600000"}
    return "POST", "/topics", body, False


def _delete_topic(rng: random.Random, context: FuzzContext, tag: str) -> Template:
    return "DELETE", f"/topics/{rng.choice(context.scratch_names)}", None, False


def _read(rng: random.Random, context: FuzzContext, tag: str) -> Template:
    topic = rng.choice([t.name for t in context.readable_topics] + [context.http_canary])
    query = f"?offset={rng.randint(0, 5)}&limit={rng.randint(1, 20)}"
    return "GET", f"/topics/{topic}/partitions/0/messages{query}", None, False


def _describe_topic(rng: random.Random, context: FuzzContext, tag: str) -> Template:
    topic = rng.choice([t.name for t in context.readable_topics])
    return "GET", f"/topics/{topic}", None, False


def _subscribe(rng: random.Random, context: FuzzContext, tag: str) -> Template:
    body: dict[str, Any] = {
        "address": DEAD_SUBSCRIBER,
        "topics": [context.http_canary],
        "readOld": False,
    }
    if rng.random() < 0.3:
        body["maxInFlight"] = rng.randint(1, 4)
    return "POST", "/subscribe", body, False


def _unsubscribe(rng: random.Random, context: FuzzContext, tag: str) -> Template:
    return (
        "POST",
        "/unsubscribe",
        {"address": DEAD_SUBSCRIBER, "topics": [context.http_canary]},
        False,
    )


def _get(path: str) -> Callable[[random.Random, FuzzContext, str], Template]:
    def template(rng: random.Random, context: FuzzContext, tag: str) -> Template:
        return "GET", path, None, False

    return template


def _group(rng: random.Random, context: FuzzContext, tag: str) -> Template:
    return "GET", f"/groups/{rng.choice(context.groups)}", None, False


def _subscription(rng: random.Random, context: FuzzContext, tag: str) -> Template:
    method = rng.choice(("GET", "GET", "DELETE"))
    return method, f"/subscriptions/s-{rng.randbytes(10).hex()}", None, False


ENDPOINTS: dict[str, tuple[float, Callable[[random.Random, FuzzContext, str], Template]]] = {
    "publish": (5.0, _publish),
    "produce": (4.0, _produce),
    "create_topic": (1.0, _create_topic),
    "delete_topic": (0.3, _delete_topic),
    "read": (2.0, _read),
    "describe_topic": (1.0, _describe_topic),
    "list_topics": (0.5, _get("/topics")),
    "subscribe": (0.7, _subscribe),
    "unsubscribe": (0.5, _unsubscribe),
    "subscriptions": (0.3, _get("/subscriptions")),
    "subscription": (0.5, _subscription),
    "groups": (0.3, _get("/groups")),
    "group": (0.5, _group),
    "cluster": (0.3, _get("/cluster")),
    "health": (0.2, _get("/health")),
    "ping": (0.2, _get("/ping")),
    "metrics": (0.1, _get("/metrics")),
}
_NAMES = list(ENDPOINTS)
_WEIGHTS = [ENDPOINTS[name][0] for name in _NAMES]


# ------------------------------------------------------------------------------- mutations

_STRANGE_VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    1.5,
    -(10**30),
    10**30,
    2**63,
    -(2**63) - 1,
    1e308,
    "",
    " ",
    "\ud800",
    "\x00",
    "..",
    "a/b",
    "x" * 300,
    "x" * 70000,
    [],
    [1, 2],
    {},
    {"a": {"b": []}},
    ["\ud800"],
    {"\ud800": "x"},
    "NaN",
)
_BAD_JSON = (
    b"",
    b"{",
    b"}",
    b"[",
    b"null",
    b"[]",
    b"1",
    b'"text"',
    b'{"a":}',
    b'{"a":1,}',
    b'{"message": NaN, "topic": "t"}',
    b'{"message": Infinity}',
    b"\xff\xfe{}",
    b'{"message": "\\ud800", "topic": "fuzz"}',
    b"{'single': 'quotes'}",
    b'{"a": 1} trailing',
    b"\x00" * 16,
)
_CONTENT_TYPES = (
    "text/plain",
    "application/json; charset=bogus-charset",
    "application/json; charset=utf-16",
    "multipart/form-data; boundary=x",
    "application/x-www-form-urlencoded",
    "",
    "\x7f",
    "application/json; charset=latin-1",
)
_PATH_SEGMENTS = (
    "%00",
    "..",
    "%2e%2e",
    "x" * 5000,
    "%ff%fe",
    "a%2Fb",
    "%F0%9F%92%A9",
    "-1",
    "99999999999999999999",
    "__consumer_offsets",
    " ",
    "%20",
    "NaN",
)


def http_case(seed: int, index: int, context: FuzzContext) -> HttpCase:
    """Case ``index`` of run ``seed`` against the HTTP API."""
    rng = case_rng(seed, index, "http")
    endpoint = rng.choices(_NAMES, _WEIGHTS)[0]
    tag = case_tag("h", seed, index)
    method, path, body, canary = ENDPOINTS[endpoint][1](rng, context, tag)
    headers: dict[str, str] = {}
    data = None if body is None else json.dumps(body).encode()
    if data is not None:
        headers["Content-Type"] = "application/json"
    roll = rng.random()
    if roll < 0.1:
        return HttpCase(
            seed, index, endpoint, method, path, tuple(headers.items()), data, (), canary=canary
        )
    if roll < 0.18:
        raw, name = _raw_request(rng, method, path, data)
        return HttpCase(
            seed, index, endpoint, method, path, (), None, (name,), raw=raw, canary=canary
        )
    mutations = []
    for _ in range(1 if rng.random() < 0.8 else 2):
        choice = rng.randrange(8)
        if choice in (0, 1, 2) and isinstance(body, dict) and body:
            body = _mutate_json(rng, body)
            data = _dumps(body)
            mutations.append("json_field")
        elif choice == 3:
            data = rng.choice(_BAD_JSON + (_deep_json(rng),))
            if method == "GET":
                method = "POST"
            mutations.append("bad_json")
        elif choice == 4:
            headers["Content-Type"] = rng.choice(_CONTENT_TYPES)
            if data is None:
                data = b"{}"
            mutations.append("content_type")
        elif choice == 5:
            path = _mutate_path(rng, path)
            mutations.append("path")
        elif choice == 6:
            method = rng.choice(("PUT", "PATCH", "DELETE", "GET", "POST", "OPTIONS"))
            mutations.append("method")
        else:
            data = b'{"messages": [' + b'{"value": "x"},' * rng.choice((5000, 300000)) + b"{}]}"
            mutations.append("large_body")
    if method == "DELETE" and not _names_scratch(path, context):
        # A mutated method must not turn a read of a real topic into its deletion: the
        # fuzzer's own accepted request would then "change" the canary. Deletes name scratch.
        path = f"/topics/{rng.choice(context.scratch_names)}"
    return HttpCase(
        seed,
        index,
        endpoint,
        method,
        path,
        tuple(headers.items()),
        data,
        tuple(mutations),
        canary=canary,
    )


def _names_scratch(path: str, context: FuzzContext) -> bool:
    segments = path.split("?")[0].split("/")
    if len(segments) >= 3 and segments[1] == "topics":
        return segments[2] in context.scratch_names
    return True  # subscriptions, groups: the fuzzer's own or absent


def _dumps(body: Any) -> bytes:
    # ensure_ascii keeps lone surrogates as \ud800 escapes (the broker's JSON decoder sees them).
    return json.dumps(body, ensure_ascii=True).encode()


def _deep_json(rng: random.Random) -> bytes:
    depth = rng.choice((100, 2000, 100_000))
    return b'{"message": ' + b"[" * depth + b"]" * depth + b', "topic": "x"}'


def _mutate_json(rng: random.Random, body: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(body))
    targets: list[tuple[Any, Any]] = [(out, key) for key in out]
    for value in out.values():
        if isinstance(value, list):
            for item_index, item in enumerate(value):
                targets.append((value, item_index))
                if isinstance(item, dict):
                    targets.extend((item, item_key) for item_key in item)
    container, key = rng.choice(targets)
    action = rng.random()
    if action < 0.7:
        container[key] = rng.choice(_STRANGE_VALUES)
    elif action < 0.85 and isinstance(container, dict):
        del container[key]
    elif isinstance(container, dict):
        container[rng.choice(("unknown", "partition", "value_base64", "headers", "id"))] = (
            rng.choice(_STRANGE_VALUES)
        )
    return out


def _mutate_path(rng: random.Random, path: str) -> str:
    segments = path.split("?")[0].split("/")
    query = path.partition("?")[2]
    position = rng.randrange(1, len(segments)) if len(segments) > 1 else 0
    segments[position] = rng.choice(_PATH_SEGMENTS)
    new = "/".join(segments)
    if rng.random() < 0.5:
        name = rng.choice(("offset", "limit"))
        value = rng.choice(("-1", "x", "1e3", "99999999999999999999999", "", "0x10", "%00"))
        query = f"{name}={value}"
    return new + ("?" + query if query else "")


def _raw_request(
    rng: random.Random, method: str, path: str, data: bytes | None
) -> tuple[bytes, str]:
    body = data or b""
    choice = rng.randrange(6)
    if choice == 0:
        return rng.randbytes(rng.randint(1, 200)) + b"\r\n\r\n", "raw_garbage"
    if choice == 1:
        return (
            f"{method} {quote(path)} HTTP/1.1\r\nHost: x\r\nX: {'a' * 70000}\r\n\r\n".encode(),
            "raw_huge_header",
        )
    if choice == 2:
        return (
            f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body) + 100}\r\n\r\n"
        ).encode() + body, "raw_short_body"
    if choice == 3:
        return (
            f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n"
        ).encode(), "raw_negative_length"
    if choice == 4:
        return (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            f"Content-Type: application/json\r\n\r\nzz\r\n{body[:10].decode('latin-1')}\r\n"
        ).encode("latin-1"), "raw_bad_chunk"
    return f"{method} {path} HTTP/9.9\r\n\r\n".encode(), "raw_bad_version"
