"""The asyncio V1 client on a connection the broker drops: the commands after the drop fail
at once with ConnectionError (they used to write into the dead socket and wait forever)."""

from __future__ import annotations

import asyncio

import pytest
from flux.sdk.v1 import AsyncFLUXClient


def test_commands_after_the_broker_drops_the_connection_fail_at_once() -> None:
    async def run() -> None:
        async def answer_once_then_drop(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            line = await reader.readline()
            cid = line.split(b"|")[1]
            writer.write(b"V1|" + cid + b"|OK|offset=4\n")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer_once_then_drop, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = await AsyncFLUXClient(f"127.0.0.1:{port}").connect()
        try:
            assert await client.offset("g", "t", 0) == 4
            await asyncio.wait_for(client._read_task, 2)  # it reads the close
            for _ in range(2):
                with pytest.raises(ConnectionError):
                    await asyncio.wait_for(client.offset("g", "t", 0), 2)
        finally:
            await client.close()
            server.close()
            await server.wait_closed()

    asyncio.run(run())
