"""``ClusterClient``: an asyncio, metadata-driven connection to a Flux (or Kafka) cluster.

It is the transport under ``AsyncProducer``, ``AsyncConsumer`` and ``AsyncAdmin`` (and so under
their synchronous wrappers):

* **Bootstrap**: ``"host:port,host:port"``. A bootstrap address is used only to fetch the first
  Metadata; that connection is closed right after, because its broker's node id is unknown.
* **Security**: ``security=`` (a ``flux.sdk.security.ClientSecurity``, or a mapping of Kafka's
  dotted names) applies to every connection: TLS (one context, built at construction) and the
  SASL exchange. Brokers answer Metadata with the addresses of the listener the client came in
  on, so later connections speak the same protocol. A ``FluxAuthenticationError`` is raised
  at once, never retried.
* **One connection per broker id** (``flux.sdk.connection.BrokerConnection``, pipelined),
  opened lazily at the address the latest Metadata gives for that id, and reopened at the new
  address if it changed.
* **Metadata** lives in a ``ClusterMetadata`` (pure): ``refresh()`` asks any reachable broker —
  open connections first, then other known brokers, then the bootstrap addresses again — so
  losing the bootstrap broker does not matter. Concurrent refreshes share one request.
* **Coordinators**: ``call_coordinator(group_id, ...)`` sends to the broker FindCoordinator
  names for the group (cached per group), and with ``key_type=TRANSACTION_KEY`` to a
  transactional id's transaction coordinator; COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, a
  coordinator still loading and lost connections forget the cached coordinator and retry.
* **Retries**: ``call_leader`` / ``call_controller`` / ``call_any`` send one request and, on a
  connection failure or a routing error (not leader, leader not available, fenced or unknown
  leader epoch, not controller, and for a short while unknown topic), drop the dead connection,
  refresh metadata, back off exponentially and try again, bounded by ``RetryPolicy`` (attempts
  AND total time). Then the last error is raised: the typed ``KafkaError``, or
  ``FluxConnectionError`` / ``FluxTimeoutError`` naming the addresses tried. Other broker
  errors, retriable or not, are raised at once: without idempotence a blind retry could write
  a batch twice, so the caller decides (``retry_codes``).

Thread-safety: none. A ``ClusterClient`` belongs to the event loop it is used on; the sync
wrappers run that loop on their own thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode

from . import limits
from .connection import Body, BrokerConnection
from .errors import (
    ConfigurationError,
    CoordinatorError,
    FluxConnectionError,
    FluxProtocolError,
    FluxTimeoutError,
    KafkaError,
    error_for,
)
from .metadata import (
    Address,
    BrokerInfo,
    ClusterMetadata,
    MetadataSnapshot,
    RetryBudget,
    RetryPolicy,
    TopicInfo,
    format_address,
    parse_bootstrap,
)
from .security import ClientSecurity

__all__ = [
    "CONTROLLER_RETRY_CODES",
    "COORDINATOR_RETRY_CODES",
    "GROUP_KEY",
    "LEADER_RETRY_CODES",
    "TRANSACTION_KEY",
    "ClusterClient",
]

T = TypeVar("T")
Handler = Callable[[dict[str, Any], int], T]

#: Errors of a request sent to a partition leader that mean "metadata is stale": refresh, retry.
LEADER_RETRY_CODES = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,  # retried only UNKNOWN_TOPIC_RETRY_TIMEOUT_S
        ErrorCode.BROKER_NOT_AVAILABLE,
    }
)
#: The same for requests that must reach the controller (CreateTopics, DeleteTopics, ...).
CONTROLLER_RETRY_CODES = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.BROKER_NOT_AVAILABLE})
#: ... and for requests to a group coordinator: find the coordinator again, retry.
COORDINATOR_RETRY_CODES = frozenset(
    {
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)
_TRANSPORT_ERRORS = (FluxConnectionError, FluxTimeoutError, FluxProtocolError)
#: FindCoordinator key types: a consumer group's coordinator, a transactional id's.
GROUP_KEY = 0
TRANSACTION_KEY = 1


class ClusterClient:
    """Routes requests to partition leaders, the controller, coordinators or any broker, with
    retries. See the module docstring.

    Invariant: ``self._connections[node_id].node_id == node_id`` and no closed connection is
    kept (a closed one found there is replaced on next use).
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "flux-client",
        request_timeout_s: float = limits.REQUEST_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        allow_auto_topic_creation: bool = False,
        security: ClientSecurity | Mapping[str, Any] | None = None,
    ) -> None:
        if request_timeout_s <= 0:
            raise ConfigurationError(f"request_timeout_s must be positive, got {request_timeout_s}")
        self.bootstrap = parse_bootstrap(bootstrap)
        self.security = ClientSecurity.coerce(security)
        self._ssl_context = self.security.ssl_context()
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.retry = retry or RetryPolicy()
        self.metadata = ClusterMetadata()
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self._connections: dict[int, BrokerConnection] = {}
        self._opening: dict[int, asyncio.Task[BrokerConnection]] = {}
        # When each broker last failed to connect or answer: brokers are tried least recently
        # failed first, so a dead broker still listed in metadata is not picked every time.
        self._failed_at: dict[int, float] = {}
        # (key type, group or transactional id) -> the node FindCoordinator named; forgotten
        # when it stops coordinating.
        self._coordinators: dict[tuple[int, str], int] = {}
        self._refreshing: asyncio.Task[MetadataSnapshot] | None = None
        self._closed = False

    async def __aenter__(self) -> ClusterClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def connections(self) -> Mapping[int, BrokerConnection]:
        """The open connections, by broker id (a copy: for tools and tests)."""
        return {
            node_id: connection
            for node_id, connection in self._connections.items()
            if not connection.closed
        }

    async def close(self) -> None:
        self._closed = True
        for task in self._opening.values():
            task.cancel()
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    # -- metadata --------------------------------------------------------------------------

    async def refresh(
        self, topics: Iterable[str] | None = None, *, all_topics: bool = False
    ) -> MetadataSnapshot:
        """Fetch metadata for the tracked topics plus ``topics`` (every topic if ``all_topics``)
        from the first broker that answers. ``FluxConnectionError`` if none does. Refreshes
        of the tracked topics that overlap share one request."""
        if topics is not None:
            self.metadata.track(topics)
        if all_topics:
            return await self._refresh(None)
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._refresh(self.metadata.tracked_topics))
        requested = self.metadata.tracked_topics
        snapshot = await asyncio.shield(self._refreshing)
        if requested - set(snapshot.topics) - set(snapshot.topic_errors):
            return await self._refresh(self.metadata.tracked_topics)  # tracked meanwhile
        return snapshot

    async def _refresh(self, requested: frozenset[str] | None) -> MetadataSnapshot:
        body = ClusterMetadata.request_body(
            requested, allow_auto_topic_creation=self.allow_auto_topic_creation
        )
        failures: list[str] = []
        tried: list[str] = []
        for node_id, address in self._metadata_candidates():
            tried.append(format_address(address))
            try:
                _, response = await self._request_at(node_id, address, ApiKey.METADATA, body)
            except _TRANSPORT_ERRORS as error:
                failures.append(str(error))
                self._note_failure(node_id)
                continue
            if node_id is not None:
                self._failed_at.pop(node_id, None)
            self.metadata.update(response, requested=requested)
            self._drop_departed_brokers()
            return self.metadata.snapshot
        raise FluxConnectionError(
            "no broker answered a metadata request; tried "
            + ", ".join(tried)
            + ("" if not failures else f" (last error: {failures[-1]})"),
            addresses=tuple(tried),
        )

    async def topic(self, name: str) -> TopicInfo:
        """The topic's metadata, refreshed first if it is not cached (typed error if missing)."""
        await self._ensure_metadata(name)
        return self.metadata.topic(name)

    async def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has; a topic just created is waited for briefly."""

        async def lookup() -> int:
            return len((await self.topic(topic)).partitions)

        return await self.retrying(
            lookup, retry_codes=LEADER_RETRY_CODES, what=f"looking up topic {topic!r}"
        )

    async def leaders(self, topic: str) -> dict[int, int]:
        """Partition -> leader node id for every partition of ``topic``, waiting (within the
        retry policy) while a partition has no leader."""

        async def lookup() -> dict[int, int]:
            count = len((await self.topic(topic)).partitions)
            return {p: self.metadata.leader_for(topic, p).node_id for p in range(count)}

        return await self.retrying(
            lookup, retry_codes=LEADER_RETRY_CODES, what=f"finding the leaders of {topic!r}"
        )

    async def leader_for(self, topic: str, partition: int) -> BrokerInfo:
        """The leader of ``topic``-``partition`` per the cached metadata (refreshed if needed)."""
        await self._ensure_metadata(topic)
        return self.metadata.leader_for(topic, partition)

    async def api_versions(self, node_id: int | None = None) -> Mapping[int, tuple[int, int]]:
        """The version ranges broker ``node_id`` (default: any broker) advertised."""
        if node_id is None:
            node_id = await self._any_node()
        return (await self._connection(node_id)).api_versions

    async def _ensure_metadata(self, topic: str | None = None) -> None:
        if topic is not None and self.metadata.track([topic]):
            await self.refresh()
        elif self.metadata.needs_refresh(topic):
            await self.refresh()

    def _metadata_candidates(self) -> list[tuple[int | None, Address]]:
        """Known brokers (open connections first, then least recently failed), then the
        bootstrap addresses no known broker has."""
        brokers = self.metadata.snapshot.brokers
        candidates: list[tuple[int | None, Address]] = [
            (node_id, brokers[node_id].address) for node_id in self._nodes_by_preference()
        ]
        known = {address for _, address in candidates}
        candidates += [(None, address) for address in self.bootstrap if address not in known]
        return candidates

    def _nodes_by_preference(self) -> list[int]:
        def rank(node_id: int) -> tuple[int, float, int]:
            connection = self._connections.get(node_id)
            is_open = connection is not None and not connection.closed
            return (0 if is_open else 1, self._failed_at.get(node_id, 0.0), node_id)

        return sorted(self.metadata.snapshot.brokers, key=rank)

    def _note_failure(self, node_id: int | None) -> None:
        if node_id is not None:
            self._failed_at[node_id] = time.monotonic()

    def _drop_departed_brokers(self) -> None:
        brokers = self.metadata.snapshot.brokers
        for node_id in list(self._failed_at):
            if node_id not in brokers:
                del self._failed_at[node_id]
        for node_id in list(self._connections):
            broker = brokers.get(node_id)
            if broker is None or broker.address != self._connections[node_id].address:
                self._connections.pop(node_id).close()

    # -- one attempt -----------------------------------------------------------------------

    async def _connection(self, node_id: int) -> BrokerConnection:
        connection = self._connections.get(node_id)
        if connection is not None and not connection.closed:
            return connection
        self._connections.pop(node_id, None)
        if self._closed:
            raise FluxConnectionError("the client is closed")
        opening = self._opening.get(node_id)
        if opening is None:
            broker = self.metadata.snapshot.brokers.get(node_id)
            if broker is None:
                raise FluxConnectionError(f"broker {node_id} is not in the cluster metadata")
            opening = asyncio.ensure_future(
                BrokerConnection.open(
                    broker.address,
                    node_id=node_id,
                    client_id=self.client_id,
                    timeout_s=self.request_timeout_s,
                    security=self.security,
                    ssl_context=self._ssl_context,
                )
            )
            self._opening[node_id] = opening
            opening.add_done_callback(lambda _: self._opening.pop(node_id, None))
        connection = await asyncio.shield(opening)
        if self._closed:
            connection.close()
            raise FluxConnectionError("the client is closed")
        self._connections.setdefault(node_id, connection)
        return connection

    async def _request_at(
        self, node_id: int | None, address: Address, api_key: int, body: Body
    ) -> tuple[int, dict[str, Any]]:
        """One request to a known broker, or to a bootstrap address (closed afterwards)."""
        if self._closed:
            raise FluxConnectionError("the client is closed")
        if node_id is not None:
            return await (await self._connection(node_id)).request(api_key, body)
        connection = await BrokerConnection.open(
            address,
            node_id=None,
            client_id=self.client_id,
            timeout_s=self.request_timeout_s,
            security=self.security,
            ssl_context=self._ssl_context,
        )
        try:
            return await connection.request(api_key, body)
        finally:
            connection.close()

    async def _any_node(self) -> int:
        await self._ensure_metadata()
        nodes = self._nodes_by_preference()
        if not nodes:
            raise FluxConnectionError("the cluster metadata lists no brokers")
        return nodes[0]

    # -- retried calls ---------------------------------------------------------------------

    async def call_leader(
        self,
        topic: str,
        partition: int,
        api_key: int,
        body: Body,
        handle: Handler[T],
        *,
        expect_response: bool = True,
        retry_codes: frozenset[ErrorCode] = LEADER_RETRY_CODES,
        retry: RetryPolicy | None = None,
        timeout_s: float | None = None,
    ) -> T:
        """Send to the leader of ``topic``-``partition``; ``handle(response, version)`` reads
        the answer and raises the typed error for a partition error code. Retries as the
        module docstring says (``retry_codes``: an idempotent producer retries more; ``retry``
        overrides the client's policy). With ``expect_response=False`` ``handle`` gets ``{}``."""

        async def resolve() -> int:
            return (await self.leader_for(topic, partition)).node_id

        return await self._call(
            resolve,
            api_key,
            body,
            handle,
            retry_codes=retry_codes,
            what=f"{_api_label(api_key)} to the leader of {topic}-{partition}",
            expect_response=expect_response,
            retry=retry,
            timeout_s=timeout_s,
        )

    async def call_controller(self, api_key: int, body: Body, handle: Handler[T]) -> T:
        """Send to the controller (Metadata ``controller_id``); retried on NOT_CONTROLLER."""

        async def controller() -> int:
            await self._ensure_metadata()
            return self.metadata.controller().node_id

        return await self._call(
            controller,
            api_key,
            body,
            handle,
            retry_codes=CONTROLLER_RETRY_CODES,
            what=f"{_api_label(api_key)} to the controller",
        )

    async def call_any(
        self,
        api_key: int,
        body: Body,
        handle: Handler[T],
        *,
        retry_codes: frozenset[ErrorCode] = frozenset(),
    ) -> T:
        """Send to any live broker; retried on connection failures and ``retry_codes``."""
        return await self._call(
            self._any_node, api_key, body, handle, retry_codes=retry_codes, what=_api_label(api_key)
        )

    async def coordinator_for(self, key: str, *, key_type: int = GROUP_KEY) -> int:
        """The node id of the coordinator of ``key``: a group id (``key_type`` 0) or a
        transactional id (``TRANSACTION_KEY``, 1). Cached, else one FindCoordinator to any
        broker (no retries; ``CoordinatorError`` while the coordinator is not available)."""
        cached = self._coordinators.get((key_type, key))
        if cached is not None and cached in self.metadata.snapshot.brokers:
            return cached
        node_id = await self.send_once(
            await self._any_node(),
            ApiKey.FIND_COORDINATOR,
            lambda version: _find_coordinator_body(key, key_type, version),
            lambda response, version: _read_coordinator(response, version, key, key_type),
        )
        if node_id not in self.metadata.snapshot.brokers:
            await self.refresh()
            if node_id not in self.metadata.snapshot.brokers:
                raise CoordinatorError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"the coordinator of {_key_label(key, key_type)}, broker {node_id}, is not "
                    "in the cluster metadata",
                )
        self._coordinators[(key_type, key)] = node_id
        return node_id

    def forget_coordinator(self, key: str, *, key_type: int = GROUP_KEY) -> None:
        self._coordinators.pop((key_type, key), None)

    async def call_coordinator(
        self,
        key: str,
        api_key: int,
        body: Body,
        handle: Handler[T],
        *,
        retry_codes: frozenset[ErrorCode] = frozenset(),
        timeout_s: float | None = None,
        key_type: int = GROUP_KEY,
        retry: RetryPolicy | None = None,
    ) -> T:
        """Send to the coordinator of ``key`` (a group id, or with ``key_type=TRANSACTION_KEY``
        a transactional id); ``handle`` raises the typed error for the response's error code.
        Retried (with a new coordinator lookup) on connection failures and
        ``COORDINATOR_RETRY_CODES``, and on ``retry_codes`` (``retry`` overrides the client's
        policy)."""

        async def attempt() -> T:
            node_id = await self.coordinator_for(key, key_type=key_type)
            try:
                return await self.send_once(node_id, api_key, body, handle, timeout_s=timeout_s)
            except KafkaError as error:
                if error.code in COORDINATOR_RETRY_CODES:
                    self.forget_coordinator(key, key_type=key_type)
                raise
            except _TRANSPORT_ERRORS:
                self.forget_coordinator(key, key_type=key_type)
                raise

        return await self.retrying(
            attempt,
            retry_codes=retry_codes | COORDINATOR_RETRY_CODES,
            what=f"{_api_label(api_key)} to the coordinator of {_key_label(key, key_type)}",
            retry=retry,
        )

    async def call_metadata(self, topics: Iterable[str] | None, handle: Handler[T]) -> T:
        """A Metadata request for ``topics`` (None: all) without touching the tracked set; the
        response also updates the cache when every topic was asked for. Retried on connection
        failures."""
        requested = None if topics is None else sorted(set(topics))
        body = ClusterMetadata.request_body(requested, allow_auto_topic_creation=False)

        def read(response: dict[str, Any], version: int) -> T:
            if requested is None:
                self.metadata.update(response, requested=None)
            return handle(response, version)

        return await self.call_any(ApiKey.METADATA, body, read)

    async def _call(
        self,
        resolve: Callable[[], Awaitable[int]],
        api_key: int,
        body: Body,
        handle: Handler[T],
        *,
        retry_codes: frozenset[ErrorCode],
        what: str,
        expect_response: bool = True,
        retry: RetryPolicy | None = None,
        timeout_s: float | None = None,
    ) -> T:
        async def attempt() -> T:
            return await self.send_once(
                await resolve(),
                api_key,
                body,
                handle,
                expect_response=expect_response,
                timeout_s=timeout_s,
            )

        return await self.retrying(attempt, retry_codes=retry_codes, what=what, retry=retry)

    async def send_once(
        self,
        node_id: int,
        api_key: int,
        body: Body,
        handle: Handler[T],
        *,
        expect_response: bool = True,
        timeout_s: float | None = None,
    ) -> T:
        """One request to broker ``node_id``, no retries (compose with ``retrying``)."""
        try:
            connection = await self._connection(node_id)
            if expect_response:
                version, response = await connection.request(api_key, body, timeout_s=timeout_s)
            else:
                version, response = await connection.send_without_response(api_key, body), {}
        except _TRANSPORT_ERRORS:
            self._note_failure(node_id)
            raise
        self._failed_at.pop(node_id, None)
        return handle(response, version)

    async def retrying(
        self,
        attempt: Callable[[], Awaitable[T]],
        *,
        retry_codes: frozenset[ErrorCode],
        what: str,
        retry: RetryPolicy | None = None,
    ) -> T:
        """Await ``attempt()`` until it returns, retrying connection failures and the Kafka
        errors in ``retry_codes`` with backoff and a metadata refresh in between, within the
        ``RetryPolicy``. Then the last error is raised (connection and timeout errors say how
        many attempts were made)."""
        budget = RetryBudget(retry or self.retry)
        while True:
            try:
                return await attempt()
            except KafkaError as error:
                if error.code not in retry_codes:
                    raise
                unknown_topic = error.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                delay_s = budget.next_delay_s(unknown_topic=unknown_topic)
                if delay_s is None:
                    raise
            except _TRANSPORT_ERRORS as error:
                if self._closed:
                    raise
                delay_s = budget.next_delay_s()
                if delay_s is None:
                    raise type(error)(
                        f"{what}: gave up after {budget.failed_attempts} attempts in "
                        f"{budget.elapsed_s:.1f} s: {error}",
                        **_addresses_of(error),
                    ) from error
            await asyncio.sleep(delay_s)
            try:
                await self.refresh()
            except FluxConnectionError:
                pass  # the next attempt fails the same way and is counted


