"""Node process assembly: configuration, roles, listeners, signals, and the ready file.

A node runs the controller role (Raft quorum member + controller HTTP API), the broker role
(Kafka listener, partitions, registration and heartbeats), or both. ``run_node(config)`` runs
until SIGTERM or SIGINT, then stops accepting requests, flushes every log and checkpoints
recovery points.

Once serving, the node writes ``<data_dir>/ready.json`` with its id, pid, roles and bound ports
(ports may be 0 in the config, meaning "any free port"). A broker is ready when it is
registered and unfenced in the metadata it follows; a controller-only node when its quorum
has a leader. ``fluxctl cluster`` and the tests wait for this file, never for a sleep.

Until then the node waits as long as it takes (a node restarted while its quorum is down
stays up and joins when enough controllers are back) and keeps ``<data_dir>/node-state.json``
up to date: its pid, bound ports and what it is doing (``waiting for quorum: 1 of 3
controllers reachable``), which ``fluxctl cluster status`` shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from typing import TYPE_CHECKING, Any

from flux.controller.service import ControllerService, ControllerSettings, VoterAddress
from flux.protocol.api import ApiKey

from .compaction.service import LogCleanerService
from .config import NodeConfig
from .groups.coordinator import OFFSETS_TOPIC, GroupCoordinator, OffsetsRetention
from .groups.offsets_client import OffsetsClient
from .heap import HeapPolicy
from .http.api import HttpApi
from .http.auth import HttpAuthenticator
from .http.malformed import MalformedRequestLog
from .http.memory_topics import MemoryTopicCleaner
from .http.metrics import BrokerMetrics
from .http.push import PushManager, PushSettings
from .http.server import HTTP_LISTENER, BrokerHttpServer
from .internal_security import InternalSecurity
from .kafka.apis import ADVERTISED_VERSIONS, KafkaApis
from .kafka.producer_ids import ProducerIdManager
from .kafka.sasl import ImageCredentials, listener_security
from .kafka.server import Deferred, KafkaServer, RequestBytesBudget
from .launcher import READY_FILE, STATE_FILE, write_json_atomically
from .metadata.controller_client import ControllerClient
from .metadata.lifecycle import WAITING_LOG_INTERVAL_S, BrokerLifecycle
from .open_files import LOW_OPEN_FILE_LIMIT, low_limit_advice, raise_open_file_limit
from .replication.fetcher import ReplicaFetcherManager
from .replication.isr import IsrManager
from .replication.peers import BrokerPeers
from .replication.replica_manager import ReplicaManager
from .transactions.coordinator import TransactionCoordinator
from .v1.commands import LISTENER_NAME as V1_LISTENER
from .v1.commands import V1Commands
from .v1.server import V1Server

if TYPE_CHECKING:
    from flux.console import Console
    from flux.registry import SchemaRegistry

__all__ = ["Node", "run_node"]

log = logging.getLogger("flux.cluster.node")

#: A controller-only node without a quorum leader this long reports that it waits (and logs
#: it every ``WAITING_LOG_INTERVAL_S``).
QUORUM_CHECK_INTERVAL_S = 1.0


class Node:
    """One Flux node with the roles its configuration names."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.internal = InternalSecurity.from_config(config)
        self.controller: ControllerService | None = None
        self.replicas: ReplicaManager | None = None
        self.kafka_servers: list[KafkaServer] = []
        self.lifecycle: BrokerLifecycle | None = None
        self.isr: IsrManager | None = None
        self.http: BrokerHttpServer | None = None
        self.fetchers: ReplicaFetcherManager | None = None
        self.metrics: BrokerMetrics | None = None
        self.peers: BrokerPeers | None = None
        self.http_api: HttpApi | None = None
        self.console: Console | None = None
        self.registry: SchemaRegistry | None = None
        self.v1: V1Server | None = None
        self.heap: HeapPolicy | None = None
        self.push: PushManager | None = None
        self.memory_cleaner: MemoryTopicCleaner | None = None
        self.log_cleaner: LogCleanerService | None = None
        self.groups: GroupCoordinator | None = None
        self.transactions: TransactionCoordinator | None = None
        self._controller_client: ControllerClient | None = None
        self._ready: dict[str, Any] = {}

    def _controller_status(self) -> dict[str, Any] | None:
        """This node's controller's view of the quorum (for /metrics), None without one."""
        controller = self.controller
        if controller is None:
            return None
        try:
            return controller.quorum.status()
        except Exception:  # not started yet, or stopping
            return None

    def _write_state(self, state: str) -> None:
        """Record what the node is doing (for fluxctl cluster status)."""
        write_json_atomically(self.config.data_dir / STATE_FILE, {**self._ready, "state": state})

    async def start(self) -> None:
        config = self.config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        ready_path = config.data_dir / READY_FILE
        ready_path.unlink(missing_ok=True)
        ready: dict[str, Any] = {
            "node_id": config.node.id,
            "pid": os.getpid(),
            "roles": list(config.node.roles),
        }
        self._ready = ready
        self._write_state("starting")
        if "controller" in config.node.roles:
            await self._start_controller()
            assert self.controller is not None
            ready["controller_http"] = f"{config.controller.host}:{self.controller.http_port}"
        if "broker" in config.node.roles:
            await self._start_broker()  # adds the broker's addresses to ``ready``
        else:
            await self._wait_for_quorum_leader()
        self._write_state("ready")
        if self.heap is not None:
            self.heap.settle()  # what start-up built lives as long as the node
        write_json_atomically(ready_path, ready)
        log.info("node %d ready: %s", config.node.id, ready)

    async def _start_controller(self) -> None:
        config = self.config
        controller = config.controller
        self.controller = ControllerService(
            ControllerSettings(
                node_id=config.node.id,
                host=controller.host,
                http_port=controller.http_port,
                voters=tuple(
                    VoterAddress(v.node_id, v.raft_address, v.http_address)
                    for v in controller.voters
                ),
                data_dir=config.data_dir / "controller",
                secret=controller.secret,
                session_timeout_ms=controller.session_timeout_ms,
                liveness_probe_after_ms=controller.liveness_probe_after_ms,
                metadata_deltas_max=controller.metadata_deltas_max,
                preferred_leader_election_delay_ms=controller.preferred_leader_election_delay_ms,
                default_partitions=config.topic.partitions,
                default_replication_factor=config.topic.replication_factor,
                default_min_insync_replicas=config.topic.min_insync_replicas,
                election_timeout_ms=(
                    controller.election_timeout_min_ms,
                    controller.election_timeout_max_ms,
                ),
                ssl_context=self.internal.server_ssl,
                middlewares=tuple(self.internal.middlewares()),
                internal=self.internal,
                body_timeout_ms=config.broker.request_timeout_ms,
                connections_max_idle_ms=config.broker.connections_max_idle_ms,
            ),
            http_logger=MalformedRequestLog(logging.getLogger("flux.controller.http")),
        )
        await self.controller.start()

    async def _start_broker(self) -> None:
        config = self.config
        self.replicas = ReplicaManager(config)
        replicas = self.replicas
        self._controller_client = client = ControllerClient(
            [voter.http_address for voter in config.controller.voters], internal=self.internal
        )
        # Controllers added or removed at run time are in the metadata (quorum_changes.py).
        replicas.add_image_listener(
            lambda image: client.set_addresses([http for _id, _raft, http in image.quorum_voters])
        )
        # The HTTP port is registered with the controller; it is bound (below) before the
        # lifecycle starts, once every handler it serves exists.
        self.lifecycle = BrokerLifecycle(config, self._controller_client, replicas, http_port=0)
        groups = GroupCoordinator(
            replicas,
            initial_rebalance_delay_ms=config.broker.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.broker.group_min_session_timeout_ms,
            max_session_timeout_ms=config.broker.group_max_session_timeout_ms,
            create_offsets_topic=lambda: apis.create_offsets_topic(),
            retention=OffsetsRetention.from_config(config),
        )
        self.groups = groups
        producer_ids = ProducerIdManager(self._controller_client, broker_id=config.node.id)
        self.transactions = transactions = TransactionCoordinator(
            replicas,
            producer_ids,
            peers=lambda: self.peers,
            create_topic=lambda: apis.create_transaction_topic(),
            expiration_ms=config.broker.transactional_id_expiration_ms,
            on_marker=lambda topic, index, producer_id, commit: (
                groups.complete_transaction(index, producer_id, commit)
                if topic == OFFSETS_TOPIC
                else None
            ),
        )
        apis = KafkaApis(
            config,
            replicas,
            self._controller_client,
            self.lifecycle,
            producer_ids,
            groups,
            transactions,
        )
        self.metrics = BrokerMetrics(
            broker_id=config.node.id,
            partitions=replicas.partitions,
            image=lambda: replicas.image,
            offline_log_dirs=lambda: int(replicas.log_dir_offline),
            traffic=lambda: replicas,
            controller=self._controller_status,
        )
        heap = self.heap = HeapPolicy(self.metrics.gc_pauses.observe)
        replicas.add_image_listener(
            lambda _image: heap.after_image(replicas.last_opened, replicas.last_removed)
        )
        self.peers = BrokerPeers(
            lambda: replicas.image, broker_id=config.node.id, internal=self.internal
        )
        offsets = OffsetsClient(groups, self.peers)
        self.http_api = http_api = HttpApi(
            replicas=replicas,
            apis=apis,
            groups=groups,
            peers=self.peers,
            offsets=offsets,
            metrics=self.metrics,
            broker_id=config.node.id,
            allow_auto_create=config.broker.auto_create_topics,
            body_timeout_s=config.broker.request_timeout_ms / 1000,
        )
        http_api.controller_id = lambda: self.lifecycle.controller_id
        configured_voters = tuple(
            (v.node_id, v.raft_address, v.http_address) for v in config.controller.voters
        )
        # The image names the voters once the quorum was reconfigured; before, the config does.
        http_api.quorum_voters = lambda: replicas.image.quorum_voters or configured_voters
        credentials = ImageCredentials(lambda: replicas.image)
        http_auth = HttpAuthenticator(
            required=config.security.http_auth == "required",
            credentials=credentials,
            authorization=apis.authorization,
            image=lambda: replicas.image,
            body_timeout_s=http_api.body_timeout_s,
        )
        # The web console mounts on this server and reads through the HTTP API (the node is
        # where the parts are assembled: flux.console imports flux.cluster.http, not back).
        from flux.console import Console

        self.console = Console(http_api)
        # The schema registry, too, mounts here and stores its records in a topic.
        from flux.registry import SchemaRegistry

        self.registry = SchemaRegistry(http_api)
        apis.record_validator = self.registry.validation
        self.http = BrokerHttpServer(
            host=config.broker.host,
            port=config.broker.http_port,
            health=self._health,
            replication=replicas,
            routes=[*http_api.routes(), *self.console.routes(), *self.registry.routes()],
            ssl_context=self.internal.server_ssl,
            middlewares=[*self.internal.middlewares(), *http_auth.middlewares()],
            on_malformed=self.metrics.http_malformed_requests.inc,
            idle_timeout_s=config.broker.connections_max_idle_ms / 1000,
            max_connections=config.broker.max_connections,
            on_refused=self.metrics.connections_refused.labels(HTTP_LISTENER).inc,
        )
        await self.http.start()
        http_server = self.http
        self.metrics.connections.labels(HTTP_LISTENER).set_function(
            lambda: http_server.connection_count
        )
        self.lifecycle.http_port = self.http.port
        handle = _measured(apis.handle, self.metrics)
        # The listener binds first so the registration carries the real port; requests that
        # arrive before the first metadata image are answered from the empty image.
        request_budget = RequestBytesBudget(config.broker.queued_max_request_bytes)
        for listener in config.listeners:
            server = KafkaServer(
                handle,
                host=listener.host,
                port=listener.port,
                max_request_bytes=config.broker.socket_request_max_bytes,
                max_connections=config.broker.max_connections,
                advertised_versions=ADVERTISED_VERSIONS,
                listener=listener.name,
                security=listener_security(
                    listener.security_protocol, config.security, credentials
                ),
                request_budget=request_budget,
                frame_read_timeout_s=config.broker.request_timeout_ms / 1000,
                connections_max_idle_s=config.broker.connections_max_idle_ms / 1000,
                on_idle_close=self.metrics.kafka_idle_connections_closed.labels(listener.name).inc,
                on_refused=self.metrics.connections_refused.labels(listener.name).inc,
            )
            await server.start()
            self.metrics.connections.labels(listener.name).set_function(
                lambda server=server: server.connection_count
            )
            self.kafka_servers.append(server)
        self.lifecycle.listeners = [
            (listener.name, listener.advertised_host, listener.advertised_port or server.port)
            for listener, server in zip(config.listeners, self.kafka_servers, strict=True)
        ]
        if config.v1.port >= 0:
            # The V1 front door, registered as a listener of its own so every broker can name
            # every other's V1 address (NOT_LEADER answers, ADMIN_GET_METADATA).
            self.v1 = V1Server(
                V1Commands(
                    replicas=replicas,
                    apis=apis,
                    offsets=offsets,
                    groups=groups,
                    broker_id=config.node.id,
                ),
                host=config.broker.host,
                port=config.v1.port,
                max_line_bytes=config.v1.max_line_bytes,
                max_in_flight=config.v1.max_in_flight,
            )
            await self.v1.start()
            self.lifecycle.listeners.append(
                (V1_LISTENER, self.lifecycle.listeners[0][1], self.v1.port)
            )
        # The bound ports are known from here on: reported while waiting for the quorum too.
        _name, host, port = self.lifecycle.listeners[0]
        self._ready.update(
            host=host,
            kafka_port=port,
            bootstrap_servers=f"{host}:{port}",
            listeners={name: f"{host}:{port}" for name, host, port in self.lifecycle.listeners},
            broker_http=f"{host}:{self.http.port}",
            **({"v1": f"{host}:{self.v1.port}"} if self.v1 is not None else {}),
        )
        self.lifecycle.on_state = self._write_state
        # Fetchers listen to images from the first one on, so they exist before following starts.
        self.fetchers = ReplicaFetcherManager(
            replicas,
            broker_id=config.node.id,
            incarnation_id=self.lifecycle.incarnation_id,
            internal=self.internal,
        )
        self.fetchers.on_leader_lost = self.lifecycle.report_unreachable
        await self.lifecycle.start()
        replicas.start_background_tasks()
        self.isr = IsrManager(
            replicas,
            self._controller_client,
            broker_id=config.node.id,
            incarnation_id=self.lifecycle.incarnation_id,
            lag_time_max_ms=config.broker.replica_lag_time_max_ms,
        )
        self.isr.start()
        self.push = PushManager(
            settings=PushSettings.from_config(config),
            replicas=replicas,
            offsets=offsets,
            apis=apis,
            metrics=self.metrics,
            broker_id=config.node.id,
        )
        self.push.start()
        http_api.push_deliveries = self.push.deliveries
        self.memory_cleaner = MemoryTopicCleaner(
            replicas=replicas,
            offsets=offsets,
            metrics=self.metrics,
            interval_ms=config.message.cleanup_interval_ms,
        )
        self.memory_cleaner.start()
        if config.cleaner.enable:
            self.log_cleaner = LogCleanerService(
                replicas,
                dedupe_buffer_bytes=config.cleaner.dedupe_buffer_bytes,
                io_max_bytes_per_second=config.cleaner.io_max_bytes_per_second,
                backoff_ms=config.cleaner.backoff_ms,
                metrics=self.metrics,
            )
            self.log_cleaner.start()
        # As long as it takes: the quorum may be down until other nodes return.
        await self.lifecycle.ready.wait()

    def _health(self) -> dict[str, Any]:
        lifecycle = self.lifecycle
        registered = lifecycle is not None and lifecycle.ready.is_set() and not lifecycle.stale
        offline = self.replicas is not None and self.replicas.log_dir_offline
        return {
            "healthy": registered and not offline,
            # The data directory failed (a disk fault): see docs/operations.md, "Disk faults".
            "log_dir_offline": offline,
            "node_id": self.config.node.id,
            "metadata_version": self.replicas.image.version if self.replicas else 0,
            # How metadata arrived: commands replayed as deltas, and whole images (snapshots).
            "metadata_deltas": lifecycle.metadata_deltas if lifecycle is not None else 0,
            "metadata_snapshots": lifecycle.metadata_snapshots if lifecycle is not None else 0,
            "state": lifecycle.state if lifecycle is not None else "starting",
        }

    async def _wait_for_quorum_leader(self) -> None:
        """A controller-only node is ready once its quorum has a leader: however long that
        takes (it says so in its state file and, once in a while, its log)."""
        assert self.controller is not None
        loop = asyncio.get_running_loop()
        waiting_since = loop.time()
        last_logged: float | None = None
        while self.controller.leader_id() is None:
            now = loop.time()
            if now - waiting_since >= QUORUM_CHECK_INTERVAL_S and (
                last_logged is None or now - last_logged >= WAITING_LOG_INTERVAL_S
            ):
                state = "waiting for quorum: no active controller"
                if last_logged is None:
                    self._write_state(state)
                log.warning("controller %d is %s", self.config.node.id, state)
                last_logged = now
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        # The data directory may be read-only or failing (a disk fault): stop all the same.
        with contextlib.suppress(OSError):
            (self.config.data_dir / READY_FILE).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            (self.config.data_dir / STATE_FILE).unlink(missing_ok=True)
        if self.heap is not None:
            self.heap.close()
        if self.push is not None:
            await self.push.stop()
        if self.memory_cleaner is not None:
            await self.memory_cleaner.stop()
        if self.log_cleaner is not None:
            await self.log_cleaner.stop()
        if self.groups is not None:
            await self.groups.stop()
        if self.transactions is not None:
            await self.transactions.stop()
        if self.isr is not None:
            await self.isr.stop()
        if self.fetchers is not None:
            await self.fetchers.stop()
        if self.lifecycle is not None:
            await self.lifecycle.stop()
        for server in self.kafka_servers:
            await server.stop()
        if self.v1 is not None:
            await self.v1.stop()
        if self.console is not None:
            await self.console.close()
        if self.http_api is not None:
            await self.http_api.close()
        if self.http is not None:
            await self.http.stop()
        if self.peers is not None:
            await self.peers.close()
        if self.replicas is not None:
            await self.replicas.close()
        if self._controller_client is not None:
            await self._controller_client.close()
        if self.controller is not None:
            await self.controller.stop()
        log.info("node %d stopped", self.config.node.id)


