"""A blocking, one-request-at-a-time Kafka protocol connection.

The smallest client of ``flux.protocol``: ``fluxctl`` health checks, tests and benchmarks use it
to speak exact API versions to a broker. The full async SDK builds on the same codec.

Thread-safety: none; one connection per thread.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from flux.protocol.api import decode_response, encode_request

__all__ = ["KafkaConnection"]


class KafkaConnection:
    """``with KafkaConnection(host, port) as conn: conn.request(api_key, version, body)``."""

    def __init__(
        self, host: str, port: int, *, client_id: str = "flux-wire", timeout_s: float = 10.0
    ) -> None:
        self._socket = socket.create_connection((host, port), timeout=timeout_s)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._client_id = client_id
        self._correlation_id = 0

    @classmethod
    def from_bootstrap(cls, bootstrap: str, **options: Any) -> KafkaConnection:
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        return cls(host, int(port), **options)

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._socket.close()

    def request(self, api_key: int, api_version: int, body: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return the decoded response body."""
        self._correlation_id += 1
        correlation_id = self._correlation_id
        self.send_raw(encode_request(api_key, api_version, correlation_id, self._client_id, body))
        frame = self.receive_frame()
        received_id, response = decode_response(api_key, api_version, frame)
        if received_id != correlation_id:
            raise ConnectionError(f"correlation id {received_id} does not match {correlation_id}")
        return response

    def send_raw(self, data: bytes) -> None:
        self._socket.sendall(data)

    def receive_frame(self) -> bytes:
        """Read one size-prefixed frame; ConnectionError if the broker closed the connection."""
        (size,) = struct.unpack(">i", self._receive_exactly(4))
        return self._receive_exactly(size)

    def _receive_exactly(self, count: int) -> bytes:
        chunks = []
        remaining = count
        while remaining:
            chunk = self._socket.recv(min(remaining, 1 << 20))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
