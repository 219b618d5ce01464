"""The FLUX V1 line protocol: requests and replies as text lines (pure, no I/O).

A request is ``V1|<correlation id>|<COMMAND>|<args>\\n``: four ``|``-separated fields, all
present (empty args still end in ``|``); the args are split on whitespace. ``|`` may appear in
the last field (a value), which is everything after the third ``|``. Replies:

    V1|<cid>|OK                    V1|<cid>|OK|k=v k=v ...
    V1|<cid>|ERR|<CODE>|<message>

A line that cannot be parsed is answered with correlation id ``0``. Codes: ``BAD_REQUEST``,
``UNKNOWN_COMMAND``, ``NOT_LEADER``, ``REPLICATION_TIMEOUT``, ``GENERATION_MISMATCH``, and
Flux's own ``UNKNOWN_TOPIC``, ``NOT_SUPPORTED`` (a command whose work Flux does by itself) and
``UNAVAILABLE`` (no leader, no coordinator, a disk fault); docs/v1-protocol.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from flux.protocol.partitioner import fnv1a_32

__all__ = [
    "ERROR_CODES",
    "V1Error",
    "V1Request",
    "error_line",
    "fnv1a_32",
    "ok_line",
    "parse_request",
]

VERSION = "V1"

ERROR_CODES = frozenset(
    {
        "BAD_REQUEST",
        "UNKNOWN_COMMAND",
        "NOT_LEADER",
        "REPLICATION_TIMEOUT",
        "GENERATION_MISMATCH",
        "UNKNOWN_TOPIC",
        "NOT_SUPPORTED",
        "UNAVAILABLE",
    }
)


class V1Error(Exception):
    """A request answered ``ERR|<code>|<message>``."""

    def __init__(self, code: str, message: str) -> None:
        assert code in ERROR_CODES, code
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class V1Request:
    correlation_id: str
    command: str
    args: tuple[str, ...]
    raw_args: str


def parse_request(line: bytes) -> V1Request:
    """One request line (without or with its ``\\n``); raises ``V1Error(BAD_REQUEST)`` with
    ``correlation_id`` 0 semantics left to the caller (``V1Error.args``)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise V1Error("BAD_REQUEST", "a request line must be UTF-8 text") from None
    text = text.rstrip("\r\n")
    fields = text.split("|", 3)
    if len(fields) != 4:
        raise V1Error("BAD_REQUEST", "expected V1|<correlation_id>|<COMMAND>|<args> (four fields)")
    version, correlation_id, command, raw_args = fields
    if version != VERSION:
        raise V1Error("BAD_REQUEST", f"unknown protocol version {version[:16]!r} (expected V1)")
    if not correlation_id or len(correlation_id) > 64 or any(c.isspace() for c in correlation_id):
        raise V1Error("BAD_REQUEST", "the correlation id must be 1-64 characters, no spaces")
    if not command or not command.replace("_", "").isalnum():
        raise V1Error("BAD_REQUEST", "missing or malformed command")
    return V1Request(correlation_id, command.upper(), tuple(raw_args.split()), raw_args)


def ok_line(correlation_id: str, fields: dict[str, object] | None = None) -> bytes:
    body = f"{VERSION}|{correlation_id}|OK"
    if fields:
        body += "|" + " ".join(f"{key}={value}" for key, value in fields.items())
    return (body + "\n").encode("utf-8")


def error_line(correlation_id: str, code: str, message: str) -> bytes:
    flat = " ".join(message.split())  # one line, whatever the message held
    return f"{VERSION}|{correlation_id}|ERR|{code}|{flat}\n".encode()
