"""The V1 listener: one request per line, many in flight per connection, answered in order.

Each connection reads lines and starts a task for each request at once (so a produce waiting
for its replicas does not hold the requests behind it), and a writer sends the answers
strictly in request order. Bounds, per connection: a line longer than ``max_line_bytes`` is
answered ``V1|0|ERR|BAD_REQUEST|...`` and the connection closed (the rest of the line is not
read); at most ``max_in_flight`` requests are in flight: reading stops until the oldest is
answered (TCP pushes back on the client). A half line then a disconnect is dropped; binary
garbage is a ``BAD_REQUEST`` line answer. A connection that fails or misbehaves never touches
another's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from .commands import V1Commands
from .protocol import V1Error, error_line, ok_line, parse_request

__all__ = ["V1Server"]

log = logging.getLogger("flux.cluster.v1")


class V1Server:
    def __init__(
        self,
        commands: V1Commands,
        *,
        host: str,
        port: int,
        max_line_bytes: int,
        max_in_flight: int,
    ) -> None:
        self._commands = commands
        self._host = host
        self._port = port
        self._max_line_bytes = max_line_bytes
        self._max_in_flight = max_in_flight
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, self._host, self._port, limit=self._max_line_bytes, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answers: asyncio.Queue[asyncio.Task[bytes] | bytes | None] = asyncio.Queue(
            self._max_in_flight
        )
        sender = asyncio.create_task(self._send_in_order(answers, writer))
        stopping = False
        try:
            while not sender.done():
                try:
                    line = await reader.readuntil(b"\n")
                except asyncio.LimitOverrunError:
                    await answers.put(
                        error_line(
                            "0",
                            "BAD_REQUEST",
                            f"a request line is at most {self._max_line_bytes} bytes",
                        )
                    )
                    break
                except asyncio.IncompleteReadError:
                    break  # the client went away, maybe in the middle of a line
                if not line.strip():
                    continue
                await answers.put(asyncio.create_task(self._answer(line)))
        except asyncio.CancelledError:
            stopping = True  # the server stops: no waiting for answers in flight
            raise
        finally:
            if stopping:
                sender.cancel()
            else:
                await answers.put(None)  # the answers already asked for still go out
            await asyncio.gather(sender, return_exceptions=True)

    async def _send_in_order(
        self,
        answers: asyncio.Queue[asyncio.Task[bytes] | bytes | None],
        writer: asyncio.StreamWriter,
    ) -> None:
        try:
            while (item := await answers.get()) is not None:
                line = item if isinstance(item, bytes) else await item
                writer.write(line)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            # Answers nobody will read: their work is still finished (a produce stays
            # produced), only the replies are dropped.
            while not answers.empty():
                item = answers.get_nowait()
                if isinstance(item, asyncio.Task):
                    item.add_done_callback(_consume)

    async def _answer(self, line: bytes) -> bytes:
        try:
            request = parse_request(line)
        except V1Error as error:
            return error_line("0", error.code, error.message)
        try:
            return ok_line(request.correlation_id, await self._commands.run(request))
        except V1Error as error:
            return error_line(request.correlation_id, error.code, error.message)
        except Exception:
            log.exception("V1 %s failed", request.command)
            return error_line(
                request.correlation_id, "UNAVAILABLE", f"{request.command} failed on the broker"
            )


def _consume(task: asyncio.Task[bytes]) -> None:
    if not task.cancelled():
        task.exception()
