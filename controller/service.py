"""The controller process role: the Raft quorum plus its HTTP API, broker sessions, fencing
and preferred-leader restoration.

Every node with the controller role runs one ``ControllerService``. Any controller serves
committed metadata (``GET /controller/metadata`` long-polls for a version newer than the
caller's); writes are computed by the pure handlers of ``flux.controller.handlers`` and
proposed through Raft by the *active* controller (the Raft leader) only. A write sent to
another controller is answered with HTTP 421 and a leader hint (``leader_id``,
``leader_http``), never forwarded.

One owner: all writes of the active controller go through ``_write``, which holds one
``asyncio.Lock`` from computing records on the current image to their commit, so each
decision is made on the image the previous decision produced.

HTTP API (JSON bodies; every answer carries ``error_code`` and ``error_message``):

==========================================  ==================================================
``POST /controller/brokers/register``       register a broker incarnation (starts fenced)
``POST /controller/brokers/heartbeat``      keep the session; unfences a caught-up broker
``POST /controller/brokers/unreachable``    a broker's replication connection to another broke:
                                            probe that one now (``flux.controller.liveness``)
``POST /controller/brokers/unregister``     UnregisterBroker: remove a drained, stopped
                                            broker's registration (``broker_id``)
``GET  /controller/metadata``               ``?version=N&wait_ms=M[&deltas=1]``: once newer than
                                            N, the image, or with ``deltas=1`` the records
                                            since N (the image when N is too old)
``POST /controller/topics``                 create a topic (placement done here)
``DELETE /controller/topics/{name}``        delete a topic
``POST /controller/topics/{name}/partitions``  grow a topic to ``count`` partitions
``POST /controller/partitions/alter``       AlterPartition: the leader proposes new ISRs (one
                                            partition, or ``partitions: [...]`` at once)
``POST /controller/elect-leaders``          manual preferred (or unclean) leader election
``POST /controller/reassignments``          start or cancel partition reassignments
                                            (``partitions: [[topic, p, replicas|null], ...]``)
``POST /controller/configs``                set or delete topic / broker config overrides
``POST /controller/producer-ids``           allocate a block of producer ids to a broker
``POST /controller/quorum/voters``         add a controller quorum voter (``node_id``,
                                            ``raft_address``, ``http_address``), one change at
                                            a time (``flux.controller.quorum_changes``)
``DELETE /controller/quorum/voters/{id}``   remove a voter (the active controller itself: it
                                            hands leadership over and answers 421)
``GET  /controller/status``                 this controller's Raft view and the voters
==========================================  ==================================================

Voters: Flux's view of the quorum (``leader_id``, leader hints) is the ``QuorumVoters`` record
of the metadata log once a change was made, the config file's voters before; the Raft
membership itself is pysyncobj's (``flux.controller.membership`` explains the split).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.log import server_logger
from flux.protocol.errors import ErrorCode

from . import handlers, security
from .errors import InvalidRecordError
from .handlers import ControllerResult
from .image import MetadataImage
from .liveness import LivenessProber, ProbeTarget
from .membership import VoterAddress
from .quorum import MetadataQuorum, NotControllerError, ProposalTimeoutError
from .quorum_changes import QuorumChanges

__all__ = ["ControllerService", "ControllerSettings", "VoterAddress"]

log = logging.getLogger("flux.controller.service")

MAX_METADATA_WAIT_MS = 30_000
SESSION_CHECK_INTERVAL_S = 0.1
#: A session check this much later than due means the controller itself stalled.
STALL_GRACE_S = 0.5
PROPOSAL_TIMEOUT_S = 5.0
MAX_REQUEST_BYTES = 1 << 20


@dataclass(frozen=True)
class ControllerSettings:
    node_id: int
    host: str
    http_port: int
    voters: tuple[VoterAddress, ...]
    data_dir: Path
    secret: str
    session_timeout_ms: int = 3000
    #: Probe a broker whose heartbeats are this late (0: never probe; see liveness.py).
    liveness_probe_after_ms: int = 1000
    metadata_deltas_max: int = 10_000
    preferred_leader_election_delay_ms: int = 5000
    default_partitions: int = 1
    default_replication_factor: int = 1
    default_min_insync_replicas: int = 1
    election_timeout_ms: tuple[int, int] = (400, 1000)
    #: TLS context of the HTTP server (None: plain HTTP) and aiohttp middlewares (the node
    #: credential check), both from the node (``cluster.internal_security``).
    ssl_context: Any = None
    middlewares: tuple[Any, ...] = ()
    #: How this controller calls another one (``cluster.internal_security.InternalSecurity``:
    #: ``url()``, ``ssl``); None: plain HTTP. Used to check a controller before adding it.
    internal: Any = None
    #: How long a request's body may take to arrive once its headers have (the node's
    #: ``broker.request_timeout_ms``); later the request is answered 408 and its connection
    #: closed, so a client that stops sending holds nothing.
    body_timeout_ms: int = 30_000
    #: A connection waiting this long for a request is closed (aiohttp's keep-alive timer:
    #: from the connection's start or its last answer; the node's
    #: ``broker.connections_max_idle_ms``).
    connections_max_idle_ms: int = 600_000

    @property
    def self_voter(self) -> VoterAddress:
        return next(voter for voter in self.voters if voter.node_id == self.node_id)


@dataclass
class _Session:
    incarnation_id: str
    deadline: float  # time.monotonic() after which the broker is fenced
    caught_up_version: int  # the broker is unfenced once its metadata reaches this version


class _BadRequest(Exception):
    """A request body that is not what the endpoint takes (HTTP 400)."""


class _BodyTimeout(Exception):
    """A request body that did not all arrive in time (HTTP 408)."""


class _NotController(Exception):
    pass


class ControllerService:
    """The controller role of a node. Start with ``await start()``, stop with ``await stop()``."""

    def __init__(
        self,
        settings: ControllerSettings,
        *,
        rng: random.Random | None = None,
        http_logger: logging.Logger | logging.LoggerAdapter | None = None,  # type: ignore[type-arg]
    ) -> None:
        """``http_logger``: what aiohttp's request handler logs to (its own by default; the
        node passes one that logs a malformed request as one line, not a traceback)."""
        self.settings = settings
        self._http_logger = http_logger or server_logger
        self._rng = rng or random.Random()
        self._quorum: MetadataQuorum | None = None
        self._runner: web.AppRunner | None = None
        self._write_lock = asyncio.Lock()
        self._image_changed = asyncio.Event()
        self._sessions: dict[int, _Session] = {}
        self._electable_since: dict[tuple[str, int], float] = {}
        self._imbalance_image: MetadataImage | None = None
        self._imbalance: frozenset[tuple[str, int]] = frozenset()
        self._tasks: list[asyncio.Task[None]] = []
        self._prober = LivenessProber(self._fence_dead_broker)
        self.http_port = settings.http_port
        self._stopping = False
        self.quorum_changes = QuorumChanges(self)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        settings = self.settings
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        self._quorum = MetadataQuorum(
            node_id=settings.node_id,
            self_address=settings.self_voter.raft_address,
            bind_address=f"{settings.host}:{settings.self_voter.raft_address.rpartition(':')[2]}",
            peer_addresses=[
                v.raft_address for v in settings.voters if v.node_id != settings.node_id
            ],
            data_dir=settings.data_dir,
            secret=settings.secret,
            loop=asyncio.get_running_loop(),
            on_image=self._on_image,
            on_leadership=self._on_leadership,
            election_timeout_s=(
                settings.election_timeout_ms[0] / 1000,
                settings.election_timeout_ms[1] / 1000,
            ),
            max_delta_versions=settings.metadata_deltas_max,
        )
        app = web.Application(
            client_max_size=MAX_REQUEST_BYTES, middlewares=list(settings.middlewares)
        )
        app.add_routes(
            [
                web.post("/controller/brokers/register", self._json(self._register)),
                web.post("/controller/brokers/heartbeat", self._json(self._heartbeat)),
                web.post("/controller/brokers/unreachable", self._json(self._unreachable)),
                web.post("/controller/brokers/unregister", self._json(self._unregister)),
                web.get("/controller/metadata", self._metadata),
                web.post("/controller/topics", self._json(self._create_topic)),
                web.delete("/controller/topics/{name}", self._json(self._delete_topic)),
                web.post(
                    "/controller/topics/{name}/partitions", self._json(self._create_partitions)
                ),
                web.post("/controller/partitions/alter", self._json(self._alter_partition)),
                web.post("/controller/elect-leaders", self._json(self._elect_leaders)),
                web.post("/controller/reassignments", self._json(self._reassign)),
                web.post("/controller/configs", self._json(self._alter_configs)),
                web.post("/controller/scram-credentials", self._json(self._alter_credentials)),
                web.post("/controller/acls", self._json(self._change_acls)),
                web.post("/controller/producer-ids", self._json(self._allocate_producer_ids)),
                web.get("/controller/status", self._status),
                web.post("/controller/quorum/voters", self._json(self.quorum_changes.add)),
                web.delete(
                    "/controller/quorum/voters/{id}", self._json(self.quorum_changes.remove)
                ),
                web.post("/controller/subscriptions", self._json(self._register_subscription)),
                web.post(
                    "/controller/subscriptions/{id}/state",
                    self._json(self._set_subscription_state),
                ),
                web.delete("/controller/subscriptions/{id}", self._json(self._delete_subscription)),
            ]
        )
        self._runner = web.AppRunner(
            app,
            access_log=None,
            logger=self._http_logger,
            keepalive_timeout=self.settings.connections_max_idle_ms / 1000,
        )
        await self._runner.setup()
        site = web.TCPSite(
            self._runner,
            settings.host,
            settings.http_port,
            reuse_address=True,
            ssl_context=settings.ssl_context,
        )
        await site.start()
        self._tasks = [
            asyncio.create_task(self._check_sessions_forever()),
            asyncio.create_task(self._restore_preferred_leaders_forever()),
            asyncio.create_task(self.quorum_changes.reconcile_forever()),
        ]
        log.info(
            "controller %d: Raft on %s, HTTP on %s:%d",
            settings.node_id,
            settings.self_voter.raft_address,
            settings.host,
            settings.http_port,
        )

    async def stop(self) -> None:
        # Release metadata long-polls at once, so the HTTP server can close without waiting.
        self._stopping = True
        self._image_changed.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._prober.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._quorum is not None:
            await self._quorum.close()

    @property
    def quorum(self) -> MetadataQuorum:
        assert self._quorum is not None
        return self._quorum

    @property
    def image(self) -> MetadataImage:
        return self.quorum.image

    @property
    def is_active(self) -> bool:
        return self._quorum is not None and self._quorum.is_leader

    def leader_id(self) -> int | None:
        address = self.quorum.leader_address
        voter = self.quorum_changes.known_voters().get(address) if address else None
        return voter.node_id if voter is not None else None

    # -- boundary callbacks (called on the event loop by MetadataQuorum) -----------------------

    def _on_image(self, image: MetadataImage) -> None:
        self._image_changed.set()
        self._image_changed = asyncio.Event()

    def _on_leadership(self, is_leader: bool) -> None:
        # Sessions live only in the active controller's memory: a new leader grants every
        # broker a full session timeout before it may fence anyone.
        self._sessions.clear()
        self._electable_since.clear()
        self._prober.forget()
        log.info("controller %d is %s", self.settings.node_id, "active" if is_leader else "standby")
        if is_leader:
            # The previous active controller may have died with its node's broker: find out
            # now instead of a whole session timeout from now (liveness.py).
            for broker_id in self.image.live_broker_ids():
                self._request_probe(broker_id, "a new active controller checks every broker")

    # -- writes -------------------------------------------------------------------------------

    async def _write(
        self, compute: Callable[[MetadataImage], ControllerResult], *, request_id: str | None = None
    ) -> tuple[ControllerResult, MetadataImage]:
        if not self.is_active:
            raise _NotController()
        async with self._write_lock:
            result = compute(self.quorum.image)
            if not result.records:
                return result, self.quorum.image
            image = await self.quorum.propose(
                result.records,
                request_id=request_id or uuid.uuid4().hex,
                timeout_s=PROPOSAL_TIMEOUT_S,
            )
            return result, image

    async def _json_body(self, request: web.Request) -> Any:
        """The decoded body, read within ``body_timeout_ms`` once it has not all come with
        the headers: a body that stops arriving (also a chunked one whose later chunk is
        malformed, which aiohttp's parser leaves waiting) is ``_BodyTimeout``, one cut short
        or refused by the parser ``_BadRequest``."""
        timeout_s = self.settings.body_timeout_ms / 1000
        try:
            async with asyncio.timeout(None if request.content.is_eof() else timeout_s):
                raw = await request.read()
        except TimeoutError:
            raise _BodyTimeout(f"the request body did not arrive within {timeout_s:g} s") from None
        except (ConnectionResetError, HttpProcessingError) as error:
            raise _BadRequest(f"the request body did not arrive whole: {error!r}") from None
        try:
            return json.loads(raw.decode(request.charset or "utf-8"))
        except LookupError:
            raise _BadRequest(f"unknown charset {request.charset!r}") from None

    def _json(
        self, handler: Callable[[web.Request, dict[str, Any]], Awaitable[dict[str, Any]]]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def endpoint(request: web.Request) -> web.Response:
            try:
                body = await self._json_body(request) if request.can_read_body else {}
                if not isinstance(body, dict):
                    raise _BadRequest("the body must be a JSON object")
                answer = await handler(request, body)
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
                return _error(400, ErrorCode.INVALID_REQUEST, f"invalid JSON: {error}")
            except _BodyTimeout as error:
                response = _error(408, ErrorCode.REQUEST_TIMED_OUT, str(error))
                response.force_close()  # the rest of the body may still come
                return response
            except _BadRequest as error:
                return _error(400, ErrorCode.INVALID_REQUEST, str(error))
            except InvalidRecordError as error:
                # A value the records cannot carry (a string over their length limit, ...)
                # that the handler's own checks let through.
                return _error(400, ErrorCode.INVALID_REQUEST, f"refused: {error}")
            except (_NotController, NotControllerError):
                return self._not_controller()
            except ProposalTimeoutError as error:
                return _error(503, ErrorCode.REQUEST_TIMED_OUT, f"not committed in time: {error}")
            return web.json_response(answer)

        return endpoint

    def _not_controller(self) -> web.Response:
        leader_id = self.leader_id()
        leader_http = next(
            (
                v.http_address
                for v in self.quorum_changes.known_voters().values()
                if v.node_id == leader_id
            ),
            None,
        )
        return web.json_response(
            {
                "error_code": int(ErrorCode.NOT_CONTROLLER),
                "error_message": f"controller {self.settings.node_id} is not the active controller",
                "leader_id": leader_id,
                "leader_http": leader_http,
            },
            status=421,
        )

    # -- brokers ------------------------------------------------------------------------------

    async def _register(self, request: web.Request, body: dict[str, Any]) -> dict[str, Any]:
        broker_id = _int_field(body, "broker_id")
        incarnation_id = _str_field(body, "incarnation_id")
        log_dir_id = body.get("log_dir_id", "")
        if not isinstance(log_dir_id, str):
            raise _BadRequest(f"field 'log_dir_id' must be a string, got {log_dir_id!r}")
        await self._wait_sessions_confirmed(broker_id)
        result, image = await self._write(
            lambda image: handlers.register_broker(
                image,
                broker_id=broker_id,
                incarnation_id=incarnation_id,
                kafka_host=_str_field(body, "kafka_host"),
                kafka_port=_int_field(body, "kafka_port"),
                http_host=_str_field(body, "http_host"),
                http_port=_int_field(body, "http_port"),
                rack=body.get("rack") or None,
                listeners=_listeners_field(body),
                log_dir_id=log_dir_id,
                default_min_isr=self.settings.default_min_insync_replicas,
            )
        )
        if result.response.get("error_code", 0) == 0:
            self._sessions[broker_id] = _Session(incarnation_id, self._deadline(), image.version)
            log.info("broker %d registered (incarnation %s)", broker_id, incarnation_id)
        return {**result.response, "version": image.version}

    async def _wait_sessions_confirmed(self, broker_id: int) -> None:
        """Before a re-registration moves leaders and ISRs: wait (at most a session timeout and
        a bit) until every other live broker has heartbeated to this controller or been fenced.

        After a controller failover the brokers that died with the old controller still look
        live; deciding while they do could take a returning broker out of an ISR led by a dead
        one and leave it ineligible (election.py). Their sessions all end together, so waiting
        lets them leave as one event that keeps every ISR whole (the whole-cluster crash)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.session_timeout_ms / 1000 + 1.0
        while loop.time() < deadline and self.is_active:
            waiting = [b for b in self.image.unconfirmed_broker_ids() if b != broker_id]
            if not waiting:
                return
            await asyncio.sleep(SESSION_CHECK_INTERVAL_S / 2)

    async def _heartbeat(self, request: web.Request, body: dict[str, Any]) -> dict[str, Any]:
        broker_id = _int_field(body, "broker_id")
        incarnation_id = _str_field(body, "incarnation_id")
        metadata_version = _int_field(body, "metadata_version")
        if not self.is_active:
            raise _NotController()
        session = self._sessions.get(broker_id)
        if session is None or session.incarnation_id != incarnation_id:
            registration = self.image.brokers.get(broker_id)
            if registration is not None and registration.incarnation_id == incarnation_id:
                session = _Session(incarnation_id, self._deadline(), self.image.version)
                self._sessions[broker_id] = session
        caught_up = session is not None and metadata_version >= session.caught_up_version
        # A fenced broker stays fenced until its metadata has caught up; an unfenced one is
        # never fenced by a heartbeat (only by silence), however far its metadata lags.
        registration = self.image.brokers.get(broker_id)
        keep_fenced = registration is not None and registration.fenced and not caught_up
        # A broker whose log directory failed asks to be fenced (Kafka's WantFence with
        # offline log dirs): its leaderships move to the other in-sync replicas at once.
        keep_fenced = keep_fenced or body.get("want_fence") is True
        result, image = await self._write(
            lambda image: handlers.broker_heartbeat(
                image,
                broker_id=broker_id,
                incarnation_id=incarnation_id,
                want_fence=keep_fenced,
                default_min_isr=self.settings.default_min_insync_replicas,
            )
        )
        if result.response.get("error_code", 0) == 0 and session is not None:
            session.deadline = self._deadline()
        return {**result.response, "version": image.version}

    async def _unregister(self, request: web.Request, body: dict[str, Any]) -> dict[str, Any]:
        broker_id = _int_field(body, "broker_id")
        # The voters as changed at run time (fluxctl controller), not only the config's.
        voter_ids = [voter.node_id for voter in self.quorum_changes.voters()]
        result, image = await self._write(
            lambda image: handlers.unregister_broker(
                image, broker_id=broker_id, voter_ids=voter_ids
            )
        )
        if result.ok:
            self._sessions.pop(broker_id, None)
        return {**result.response, "version": image.version}

    async def _unreachable(self, request: web.Request, body: dict[str, Any]) -> dict[str, Any]:
        reporter = _int_field(body, "reporter_id")
        broker_id = _int_field(body, "broker_id")
        if not self.is_active:
            raise _NotController()
        probing = self._request_probe(
            broker_id,
            f"broker {reporter} lost its connection to it",
            incarnation_id=body.get("incarnation_id"),
        )
        return {"error_code": 0, "error_message": None, "probing": probing}

    def _request_probe(self, broker_id: int, reason: str, *, incarnation_id: Any = None) -> bool:
        """Probe the live broker ``broker_id`` (the incarnation named, if one is)."""
        if self.settings.liveness_probe_after_ms <= 0:
            return False
        registration = self.image.brokers.get(broker_id)
        if registration is None or registration.fenced:
            return False
        if incarnation_id is not None and incarnation_id != registration.incarnation_id:
            return False
        return self._prober.request(
            ProbeTarget(
                broker_id,
                registration.incarnation_id,
                registration.http_host,
                registration.http_port,
            ),
            reason,
        )

    async def _fence_dead_broker(self, target: ProbeTarget, reason: str) -> None:
        """Fence ``target`` (a refused probe) if that incarnation is still the live one."""

        def still_live(image: MetadataImage) -> bool:
            registration = image.brokers.get(target.broker_id)
            return (
                registration is not None
                and not registration.fenced
                and registration.incarnation_id == target.incarnation_id
            )

        if not self.is_active or not still_live(self.image):
            return
        log.warning("broker %d is gone (%s): fencing it", target.broker_id, reason)
        await self._write(
            lambda image: ControllerResult(
                records=handlers.fence_brokers(
                    image,
                    [target.broker_id] if still_live(image) else [],
                    default_min_isr=self.settings.default_min_insync_replicas,
                ),
                response={"error_code": 0, "error_message": None},
            )
        )

    def _deadline(self) -> float:
        return time.monotonic() + self.settings.session_timeout_ms / 1000

    async def _check_sessions_forever(self) -> None:
        last_check = time.monotonic()
        while True:
            await asyncio.sleep(SESSION_CHECK_INTERVAL_S)
            now = time.monotonic()
            stalled_s = now - last_check - SESSION_CHECK_INTERVAL_S
            last_check = now
            if stalled_s > STALL_GRACE_S:
                # This process could not run (its event loop was busy, say opening thousands
                # of partitions, or it was paused): heartbeats that arrived meanwhile wait
                # unread in the sockets. The stall is this controller's, not the brokers':
                # it does not count against their sessions.
                for session in self._sessions.values():
                    session.deadline += stalled_s
                log.warning("session check ran %.1f s late: sessions extended", stalled_s)
            if not self.is_active:
                continue
            try:
                await self._fence_expired_brokers()
            except (NotControllerError, _NotController, ProposalTimeoutError) as error:
                log.warning("fencing check did not complete: %r", error)
            except Exception:
                log.exception("fencing check failed")

    async def _fence_expired_brokers(self) -> None:
        now = time.monotonic()
        session_s = self.settings.session_timeout_ms / 1000
        probe_after_s = self.settings.liveness_probe_after_ms / 1000
        expired = []
        for broker_id in self.image.live_broker_ids():
            registration = self.image.brokers[broker_id]
            session = self._sessions.get(broker_id)
            if session is None or session.incarnation_id != registration.incarnation_id:
                self._sessions[broker_id] = _Session(
                    registration.incarnation_id, self._deadline(), self.image.version
                )
                continue
            if now >= session.deadline:
                expired.append(broker_id)
            elif probe_after_s > 0 and now >= session.deadline - session_s + probe_after_s:
                late_ms = (now - session.deadline + session_s) * 1000
                self._request_probe(broker_id, f"its heartbeats are {late_ms:.0f} ms late")
        if not expired:
            return
        log.warning(
            "broker(s) %s missed heartbeats for %d ms: fencing them",
            ", ".join(map(str, expired)),
            self.settings.session_timeout_ms,
        )
        # One decision for every session that ended now (see election.fence_brokers).
        await self._write(
            lambda image: ControllerResult(
                records=handlers.fence_brokers(
                    image, expired, default_min_isr=self.settings.default_min_insync_replicas
                ),
                response={"error_code": 0, "error_message": None},
            )
        )

    async def _restore_preferred_leaders_forever(self) -> None:
        delay_s = self.settings.preferred_leader_election_delay_ms / 1000
        while True:
            await asyncio.sleep(min(max(delay_s / 4, 0.05), 1.0))
            if not self.is_active:
                continue
            try:
                await self._restore_preferred_leaders(delay_s)
            except (NotControllerError, _NotController, ProposalTimeoutError) as error:
                log.warning("preferred leader election did not complete: %r", error)
            except Exception:
                log.exception("preferred leader election failed")

    async def _restore_preferred_leaders(self, delay_s: float) -> None:
        now = time.monotonic()
        # Only alive brokers count (preferred_leader_imbalance): after a failover, a dead
        # broker stays unfenced until its session expires, and must not be handed leadership.
        # The scan visits every partition, so it runs once per image, not once per check: an
        # idle cluster's check costs nothing whatever its size.
        image = self.image
        if self._imbalance_image is not image:
            self._imbalance = frozenset(handlers.preferred_leader_imbalance(image))
            self._imbalance_image = image
        electable = self._imbalance
        self._electable_since = {key: self._electable_since.get(key, now) for key in electable}
        due = [key for key, since in self._electable_since.items() if now - since >= delay_s]
        if not due:
            return
        result, _ = await self._write(
            lambda image: handlers.elect_leaders(
                image,
                partitions=due,
                election_type="preferred",
                default_min_isr=self.settings.default_min_insync_replicas,
            )
        )
        if result.records:
            log.info("restored preferred leaders of %d partitions", len(result.records))

    # -- metadata -----------------------------------------------------------------------------

    async def _metadata(self, request: web.Request) -> web.Response:
        try:
            version = int(request.query.get("version", "-1"))
            wait_ms = min(int(request.query.get("wait_ms", "0")), MAX_METADATA_WAIT_MS)
        except ValueError:
            return _error(400, ErrorCode.INVALID_REQUEST, "version and wait_ms must be integers")
        deadline = time.monotonic() + max(wait_ms, 0) / 1000
        while self.image.version <= version and not self._stopping:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(self._image_changed.wait(), remaining)
            except TimeoutError:
                break
        image = self.image
        answer: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "version": image.version,
            "controller_id": self.leader_id(),
        }
        # A follower that holds version N gets what happened since, in proportion to the
        # change; one that holds nothing, or is too far behind, gets the whole image.
        deltas = None
        if request.query.get("deltas") == "1" and version > 0:
            deltas = self.quorum.records_since(version)
        if deltas is not None:
            answer["deltas"] = [{"version": v, "records": records} for v, records in deltas]
            answer["version"] = deltas[-1][0] if deltas else version
        else:
            answer["image"] = image.to_dict()
        return web.json_response(answer)

    async def _status(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "node_id": self.settings.node_id,
                "active": self.is_active,
                "leader_id": self.leader_id(),
                "version": self.image.version,
                "raft": self.quorum.status(),
                **self.quorum_changes.describe(),
            }
        )

    # -- topics, partitions, configs ----------------------------------------------------------

    async def _create_topic(self, request: web.Request, body: dict[str, Any]) -> dict[str, Any]:
        name = _str_field(body, "name")
        assignments = body.get("assignments") or None
        if assignments is not None:
            if not isinstance(assignments, dict):
                raise _BadRequest("assignments must map partition numbers to broker id lists")
            try:
                assignments = {int(k): [int(b) for b in v] for k, v in assignments.items()}
            except (TypeError, ValueError):
                raise _BadRequest(
                    "assignments must map partition numbers to broker id lists"
                ) from None
        configs = body.get("configs") or {}
        if not isinstance(configs, dict) or not all(isinstance(v, str) for v in configs.values()):
            raise _BadRequest("configs must map config names to string values")
        topic_id = str(uuid.uuid4())
        result, image = await self._write(
            lambda image: handlers.create_topic(
                image,
                name=name,
                num_partitions=int(body.get("num_partitions", -1)),
                replication_factor=int(body.get("replication_factor", -1)),
                assignments=assignments,
                configs=configs,
                topic_id=topic_id,
                default_partitions=self.settings.default_partitions,
                default_replication_factor=self.settings.default_replication_factor,
                rng=self._rng,
                validate_only=bool(body.get("validate_only", False)),
            )
        )
        return {**result.response, "version": image.version}

    async def _delete_topic(self, request: web.Request, body: dict[str, Any]) -> dict[str, Any]:
        name = request.match_info["name"]
        result, image = await self._write(lambda image: handlers.delete_topic(image, name=name))
        return {**result.response, "version": image.version}

    async def _create_partitions(
        self, request: web.Request, body: dict[str, Any]
    ) -> dict[str, Any]:
        name = request.match_info["name"]
        count = _int_field(body, "count")
        result, image = await self._write(
            lambda image: handlers.create_partitions(
                image,
                name=name,
                count=count,
                assignments=body.get("assignments") or None,
                rng=self._rng,
                validate_only=bool(body.get("validate_only", False)),
            )
        )
        return {**result.response, "version": image.version}

    async def _alter_partition(self, request: web.Request, body: dict[str, Any]) -> dict[str, Any]:
        if "partitions" in body:
            return await self._alter_partitions(body)
        isr = body.get("isr")
        if not isinstance(isr, list):
            raise _BadRequest("isr must be a list of broker ids")
        result, image = await self._write(
            lambda image: handlers.alter_partition(
                image,
                broker_id=_int_field(body, "broker_id"),
                incarnation_id=_str_field(body, "incarnation_id"),
                topic_id=_str_field(body, "topic_id"),
                partition=_int_field(body, "partition"),
                leader_epoch=_int_field(body, "leader_epoch"),
                partition_epoch=_int_field(body, "partition_epoch"),
                isr=[int(member) for member in isr],
                default_min_isr=self.settings.default_min_insync_replicas,
            )
        )
        return {**result.response, "version": image.version}

    async def _alter_partitions(self, body: dict[str, Any]) -> dict[str, Any]:
        items = body.get("partitions")
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise _BadRequest("partitions must be a list of objects")
        partitions = []
        for item in items:
            isr = item.get("isr")
            if not isinstance(isr, list) or not all(
                isinstance(member, int) and not isinstance(member, bool) for member in isr
            ):
                raise _BadRequest("isr must be a list of broker ids")
            partitions.append(
                {
                    "topic_id": _str_field(item, "topic_id"),
                    "partition": _int_field(item, "partition"),
                    "leader_epoch": _int_field(item, "leader_epoch"),
                    "partition_epoch": _int_field(item, "partition_epoch"),
                    "isr": isr,
                }
            )
        result, image = await self._write(
            lambda image: handlers.alter_partitions(
                image,
                broker_id=_int_field(body, "broker_id"),
                incarnation_id=_str_field(body, "incarnation_id"),
                partitions=partitions,
                default_min_isr=self.settings.default_min_insync_replicas,
            )
        )
        return {**result.response, "version": image.version}

    async def _elect_leaders(self, request: web.Request, body: dict[str, Any]) -> dict[str, Any]:
        raw = body.get("partitions")
        partitions = None
        if raw is not None:
            try:
                partitions = [(str(topic), int(index)) for topic, index in raw]
            except (TypeError, ValueError):
                raise _BadRequest("partitions must be a list of [topic, partition] pairs") from None
        election_type = body.get("type", "preferred")
        if election_type not in ("preferred", "unclean"):
            raise _BadRequest("type must be 'preferred' or 'unclean'")
        result, image = await self._write(
            lambda image: handlers.elect_leaders(
                image,
                partitions=partitions,
                election_type=election_type,
                default_min_isr=self.settings.default_min_insync_replicas,
            )
        )
        return {**result.response, "version": image.version}

    async def _reassign(self, request: web.Request, body: dict[str, Any]) -> dict[str, Any]:
        raw = body.get("partitions")
        try:
            requests = [
                (
                    str(topic),
                    int(index),
                    None if replicas is None else [int(r) for r in replicas],
                )
                for topic, index, replicas in raw
            ]
        except (TypeError, ValueError):
            raise _BadRequest(
                "partitions must be a list of [topic, partition, replicas or null]"
            ) from None
        result, image = await self._write(
            lambda image: handlers.alter_partition_reassignments(image, requests=requests)
        )
        return {**result.response, "version": image.version}

    async def _allocate_producer_ids(
        self, request: web.Request, body: dict[str, Any]
    ) -> dict[str, Any]:
        broker_id = _int_field(body, "broker_id")
        result, image = await self._write(
            lambda image: handlers.allocate_producer_ids(image, broker_id=broker_id)
        )
        return {**result.response, "version": image.version}

    async def _alter_configs(self, request: web.Request, body: dict[str, Any]) -> dict[str, Any]:
        changes = body.get("changes")
        if not isinstance(changes, dict):
            raise _BadRequest("changes must map config names to values (null deletes)")
        result, image = await self._write(
            lambda image: handlers.alter_configs(
                image,
                resource_type=_str_field(body, "resource_type"),
                resource_name=_str_field(body, "resource_name"),
                changes=changes,
                validate_only=bool(body.get("validate_only", False)),
            )
        )
        return {**result.response, "version": image.version}

    # -- security -----------------------------------------------------------------------------

    async def _alter_credentials(
        self, request: web.Request, body: dict[str, Any]
    ) -> dict[str, Any]:
        deletions = body.get("deletions", [])
        upsertions = body.get("upsertions", [])
        for name, value in (("deletions", deletions), ("upsertions", upsertions)):
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise _BadRequest(f"field {name!r} must be a list of objects")
        result, image = await self._write(
            lambda image: security.alter_scram_credentials(
                image, deletions=deletions, upsertions=upsertions
            )
        )
        return {**result.response, "version": image.version}

    async def _change_acls(self, request: web.Request, body: dict[str, Any]) -> dict[str, Any]:
        create = body.get("create", [])
        delete = body.get("delete", [])
        for name, value in (("create", create), ("delete", delete)):
            if not isinstance(value, list):
                raise _BadRequest(f"field {name!r} must be a list of ACL bindings")
        result, image = await self._write(
            lambda image: security.change_acls(image, create=create, delete=delete)
        )
        return {**result.response, "version": image.version}

    # -- push subscriptions -------------------------------------------------------------------

    async def _register_subscription(
        self, request: web.Request, body: dict[str, Any]
    ) -> dict[str, Any]:
        topics = body.get("topics")
        if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
            raise _BadRequest("field 'topics' must be a list of topic names")
        read_old = body.get("read_old", False)
        if not isinstance(read_old, bool):
            raise _BadRequest("field 'read_old' must be true or false")
        # Absent from a broker that predates windows: one message at a time.
        max_in_flight = _int_field(body, "max_in_flight") if "max_in_flight" in body else 1
        subscription_id = _str_field(body, "subscription_id")
        address = _str_field(body, "address")
        signing_secret = body.get("signing_secret", "")
        if not isinstance(signing_secret, str) or len(signing_secret) > 256:
            raise _BadRequest("field 'signing_secret' must be a string of at most 256 characters")
        now_ms = int(time.time() * 1000)
        result, image = await self._write(
            lambda image: handlers.register_subscription(
                image,
                subscription_id=subscription_id,
                address=address,
                topics=topics,
                read_old=read_old,
                now_ms=now_ms,
                max_in_flight=max_in_flight,
                signing_secret=signing_secret,
            )
        )
        return {**result.response, "version": image.version}

    async def _set_subscription_state(
        self, request: web.Request, body: dict[str, Any]
    ) -> dict[str, Any]:
        active = body.get("active")
        if not isinstance(active, bool):
            raise _BadRequest("field 'active' must be true or false")
        subscription_id = request.match_info["id"]
        now_ms = int(time.time() * 1000)
        result, image = await self._write(
            lambda image: handlers.set_subscription_state(
                image, subscription_id=subscription_id, active=active, now_ms=now_ms
            )
        )
        return {**result.response, "version": image.version}

    async def _delete_subscription(
        self, request: web.Request, body: dict[str, Any]
    ) -> dict[str, Any]:
        subscription_id = request.match_info["id"]
        result, image = await self._write(
            lambda image: handlers.delete_subscription(image, subscription_id=subscription_id)
        )
        return {**result.response, "version": image.version}


def _int_field(body: dict[str, Any], key: str) -> int:
    value = body.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _BadRequest(f"field {key!r} must be an integer, got {value!r}")
    return value


def _str_field(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str):
        raise _BadRequest(f"field {key!r} must be a string, got {value!r}")
    return value


def _error(status: int, code: ErrorCode, message: str) -> web.Response:
    return web.json_response({"error_code": int(code), "error_message": message}, status=status)


def _listeners_field(body: dict[str, Any]) -> tuple[tuple[str, str, int], ...]:
    """Optional ``listeners``: ``[[name, host, port], ...]`` (types checked here, values by the
    registration handler)."""
    value = body.get("listeners", [])
    if not isinstance(value, list):
        raise _BadRequest(f"field 'listeners' must be a list, got {value!r}")
    listeners = []
    for item in value:
        if (
            not isinstance(item, list)
            or len(item) != 3
            or not isinstance(item[0], str)
            or not isinstance(item[1], str)
            or isinstance(item[2], bool)
            or not isinstance(item[2], int)
        ):
            raise _BadRequest(f"listeners: expected [name, host, port], got {item!r}")
        listeners.append((item[0], item[1], item[2]))
    return tuple(listeners)