async def _main(config: NodeConfig) -> None:
    node = Node(config)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    try:
        await node.start()
        await stopping.wait()
    finally:
        await node.stop()


def run_node(config: NodeConfig) -> None:
    """Run a node in this process until SIGTERM/SIGINT."""
    logging.basicConfig(
        level=config.node.log_level,
        format=f"%(asctime)s %(levelname)s %(name)s [node {config.node.id}] %(message)s",
    )
    # What the JVM does for a Kafka broker: the soft open-file limit up to the hard one.
    open_files, _ = raise_open_file_limit()
    if open_files < LOW_OPEN_FILE_LIMIT:
        log.warning("the open-file limit is low: %s", low_limit_advice(open_files))
    else:
        log.info("open-file limit: %d", open_files)
    try:
        import uvloop
    except ImportError:  # uvloop is optional: plain asyncio is correct, only slower
        asyncio.run(_main(config))
    else:
        uvloop.run(_main(config))


def _measured(handle: Any, metrics: BrokerMetrics) -> Any:
    """``KafkaApis.handle`` counting requests and timing them by API (a deferred response
    until it is complete)."""

    children: dict[int, tuple[Any, Any]] = {}  # api key -> its (counter, histogram) series

    def observe(api_key: int, started: float) -> None:
        series = children.get(api_key)
        if series is None:
            try:
                api = ApiKey(api_key).name
            except ValueError:
                api = str(api_key)
            series = (metrics.kafka_requests.labels(api), metrics.kafka_latency.labels(api))
            children[api_key] = series
        series[0].inc()
        series[1].observe(time.perf_counter() - started)

    async def measured(header: Any, body: dict[str, Any], connection: Any) -> Any:
        started = time.perf_counter()
        deferred = False
        try:
            response = await handle(header, body, connection)
            if isinstance(response, Deferred):
                deferred = True
                response.task.add_done_callback(lambda _: observe(header.api_key, started))
            return response
        finally:
            if not deferred:
                observe(header.api_key, started)

    return measured