def _find_coordinator_body(key: str, key_type: int, version: int) -> dict[str, Any]:
    if version >= 4:
        return {"key_type": key_type, "coordinator_keys": [key]}
    return {"key": key, "key_type": key_type}


def _key_label(key: str, key_type: int) -> str:
    return f"transactional id {key!r}" if key_type == TRANSACTION_KEY else f"group {key!r}"


def _read_coordinator(response: dict[str, Any], version: int, key: str, key_type: int) -> int:
    if version >= 4:
        answers = [c for c in response["coordinators"] if c["key"] == key]
        if not answers:
            raise CoordinatorError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"no coordinator answer for {_key_label(key, key_type)}",
            )
        answer = answers[0]
    else:
        answer = response
    code = ErrorCode.from_code(answer["error_code"])
    if code is not ErrorCode.NONE:
        raise error_for(
            code,
            f"finding the coordinator of {_key_label(key, key_type)}: "
            + (answer.get("error_message") or code.message),
        )
    return int(answer["node_id"])


def _addresses_of(error: Exception) -> dict[str, Any]:
    if isinstance(error, FluxConnectionError):
        return {"addresses": error.addresses}
    return {}


def _api_label(api_key: int) -> str:
    try:
        return "".join(word.capitalize() for word in ApiKey(api_key).name.split("_"))
    except ValueError:
        return f"API key {api_key}"
