"""``ConnectionLimit``: the decision at the limit, the refusal count, and a log that says each
refusal at most once per interval, with how many it left out."""

from __future__ import annotations

import logging

import pytest
from flux.cluster.connection_limit import REFUSAL_LOG_INTERVAL_S, ConnectionLimit


def test_refusals_past_the_limit_are_counted_and_logged_at_most_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    refused: list[int] = []
    limit = ConnectionLimit(
        "PLAINTEXT",
        3,
        log=logging.getLogger("test.limit"),
        on_refused=lambda: refused.append(1),
        clock=lambda: now[0],
    )
    caplog.set_level(logging.WARNING, logger="test.limit")
    assert limit.admits(0, "a") and limit.admits(2, "a")
    assert not refused and not caplog.records
    assert not limit.admits(3, ("127.0.0.1", 5000))
    assert not limit.admits(4, "b")
    assert not limit.admits(3, "c")
    assert len(refused) == 3
    assert len(caplog.records) == 1
    first = caplog.records[0].getMessage()
    assert "127.0.0.1" in first and "PLAINTEXT" in first and "broker.max_connections" in first
    now[0] += REFUSAL_LOG_INTERVAL_S
    assert not limit.admits(3, "d")
    assert len(caplog.records) == 2
    assert "(2 more refused since the last such line)" in caplog.records[1].getMessage()
    assert limit.admits(2, "e")


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ConnectionLimit("HTTP", 0, log=logging.getLogger("test.limit"))


def test_http_port_past_its_limit_screens_request_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the limit, the HTTP port serves a node path (within the reserve), answers a
    client's request ``503``, and closes a connection whose request line does not come in
    time or is too long; every screened connection stops counting once decided."""
    import asyncio
    import socket

    import uvloop
    from flux.cluster.http import server as http_server

    monkeypatch.setattr(http_server, "SCREENING_TIMEOUT_S", 0.3)
    # One at a time: a screening that stayed counted would leave the next closed unread.
    monkeypatch.setattr(http_server, "SCREENING_MAX", 1)

    class NoReplication:
        def open_fetch_session(self, *args: object) -> None: ...

        def close_fetch_session(self, *args: object) -> None: ...

    def reply(connection: socket.socket, sent: bytes) -> bytes:
        connection.sendall(sent)
        received = b""
        while chunk := connection.recv(65536):
            received += chunk
            if b"\r\n\r\n" in received and received.endswith(b"}"):
                break
        return received

    def exchange(port: int, sent: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
            return reply(connection, sent)

    async def scenario() -> None:
        refused: list[int] = []
        server = http_server.BrokerHttpServer(
            host="127.0.0.1",
            port=0,
            health=lambda: {"healthy": True},
            replication=NoReplication(),  # type: ignore[arg-type]
            max_connections=1,
            on_refused=lambda: refused.append(1),
        )
        await server.start()
        loop = asyncio.get_running_loop()
        held = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        try:
            ping = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
            # ``held`` is served, and fills the port (one connection) from here on.
            assert b" 200 " in await loop.run_in_executor(None, reply, held, ping)
            node_path = b"GET /replication/session HTTP/1.1\r\nHost: x\r\n\r\n"
            answer = await loop.run_in_executor(None, exchange, server.port, node_path)
            assert answer.startswith(b"HTTP/1.1 400 ") and b"replica_id" in answer
            answer = await loop.run_in_executor(None, exchange, server.port, ping)
            assert answer.startswith(b"HTTP/1.1 503 ") and b"broker.max_connections" in answer
            silent = await loop.run_in_executor(None, exchange, server.port, b"GET /ping")
            assert silent == b""
            endless = b"GET /" + b"x" * (http_server.SCREENING_MAX_LINE + 10)
            assert await loop.run_in_executor(None, exchange, server.port, endless) == b""
            answer = await loop.run_in_executor(None, exchange, server.port, ping)
            assert answer.startswith(b"HTTP/1.1 503 ")
            assert len(refused) == 4
        finally:
            held.close()
            await server.stop()

    uvloop.run(scenario())
