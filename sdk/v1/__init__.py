"""Python SDK of the FLUX V1 line protocol (docs/v1-protocol.md).

- ``client``: ``FLUXClient`` (blocking) and ``AsyncFLUXClient`` (asyncio, pipelined), one
  method per command, ``FLUXProtocolError`` for ``ERR`` answers.
- ``runtime``: ``FLUXRuntime`` / ``AsyncFLUXRuntime``, a KafkaJS-like producer and consumer
  that route by the cluster's metadata and move on ``NOT_LEADER``.
"""

from .client import AsyncFLUXClient, FLUXClient, FLUXProtocolError
from .runtime import AsyncFLUXRuntime, FLUXRuntime

__all__ = ["AsyncFLUXClient", "AsyncFLUXRuntime", "FLUXClient", "FLUXProtocolError", "FLUXRuntime"]
