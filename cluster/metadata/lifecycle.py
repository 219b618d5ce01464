"""A broker's membership in the cluster: registration, heartbeats, and following metadata.

On start the broker registers a fresh incarnation id with the active controller (it starts
fenced). While no controller is active (its quorum is down: a whole-cluster crash, nodes
restarted one at a time) it waits, retrying with capped backoff for as long as it takes;
``state`` says why (``waiting for quorum: 1 of 3 controllers reachable``), is logged once in
a while and reported by ``/health`` and ``fluxctl cluster status``. Then it runs two tasks:

- heartbeats every ``broker.heartbeat_interval_ms`` carrying the metadata version it has
  applied; the controller unfences it once that version has caught up, and fences it when
  heartbeats stop for ``controller.session_timeout_ms``;
- a metadata long-poll against any controller for the records committed since the version it
  holds (Kafka's metadata log): it replays them onto its image, in order, and hands the new
  image to the ``ReplicaManager``. Only a broker that holds nothing, or is further behind
  than the controllers keep records for, receives the whole image (a snapshot).

``ready`` is set once an applied image shows this broker registered and unfenced. If the
controller answers that another incarnation of this broker id registered later, this process
is the stale one: it stops heartbeating and stays fenced (the newer registration wins).

The registration carries the log directory's id (``log-dir.json``, made when the data
directory is first used), so the controller can tell a restart with intact logs from one with
a replaced or wiped disk (``flux.controller.election``).

When the log directory goes offline (an I/O error: ``ReplicaManager.fail_log_directory``) the
broker heartbeats at once and from then on with ``want_fence`` and the directory in
``offline_log_dirs`` (Kafka's broker heartbeat fields): the controller fences it, which elects
new leaders from the other in-sync replicas and takes it out of every ISR, and keeps it fenced
while it asks. The process stays up, answering what needs no disk (ApiVersions, Metadata, the
HTTP health and metrics), with ``state`` saying the directory is offline, until restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flux.controller.errors import InvalidRecordError
from flux.controller.image import MetadataImage
from flux.controller.records import record_from_dict
from flux.protocol.errors import ErrorCode

from ..config import NodeConfig
from ..launcher import write_json_atomically
from ..replication.replica_manager import ReplicaManager
from .controller_client import ControllerClient, ControllerUnavailableError

__all__ = ["BrokerLifecycle"]

log = logging.getLogger("flux.cluster.lifecycle")

METADATA_WAIT_MS = 5000
#: One registration attempt; the controller may hold it for a session timeout (see
#: ControllerService._wait_sessions_confirmed).
REGISTER_ATTEMPT_TIMEOUT_S = 15.0
RETRY_PAUSE_S = 0.2
#: How long a report of an unreachable broker is retried (a controller failover included).
REPORT_TIMEOUT_S = 3.0
#: Backoff between registration attempts while no controller is active.
REGISTER_BACKOFF_MAX_S = 5.0
#: How often a broker waiting for its quorum says so in its log.
WAITING_LOG_INTERVAL_S = 15.0
LOG_DIR_FILE = "log-dir.json"


def log_dir_id(data_dir: Path) -> str:
    """The id of ``data_dir`` (Kafka's ``directory.id``): read, or made on first use."""
    path = data_dir / LOG_DIR_FILE
    try:
        document = json.loads(path.read_text())
        if isinstance(document, dict) and isinstance(document.get("directory_id"), str):
            return str(document["directory_id"])
        log.warning("%s has no directory id: making a new one", path)
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as error:
        log.warning("cannot read %s (%s): making a new directory id", path, error)
    directory_id = uuid.uuid4().hex
    data_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomically(path, {"directory_id": directory_id}, fsync=True)
    return directory_id


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
        self.log_dir_id = log_dir_id(config.data_dir)
        self.state = "starting"
        self.on_state: Callable[[str], None] | None = None
        self.ready = asyncio.Event()
        # Metadata updates received as deltas (commands) and as whole images (for /health).
        self.metadata_deltas = 0
        self.metadata_snapshots = 0
        self.stale = False
        self.controller_id: int | None = None  # the active controller, as last reported
        self._tasks: list[asyncio.Task[None]] = []
        self._reports: set[asyncio.Task[None]] = set()
        #: (broker id, incarnation) of each fenced broker -> when this broker saw it fenced.
        self._fenced_since: dict[tuple[int, str], float] = {}
        self._image_applied = asyncio.Event()
        self._beat_now = asyncio.Event()
        #: Heartbeats stopped (see ``_on_heartbeat_answer``).
        self._silent = False
        replicas.add_image_listener(self._on_image)
        replicas.add_offline_listener(self._on_log_dir_offline)

    async def start(self) -> None:
        """Register (waiting for the quorum as long as it takes), then follow metadata."""
        assert self.listeners, "bind the Kafka listeners before registering"
        await self._register_until_done()
        self._tasks = [
            asyncio.create_task(self._follow_metadata()),
            asyncio.create_task(self._heartbeat_forever()),
        ]

    async def stop(self) -> None:
        for task in [*self._tasks, *self._reports]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._reports, return_exceptions=True)

    def _set_state(self, state: str) -> None:
        if state == self.state:
            return
        self.state = state
        if self.on_state is not None:
            try:
                self.on_state(state)
            except OSError as error:  # the state file lives on the (maybe failed) data disk
                log.warning("cannot record state %r: %s", state, error)

    def _on_log_dir_offline(self, failure: OSError) -> None:
        """The log directory failed: say so, and heartbeat now to be fenced at once."""
        self._set_state(f"log directory offline ({failure}); restart the node once it is fixed")
        self._beat_now.set()

    async def _waiting_state(self) -> str:
        reachable, total, active = await self._client.quorum_view()
        if active is not None:
            return f"registering with controller {active}"
        return f"waiting for quorum: {reachable} of {total} controllers reachable"

    async def _register_until_done(self) -> None:
        backoff_s = RETRY_PAUSE_S
        last_logged = float("-inf")
        self._set_state("registering")
        while True:
            try:
                await self._register()
                return
            except ControllerUnavailableError as error:
                self._set_state(await self._waiting_state())
                if time.monotonic() - last_logged >= WAITING_LOG_INTERVAL_S:
                    last_logged = time.monotonic()
                    log.warning("broker %d %s (%s)", self.broker_id, self.state, error)
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, REGISTER_BACKOFF_MAX_S)

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
                "log_dir_id": self.log_dir_id,
            },
            timeout_s=REGISTER_ATTEMPT_TIMEOUT_S,
        )
        if answer.get("error_code", 0) != 0:
            raise RuntimeError(f"registration refused: {answer.get('error_message')}")
        log.info("registered broker %d as incarnation %s", self.broker_id, self.incarnation_id)
        self._set_state("catching up with metadata")

    async def _heartbeat_forever(self) -> None:
        interval_s = self._config.broker.heartbeat_interval_ms / 1000
        last_logged = float("-inf")
        while not self.stale:
            if self._silent:
                await asyncio.sleep(interval_s)
                continue
            try:
                answer = await self._client.write(
                    "POST",
                    "/controller/brokers/heartbeat",
                    {
                        "broker_id": self.broker_id,
                        "incarnation_id": self.incarnation_id,
                        "metadata_version": self._replicas.image.version,
                        # A failed log directory: fence us, our replicas serve nothing.
                        "want_fence": self._replicas.log_dir_offline,
                        "offline_log_dirs": (
                            [self.log_dir_id] if self._replicas.log_dir_offline else []
                        ),
                    },
                    timeout_s=max(interval_s * 2, 1.0),
                )
                await self._on_heartbeat_answer(answer)
            except ControllerUnavailableError as error:
                # The quorum may be down for minutes: say so once in a while, not every beat.
                if time.monotonic() - last_logged >= WAITING_LOG_INTERVAL_S:
                    last_logged = time.monotonic()
                    log.warning("heartbeat not delivered: %s", error)
            else:
                last_logged = float("-inf")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._beat_now.wait(), interval_s)
            self._beat_now.clear()

    def report_unreachable(self, broker_id: int, incarnation_id: str) -> None:
        """Tell the active controller that our connection to ``broker_id`` broke (it probes
        that broker and fences it at once if its process is gone; see controller.liveness)."""
        task = asyncio.create_task(self._report_unreachable(broker_id, incarnation_id))
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)

    async def _report_unreachable(self, broker_id: int, incarnation_id: str) -> None:
        try:
            await self._client.write(
                "POST",
                "/controller/brokers/unreachable",
                {
                    "reporter_id": self.broker_id,
                    "broker_id": broker_id,
                    "incarnation_id": incarnation_id,
                },
                timeout_s=REPORT_TIMEOUT_S,
            )
        except ControllerUnavailableError as error:
            # No active controller: a new one probes every broker when it takes over.
            log.debug("report of broker %d not delivered: %s", broker_id, error)

    async def _on_heartbeat_answer(self, answer: dict[str, Any]) -> None:
        code = answer.get("error_code", 0)
        if code == 0 and self._replicas.log_dir_offline and answer.get("fenced") is False:
            # A controller that does not know ``want_fence`` (an older version): fall silent,
            # so that it fences this broker when the session times out.
            log.warning(
                "the controller kept this broker unfenced although its log directory is "
                "offline: heartbeats stop, so that its session ends and it is fenced"
            )
            self._silent = True
        if code == ErrorCode.BROKER_ID_NOT_REGISTERED:
            log.warning("controller does not know this broker: registering again")
            await self._register_until_done()
        elif code == ErrorCode.STALE_BROKER_EPOCH:
            log.error(
                "another process registered broker id %d after this one: staying fenced",
                self.broker_id,
            )
            self.stale = True
        elif code != 0:
            log.warning("heartbeat answered %s: %s", code, answer.get("error_message"))

    async def _follow_metadata(self) -> None:
        want_snapshot = False
        while True:
            try:
                answer = await self._client.read_metadata(
                    self._replicas.image.version, wait_ms=METADATA_WAIT_MS, deltas=not want_snapshot
                )
            except Exception:
                log.exception("metadata poll failed")
                answer = None
            if answer is None:
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            self.controller_id = answer.get("controller_id")
            try:
                image = self._next_image(answer)
            except (InvalidRecordError, KeyError, TypeError, ValueError) as error:
                # A gap in the deltas, or an answer we cannot read: start over from a snapshot.
                log.warning("metadata answer not applied (%s): asking for the whole image", error)
                want_snapshot = True
                continue
            want_snapshot = False
            if image is not None:
                try:
                    await self._replicas.prepare_image(image)
                    self._replicas.apply_image(image)
                except Exception:
                    # Never stop following metadata: log loudly and take the next image.
                    log.exception("applying metadata version %d failed", image.version)
                self._update_ready(image)

    def _next_image(self, answer: dict[str, Any]) -> MetadataImage | None:
        """The image after ``answer``: the current one with its deltas replayed in order, or
        the snapshot it carries; None if nothing is newer. Raises ValueError if the deltas do
        not follow the version held."""
        current = self._replicas.image
        if "deltas" in answer:
            image = current
            for delta in answer["deltas"]:
                version = int(delta["version"])
                if version != image.version + 1:
                    raise ValueError(f"delta {version} does not follow version {image.version}")
                records = [record_from_dict(record) for record in delta["records"]]
                image = image.replay_all(records, version)
            self.metadata_deltas += len(answer["deltas"])
            return image if image.version > current.version else None
        if answer.get("version", 0) > current.version:
            self.metadata_snapshots += 1
            return MetadataImage.from_dict(answer["image"])
        return None

    def _update_ready(self, image: MetadataImage) -> None:
        registration = image.brokers.get(self.broker_id)
        if (
            registration is not None
            and registration.incarnation_id == self.incarnation_id
            and not registration.fenced
            and not self._replicas.log_dir_offline
        ):
            self.ready.set()
            self._set_state("ready")

    def _on_image(self, image: MetadataImage) -> None:
        now = time.monotonic()
        fenced = {
            (broker.broker_id, broker.incarnation_id)
            for broker in image.brokers.values()
            if broker.fenced
        }
        self._fenced_since = {key: self._fenced_since.get(key, now) for key in fenced}
        self._image_applied.set()
        self._image_applied = asyncio.Event()

    def recently_fenced(self, within_s: float) -> set[int]:
        """Ids of brokers fenced no longer than ``within_s`` ago (as this broker saw it)."""
        now = time.monotonic()
        return {key[0] for key, since in self._fenced_since.items() if now - since < within_s}

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
