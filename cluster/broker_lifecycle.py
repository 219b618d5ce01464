"""A broker's membership in the cluster: registration, heartbeats, and following metadata.

On start the broker registers a fresh incarnation id with the active controller (it starts
fenced), then runs two tasks:

- heartbeats every ``broker.heartbeat_interval_ms`` carrying the metadata version it has
  applied; the controller unfences it once that version has caught up, and fences it when
  heartbeats stop for ``controller.session_timeout_ms``;
- a metadata long-poll against any controller, applying each newer image to the
  ``ReplicaManager``.

``ready`` is set once an applied image shows this broker registered and unfenced. If the
controller answers that another incarnation of this broker id registered later, this process
is the stale one: it stops heartbeating and stays fenced (the newer registration wins).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from flux.controller.image import MetadataImage
from flux.protocol.errors import ErrorCode

from .config import NodeConfig
from .controller_client import ControllerClient, ControllerUnavailableError
from .replica_manager import ReplicaManager

__all__ = ["BrokerLifecycle"]

log = logging.getLogger("flux.cluster.lifecycle")

METADATA_WAIT_MS = 5000
REGISTER_TIMEOUT_S = 30.0
RETRY_PAUSE_S = 0.2


class BrokerLifecycle:
    """Registration, heartbeats and metadata following of one broker."""

    def __init__(
        self,
        config: NodeConfig,
        client: ControllerClient,
        replicas: ReplicaManager,
        *,
        http_port: int,
    ) -> None:
        self._config = config
        self._client = client
        self._replicas = replicas
        # Advertised (name, host, port) of every Kafka listener, primary first: set once the
        # listeners are bound, before start().
        self.listeners: list[tuple[str, str, int]] = []
        self.http_port = http_port  # set by the node once its HTTP server is bound
        self.broker_id = config.node.id
        self.incarnation_id = uuid.uuid4().hex
        self.ready = asyncio.Event()
        self.stale = False
        self.controller_id: int | None = None  # the active controller, as last reported
        self._tasks: list[asyncio.Task[None]] = []
        self._image_applied = asyncio.Event()
        replicas.add_image_listener(self._on_image)

    async def start(self) -> None:
        assert self.listeners, "bind the Kafka listeners before registering"
        await self._register()
        self._tasks = [
            asyncio.create_task(self._follow_metadata()),
            asyncio.create_task(self._heartbeat_forever()),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _register(self) -> None:
        broker = self._config.broker
        answer = await self._client.write(
            "POST",
            "/controller/brokers/register",
            {
                "broker_id": self.broker_id,
                "incarnation_id": self.incarnation_id,
                "kafka_host": self.listeners[0][1],
                "kafka_port": self.listeners[0][2],
                # Other brokers fetch over HTTP at the primary listener's host.
                "http_host": self.listeners[0][1],
                "http_port": self.http_port,
                "rack": broker.rack or None,
                "listeners": [list(listener) for listener in self.listeners],
            },
            timeout_s=REGISTER_TIMEOUT_S,
        )
        if answer.get("error_code", 0) != 0:
            raise RuntimeError(f"registration refused: {answer.get('error_message')}")
        log.info("registered broker %d as incarnation %s", self.broker_id, self.incarnation_id)

    async def _heartbeat_forever(self) -> None:
        interval_s = self._config.broker.heartbeat_interval_ms / 1000
        while not self.stale:
            try:
                answer = await self._client.write(
                    "POST",
                    "/controller/brokers/heartbeat",
                    {
                        "broker_id": self.broker_id,
                        "incarnation_id": self.incarnation_id,
                        "metadata_version": self._replicas.image.version,
                    },
                    timeout_s=max(interval_s * 2, 1.0),
                )
                await self._on_heartbeat_answer(answer)
            except ControllerUnavailableError as error:
                log.warning("heartbeat not delivered: %s", error)
            await asyncio.sleep(interval_s)

    async def _on_heartbeat_answer(self, answer: dict[str, Any]) -> None:
        code = answer.get("error_code", 0)
        if code == ErrorCode.BROKER_ID_NOT_REGISTERED:
            log.warning("controller does not know this broker: registering again")
            await self._register()
        elif code == ErrorCode.STALE_BROKER_EPOCH:
            log.error(
                "another process registered broker id %d after this one: staying fenced",
                self.broker_id,
            )
            self.stale = True
        elif code != 0:
            log.warning("heartbeat answered %s: %s", code, answer.get("error_message"))

    async def _follow_metadata(self) -> None:
        while True:
            try:
                answer = await self._client.read_metadata(
                    self._replicas.image.version, wait_ms=METADATA_WAIT_MS
                )
            except Exception:
                log.exception("metadata poll failed")
                answer = None
            if answer is None:
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            self.controller_id = answer.get("controller_id")
            if answer.get("version", 0) > self._replicas.image.version:
                image = MetadataImage.from_dict(answer["image"])
                try:
                    self._replicas.apply_image(image)
                except Exception:
                    # Never stop following metadata: log loudly and take the next image.
                    log.exception("applying metadata version %d failed", image.version)
                self._update_ready(image)

    def _update_ready(self, image: MetadataImage) -> None:
        registration = image.brokers.get(self.broker_id)
        if (
            registration is not None
            and registration.incarnation_id == self.incarnation_id
            and not registration.fenced
        ):
            self.ready.set()

    def _on_image(self, image: MetadataImage) -> None:
        self._image_applied.set()
        self._image_applied = asyncio.Event()

    async def wait_for_version(self, version: int, timeout_s: float) -> bool:
        """Wait until this broker applied metadata ``version`` (e.g. after a write it forwarded)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._replicas.image.version < version:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._image_applied.wait(), remaining)
            except TimeoutError:
                return False
        return True
