"""What the Kafka handler families share: the broker state ``KafkaApis`` holds, and admin
writes forwarded to the active controller.

Each family (``metadata``, ``produce``, ``fetch``, ``admin``, ``groups``, ``producer_ids``) is a
mixin on ``KafkaApisBase``; ``KafkaApis`` (``apis``) combines them, sets the state in its
constructor and dispatches requests to them.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from flux.controller.image import MetadataImage
from flux.protocol.errors import ErrorCode

from ..config import NodeConfig
from ..metadata.controller_client import ControllerClient, ControllerUnavailableError
from ..metadata.lifecycle import BrokerLifecycle
from ..replication.replica_manager import ReplicaManager

__all__ = ["KafkaApisBase"]

# One logger for every handler family (the name it had when they were one module).
log = logging.getLogger("flux.cluster.apis")

METADATA_PROPAGATION_TIMEOUT_S = 15.0
CONTROLLER_WRITE_TIMEOUT_S = 10.0
_ZERO_UUID = uuid.UUID(int=0)


class KafkaApisBase:
    """State set by ``KafkaApis.__init__`` and used by every handler family, and the path of
    admin writes to the active controller."""

    _config: NodeConfig
    _replicas: ReplicaManager
    _controller: ControllerClient
    _lifecycle: BrokerLifecycle
    _node_id: int

    @property
    def _image(self) -> MetadataImage:
        return self._replicas.image

    async def _forward(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        """Send an admin write to the active controller and wait until this broker's metadata
        shows its effect, so the client's next request here sees it."""
        try:
            answer = await self._controller.write(
                method, path, body, timeout_s=CONTROLLER_WRITE_TIMEOUT_S
            )
        except ControllerUnavailableError as error:
            return {"error_code": ErrorCode.REQUEST_TIMED_OUT, "error_message": str(error)}
        answer.setdefault("error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
        answer.setdefault("error_message", None)
        version = answer.get("version", 0)
        if answer["error_code"] == ErrorCode.NONE and version:
            await self._lifecycle.wait_for_version(version, METADATA_PROPAGATION_TIMEOUT_S)
        return answer

    async def controller_write(
        self, method: str, path: str, body: dict[str, Any] | None
    ) -> dict[str, Any]:
        """An admin write at the active controller, answered once this broker's metadata shows
        it (for the HTTP API)."""
        return await self._forward(method, path, body)
