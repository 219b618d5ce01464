"""Low-level clients of the FLUX V1 line protocol (docs/v1-protocol.md): one method per command.

``FLUXClient`` is blocking (a socket); ``AsyncFLUXClient`` is asyncio and pipelined: many
commands may be awaited at once on one connection, their answers matched in request order.
Both raise ``FLUXProtocolError(code, message, response)`` for an ``ERR`` answer and
``ConnectionError`` when the connection breaks.

    client = FLUXClient("127.0.0.1:9300")
    client.connect()
    client.produce("orders", "user1", "created", acks="all")   # {"partition": 2, "offset": 0, "hw": 1}
    client.consume("orders", 2, 0)                             # ([(0, "created")], 1)
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import urllib.parse
from collections import deque
from typing import Any

__all__ = ["AsyncFLUXClient", "FLUXClient", "FLUXProtocolError", "parse_answer"]


class FLUXProtocolError(Exception):
    """An ``ERR`` answer: ``code`` (``NOT_LEADER``, ``BAD_REQUEST``, ...), ``message``, and the
    raw ``response`` line."""

    def __init__(self, code: str, message: str, response: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.response = response

    @property
    def leader_address(self) -> str | None:
        """For ``NOT_LEADER``: the ``host:port`` the broker named, if it did."""
        if self.code != "NOT_LEADER" or " at " not in self.message:
            return None
        address = self.message.rsplit(" at ", 1)[1].strip()
        return address if ":" in address and " " not in address else None


def parse_answer(line: str, correlation_id: str) -> dict[str, str]:
    """The ``k=v`` fields of an ``OK`` answer; raises ``FLUXProtocolError`` for ``ERR``."""
    parts = line.rstrip("\n").split("|", 4)
    if len(parts) < 3 or parts[0] != "V1":
        raise FLUXProtocolError("BAD_REQUEST", f"not a V1 answer: {line[:80]!r}", line)
    if parts[2] == "ERR":
        code = parts[3] if len(parts) > 3 else "BAD_REQUEST"
        raise FLUXProtocolError(code, parts[4] if len(parts) > 4 else "", line)
    if parts[1] != correlation_id:
        raise ConnectionError(f"answer {parts[1]} to request {correlation_id}: out of step")
    if len(parts) < 4 or not parts[3]:
        return {}
    return dict(item.split("=", 1) for item in parts[3].split(" ") if "=" in item)


def _records(text: str) -> list[tuple[int, str]]:
    """``offset:value,...`` with percent-encoded values."""
    found = []
    for item in text.split(","):
        if item:
            offset, _, value = item.partition(":")
            found.append((int(offset), urllib.parse.unquote(value)))
    return found


def _assigned(text: str) -> list[int]:
    return [int(p) for p in text.strip("[]").split(",") if p]


def _line(correlation_id: str, command: str, args: list[Any]) -> bytes:
    return f"V1|{correlation_id}|{command}|{' '.join(str(a) for a in args)}\n".encode()


class _Commands:
    """The commands, on ``send_command`` (defined by each client)."""

    def send_command(self, command: str, *args: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _call(self, command: str, args: list[Any], shape: Any) -> Any:
        answer = self.send_command(command, *args)
        if asyncio.iscoroutine(answer):

            async def shaped() -> Any:
                return shape(await answer)

            return shaped()
        return shape(answer)

    def produce(self, topic: str, key: str, value: str, acks: str = "all") -> Any:
        if any(c.isspace() for c in key + value) or ":" in key:
            raise ValueError("V1 keys and values hold no whitespace, and keys no ':'")
        return self._call(
            "PRODUCE",
            [topic, f"{key}:{value}", f"acks={acks}"],
            lambda f: {k: int(f[k]) for k in ("partition", "offset", "hw")},
        )

    def consume(self, topic: str, partition: int, offset: int, max: int | None = None) -> Any:
        args: list[Any] = [topic, partition, offset] + ([max] if max is not None else [])
        return self._call("CONSUME", args, lambda f: (_records(f["messages"]), int(f["hw"])))

    def join(self, group: str, topic: str, consumer_id: str, assignor: str = "range") -> Any:
        return self._call(
            "JOIN",
            [group, topic, consumer_id, f"assignor={assignor}"],
            lambda f: {"generation": int(f["generation"]), "assigned": _assigned(f["assigned"])},
        )

    def sync(self, group: str, topic: str, consumer_id: str, generation: int) -> Any:
        return self._call(
            "SYNC",
            [group, topic, consumer_id, generation],
            lambda f: {"generation": int(f["generation"]), "assigned": _assigned(f["assigned"])},
        )

    def heartbeat(self, group: str, topic: str, consumer_id: str, generation: int) -> Any:
        return self._call("HEARTBEAT", [group, topic, consumer_id, generation], lambda f: None)

    def leave(self, group: str, topic: str, consumer_id: str, generation: int) -> Any:
        return self._call("LEAVE", [group, topic, consumer_id, generation], lambda f: None)

    def commit(
        self, group: str, topic: str, consumer_id: str, generation: int, partition: int, offset: int
    ) -> Any:
        return self._call(
            "COMMIT",
            [group, topic, consumer_id, generation, partition, offset],
            lambda f: f.get("committed") == "true",
        )

    def offset(self, group: str, topic: str, partition: int) -> Any:
        return self._call("OFFSET", [group, topic, partition], lambda f: int(f["offset"]))

    def admin_create_topic(self, topic: str, partitions: int, replication_factor: int) -> Any:
        return self._call(
            "ADMIN_CREATE_TOPIC", [topic, partitions, replication_factor], lambda f: f
        )

    def admin_get_metadata(self) -> Any:
        def shape(f: dict[str, str]) -> dict[str, Any]:
            brokers = {}
            for entry in filter(None, f.get("brokers", "").split(",")):
                broker_id, _, address = entry.partition("@")
                brokers[int(broker_id)] = address
            topics = {}
            for entry in filter(None, f.get("topics", "").split(",")):
                name, _, count = entry.rpartition(":")
                topics[name] = int(count)
            leaders = {}
            for entry in filter(None, f.get("leaders", "").split(",")):
                where, _, leader = entry.rpartition("=")
                name, _, index = where.rpartition("/")
                leaders[(name, int(index))] = int(leader)
            return {"brokers": brokers, "topics": topics, "leaders": leaders}

        return self._call("ADMIN_GET_METADATA", [], shape)

    def broker_fetch(
        self, topic: str, partition: int, follower: int, offset: int, max: int | None = None
    ) -> Any:
        args: list[Any] = [topic, partition, follower, offset] + ([max] if max else [])
        return self._call("BROKER_FETCH", args, lambda f: (_records(f["records"]), int(f["hw"])))

    def replica_fetch(self, topic: str, partition: int, replica: int, offset: int) -> Any:
        return self._call(
            "REPLICA_FETCH",
            [topic, partition, replica, offset],
            lambda f: (_records(f["records"]), int(f["hw"])),
        )


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port)


class FLUXClient(_Commands):
    """A blocking V1 connection; one command at a time."""

    def __init__(self, address: str, *, timeout_s: float = 30.0) -> None:
        self.address = address
        self._timeout_s = timeout_s
        self._socket: socket.socket | None = None
        self._reader: Any = None
        self._ids = itertools.count(1)

    def connect(self) -> FLUXClient:
        self._socket = socket.create_connection(_split(self.address), timeout=self._timeout_s)
        self._reader = self._socket.makefile("rb")
        return self

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        if self._socket is not None:
            self._socket.close()
        self._socket = self._reader = None

    def __enter__(self) -> FLUXClient:
        return self.connect() if self._socket is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_command(self, command: str, *args: Any) -> dict[str, str]:
        if self._socket is None:
            raise ConnectionError("not connected")
        correlation_id = str(next(self._ids))
        try:
            self._socket.sendall(_line(correlation_id, command, list(args)))
            line = self._reader.readline()
        except OSError as error:
            self.close()
            raise ConnectionError(f"{self.address}: {error}") from error
        if not line:
            self.close()
            raise ConnectionError(f"{self.address} closed the connection")
        return parse_answer(line.decode("utf-8", "replace"), correlation_id)


class AsyncFLUXClient(_Commands):
    """An asyncio V1 connection; commands may be pipelined (awaited concurrently)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._waiting: deque[tuple[str, asyncio.Future[dict[str, str]]]] = deque()
        self._read_task: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        # Why the connection broke (the broker closed it or died): later commands fail at once
        # instead of writing into a dead socket and waiting for an answer that cannot come.
        self._broken: ConnectionError | None = None

    async def connect(self) -> AsyncFLUXClient:
        host, port = _split(self.address)
        self._reader, self._writer = await asyncio.open_connection(host, port, limit=1 << 22)
        self._broken = None
        self._read_task = asyncio.create_task(self._read_answers())
        return self

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except OSError:
                pass
        if self._read_task is not None:
            self._read_task.cancel()
            await asyncio.gather(self._read_task, return_exceptions=True)
        self._fail(ConnectionError("closed"))
        self._reader = self._writer = None

    async def __aenter__(self) -> AsyncFLUXClient:
        return await self.connect() if self._writer is None else self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def send_command(self, command: str, *args: Any) -> dict[str, str]:
        if self._writer is None:
            raise ConnectionError("not connected")
        if self._broken is not None:
            raise ConnectionError(str(self._broken))
        correlation_id = str(next(self._ids))
        future: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()
        self._waiting.append((correlation_id, future))
        try:
            self._writer.write(_line(correlation_id, command, list(args)))
            await self._writer.drain()
        except (ConnectionError, OSError) as error:
            future.cancel()  # its answer will never come; nobody else awaits it
            raise ConnectionError(f"{self.address}: {error}") from error
        return await future

    async def _read_answers(self) -> None:
        assert self._reader is not None
        try:
            while True:
                line = await self._reader.readline()
                if not line:
                    raise ConnectionError(f"{self.address} closed the connection")
                if not self._waiting:
                    continue
                correlation_id, future = self._waiting.popleft()
                if future.done():
                    continue
                try:
                    future.set_result(parse_answer(line.decode("utf-8", "replace"), correlation_id))
                except (FLUXProtocolError, ConnectionError) as error:
                    future.set_exception(error)
        except (ConnectionError, OSError) as error:
            self._broken = ConnectionError(f"{self.address}: {error}")
            self._fail(self._broken)

    def _fail(self, error: Exception) -> None:
        while self._waiting:
            _, future = self._waiting.popleft()
            if not future.done():
                future.set_exception(error)
