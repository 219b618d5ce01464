"""A synchronous, metadata-driven connection to a Flux (or Kafka) cluster.

``ClusterClient`` is the transport under ``Admin``, ``SimpleProducer`` and ``SimpleConsumer``:

* **Bootstrap**: ``"host:port,host:port"``. A bootstrap address is used only to fetch the first
  Metadata; that connection is closed right after, because its broker's node id is unknown.
* **One connection per broker id**, a ``KafkaConnection`` opened lazily at the address the
  latest Metadata gives for that id, and reopened at the new address if it changed. Opening
  one negotiates versions: the client sends ApiVersions and each later request on that
  connection uses the highest version the SDK, the codec and the broker share
  (``flux.sdk.metadata.negotiate_version``).
* **Metadata** lives in a ``ClusterMetadata`` (pure, shared with the async client to come):
  ``refresh()`` asks any reachable broker — open connections first, then other known brokers,
  then the bootstrap addresses again — so losing the bootstrap broker does not matter.
* **Group coordinators**: ``call_coordinator(group_id, ...)`` sends to the broker FindCoordinator
  names for the group (cached per group); COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, a
  coordinator still loading and lost connections forget the cached coordinator and retry.
* **Retries**: ``call_leader`` / ``call_controller`` / ``call_any`` send one request and, on a
  connection failure or a routing error (not leader, leader not available, fenced or unknown
  leader epoch, not controller, and for a short while unknown topic), drop the dead connection,
  refresh metadata, back off exponentially and try again, bounded by ``RetryPolicy`` (attempts
  AND total time). Then the last error is raised: the typed ``KafkaError``, or
  ``FluxConnectionError`` / ``FluxTimeoutError`` naming the addresses tried. Other broker
  errors, retriable or not, are raised at once: without idempotence a blind retry could write
  a batch twice, so the caller decides.

Thread-safety: none. A ``ClusterClient`` and everything built on it belong to one thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from flux.protocol.api import ApiKey, encode_request
from flux.protocol.errors import ErrorCode, ProtocolError
from flux.sdk.wire import KafkaConnection

from . import limits
from .errors import (
    ConfigurationError,
    CoordinatorError,
    FluxConnectionError,
    FluxProtocolError,
    FluxTimeoutError,
    KafkaError,
    UnsupportedVersionError,
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
    negotiate_version,
    parse_bootstrap,
)

__all__ = [
    "CONTROLLER_RETRY_CODES",
    "COORDINATOR_RETRY_CODES",
    "LEADER_RETRY_CODES",
    "BrokerConnection",
    "ClusterClient",
]

T = TypeVar("T")
Body = dict[str, Any] | Callable[[int], dict[str, Any]]
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

_CLIENT_SOFTWARE_NAME = "flux-sdk"
_CLIENT_SOFTWARE_VERSION = "0.1.0"
_UNSUPPORTED_VERSION = ErrorCode.UNSUPPORTED_VERSION
_API_VERSIONS_MAX = 3


class BrokerConnection:
    """One broker connection with the API version ranges the broker advertised.

    ``request`` picks the version (``version_for``), builds the body for it, sends and
    decodes. Failures: ``FluxConnectionError`` (connect or I/O failed, or the broker closed the
    connection), ``FluxTimeoutError`` (no response within the timeout) and
    ``FluxProtocolError`` (undecodable response). After any of them the connection is closed
    and must not be used again. Thread-safety: none.
    """

    def __init__(
        self,
        address: Address,
        *,
        node_id: int | None,
        client_id: str,
        timeout_s: float,
    ) -> None:
        self.address = address
        self.node_id = node_id
        self._client_id = client_id
        self._label = (
            f"broker {node_id} at {format_address(address)}"
            if node_id is not None
            else f"bootstrap broker {format_address(address)}"
        )
        try:
            self._connection = KafkaConnection(
                address[0], address[1], client_id=client_id, timeout_s=timeout_s
            )
        except TimeoutError as error:
            raise FluxTimeoutError(f"connecting to {self._label} timed out") from error
        except OSError as error:
            raise FluxConnectionError(
                f"cannot connect to {self._label}: {error.strerror or error}",
                addresses=(format_address(address),),
            ) from error
        self.closed = False
        self.api_versions: Mapping[int, tuple[int, int]] = {}
        self.api_versions = self._negotiate()

    def __repr__(self) -> str:
        return f"BrokerConnection({self._label})"

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._connection.close()

    def version_for(self, api_key: int) -> int:
        return negotiate_version(api_key, self.api_versions, broker=self._label)

    def request(self, api_key: int, body: Body) -> tuple[int, dict[str, Any]]:
        """Send one request at the negotiated version; return ``(version, response)``."""
        version = self.version_for(api_key)
        payload = body(version) if callable(body) else body
        return version, self._exchange(lambda: self._connection.request(api_key, version, payload))

    def send_without_response(self, api_key: int, body: Body) -> int:
        """Send a request the broker does not answer (Produce with acks=0); return its version.

        Its correlation id is 0: ``KafkaConnection`` numbers answered requests from 1, and no
        response will ever carry this one.
        """
        version = self.version_for(api_key)
        payload = body(version) if callable(body) else body
        frame = encode_request(api_key, version, 0, self._client_id, payload)
        self._exchange(lambda: self._connection.send_raw(frame))
        return version

    def _negotiate(self) -> dict[int, tuple[int, int]]:
        version = _API_VERSIONS_MAX
        body = {
            "client_software_name": _CLIENT_SOFTWARE_NAME,
            "client_software_version": _CLIENT_SOFTWARE_VERSION,
        }
        response = self._exchange(
            lambda: self._connection.request(ApiKey.API_VERSIONS, version, body)
        )
        ranges = _ranges(response)
        if response["error_code"] == _UNSUPPORTED_VERSION:
            # The broker answered in v0 with its ranges; ask again in a version it speaks.
            version = negotiate_version(ApiKey.API_VERSIONS, ranges, broker=self._label)
            response = self._exchange(
                lambda: self._connection.request(ApiKey.API_VERSIONS, version, body)
            )
            ranges = _ranges(response)
        if response["error_code"] != ErrorCode.NONE:
            self.close()
            raise UnsupportedVersionError(
                response["error_code"], f"{self._label} refused ApiVersions v{version}"
            )
        return ranges

    def _exchange(self, operation: Callable[[], T]) -> T:
        if self.closed:
            raise FluxConnectionError(f"connection to {self._label} is closed")
        try:
            return operation()
        except TimeoutError as error:
            self.close()
            raise FluxTimeoutError(f"no response from {self._label} in time") from error
        except OSError as error:  # ConnectionError included: the broker closed the socket
            self.close()
            raise FluxConnectionError(
                f"connection to {self._label} failed: {error.strerror or error}",
                addresses=(format_address(self.address),),
            ) from error
        except ProtocolError as error:
            self.close()
            raise FluxProtocolError(f"{self._label} sent an undecodable response: {error}") from (
                error
            )


def _ranges(response: Mapping[str, Any]) -> dict[int, tuple[int, int]]:
    return {
        item["api_key"]: (item["min_version"], item["max_version"]) for item in response["api_keys"]
    }


class ClusterClient:
    """Routes requests to partition leaders, the controller or any broker, with retries.

    See the module docstring. Thread-safety: none; use one client per thread.
    Invariant: ``self._connections[node_id].node_id == node_id`` and no closed connection is
    kept.
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "flux-client",
        request_timeout_s: float = limits.REQUEST_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        allow_auto_topic_creation: bool = False,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if request_timeout_s <= 0:
            raise ConfigurationError(f"request_timeout_s must be positive, got {request_timeout_s}")
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.retry = retry or RetryPolicy()
        self.metadata = ClusterMetadata()
        self._allow_auto_topic_creation = allow_auto_topic_creation
        self._sleep = sleep
        self._connections: dict[int, BrokerConnection] = {}
        # When each broker last failed to connect or answer: brokers are tried least recently
        # failed first, so a dead broker still listed in metadata is not picked every time.
        self._failed_at: dict[int, float] = {}
        # Group id -> the node FindCoordinator named; forgotten when it stops coordinating.
        self._coordinators: dict[str, int] = {}
        self._closed = False

    def __enter__(self) -> ClusterClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    # -- metadata --------------------------------------------------------------------------

    def refresh(
        self, topics: Iterable[str] | None = None, *, all_topics: bool = False
    ) -> MetadataSnapshot:
        """Fetch metadata for the tracked topics plus ``topics`` (every topic if ``all_topics``)
        from the first broker that answers. ``FluxConnectionError`` if none does."""
        if topics is not None:
            self.metadata.track(topics)
        requested = None if all_topics else self.metadata.tracked_topics
        body = ClusterMetadata.request_body(
            requested, allow_auto_topic_creation=self._allow_auto_topic_creation
        )
        failures: list[str] = []
        tried: list[str] = []
        for node_id, address in self._metadata_candidates():
            tried.append(format_address(address))
            try:
                _, response = self._request_at(node_id, address, ApiKey.METADATA, body)
            except (FluxConnectionError, FluxTimeoutError, FluxProtocolError) as error:
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

    def topic(self, name: str) -> TopicInfo:
        """The topic's metadata, refreshed first if it is not cached (typed error if missing)."""
        self._ensure_metadata(name)
        return self.metadata.topic(name)

    def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has; a topic just created is waited for briefly."""
        return self.retrying(
            lambda: len(self.topic(topic).partitions),
            retry_codes=LEADER_RETRY_CODES,
            what=f"looking up topic {topic!r}",
        )

    def leaders(self, topic: str) -> dict[int, int]:
        """Partition -> leader node id for every partition of ``topic``, waiting (within the
        retry policy) while a partition has no leader."""

        def lookup() -> dict[int, int]:
            count = len(self.topic(topic).partitions)
            return {p: self.metadata.leader_for(topic, p).node_id for p in range(count)}

        return self.retrying(
            lookup, retry_codes=LEADER_RETRY_CODES, what=f"finding the leaders of {topic!r}"
        )

    def leader_for(self, topic: str, partition: int) -> BrokerInfo:
        """The leader of ``topic``-``partition`` per the cached metadata (refreshed if needed)."""
        self._ensure_metadata(topic)
        return self.metadata.leader_for(topic, partition)

    def api_versions(self, node_id: int | None = None) -> Mapping[int, tuple[int, int]]:
        """The version ranges broker ``node_id`` (default: any broker) advertised."""
        if node_id is None:
            node_id = self._any_node()
        return self._connection(node_id).api_versions

    def _ensure_metadata(self, topic: str | None = None) -> None:
        if topic is not None and self.metadata.track([topic]):
            self.refresh()
        elif self.metadata.needs_refresh(topic):
            self.refresh()

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

    def _connection(self, node_id: int) -> BrokerConnection:
        connection = self._connections.get(node_id)
        if connection is not None and not connection.closed:
            return connection
        self._connections.pop(node_id, None)
        broker = self.metadata.snapshot.brokers.get(node_id)
        if broker is None:
            raise FluxConnectionError(f"broker {node_id} is not in the cluster metadata")
        connection = BrokerConnection(
            broker.address,
            node_id=node_id,
            client_id=self.client_id,
            timeout_s=self.request_timeout_s,
        )
        self._connections[node_id] = connection
        return connection

    def _request_at(
        self, node_id: int | None, address: Address, api_key: int, body: Body
    ) -> tuple[int, dict[str, Any]]:
        """One request to a known broker, or to a bootstrap address (closed afterwards)."""
        if self._closed:
            raise FluxConnectionError("the client is closed")
        if node_id is not None:
            return self._connection(node_id).request(api_key, body)
        connection = BrokerConnection(
            address, node_id=None, client_id=self.client_id, timeout_s=self.request_timeout_s
        )
        try:
            return connection.request(api_key, body)
        finally:
            connection.close()

    def _any_node(self) -> int:
        self._ensure_metadata()
        nodes = self._nodes_by_preference()
        if not nodes:
            raise FluxConnectionError("the cluster metadata lists no brokers")
        return nodes[0]

    # -- retried calls ---------------------------------------------------------------------

    def call_leader(
        self,
        topic: str,
        partition: int,
        api_key: int,
        body: Body,
        handle: Handler[T],
        *,
        expect_response: bool = True,
        retry_codes: frozenset[ErrorCode] = LEADER_RETRY_CODES,
    ) -> T:
        """Send to the leader of ``topic``-``partition``; ``handle(response, version)`` reads
        the answer and raises the typed error for a partition error code. Retries as the
        module docstring says (``retry_codes``: an idempotent producer retries more). With
        ``expect_response=False`` ``handle`` gets ``{}``."""
        return self._call(
            lambda: self.leader_for(topic, partition).node_id,
            api_key,
            body,
            handle,
            retry_codes=retry_codes,
            what=f"{_api_label(api_key)} to the leader of {topic}-{partition}",
            expect_response=expect_response,
        )

    def call_controller(self, api_key: int, body: Body, handle: Handler[T]) -> T:
        """Send to the controller (Metadata ``controller_id``); retried on NOT_CONTROLLER."""

        def controller() -> int:
            self._ensure_metadata()
            return self.metadata.controller().node_id

        return self._call(
            controller,
            api_key,
            body,
            handle,
            retry_codes=CONTROLLER_RETRY_CODES,
            what=f"{_api_label(api_key)} to the controller",
        )

    def call_any(
        self,
        api_key: int,
        body: Body,
        handle: Handler[T],
        *,
        retry_codes: frozenset[ErrorCode] = frozenset(),
    ) -> T:
        """Send to any live broker; retried on connection failures and ``retry_codes``."""
        return self._call(
            self._any_node,
            api_key,
            body,
            handle,
            retry_codes=retry_codes,
            what=_api_label(api_key),
        )

    def coordinator_for(self, group_id: str) -> int:
        """The node id of ``group_id``'s coordinator: cached, else one FindCoordinator to any
        broker (no retries; ``CoordinatorError`` while the coordinator is not available)."""
        brokers = self.metadata.snapshot.brokers
        cached = self._coordinators.get(group_id)
        if cached is not None and cached in brokers:
            return cached
        node_id = self.send_once(
            self._any_node(),
            ApiKey.FIND_COORDINATOR,
            lambda version: _find_coordinator_body(group_id, version),
            lambda response, version: _read_coordinator(response, version, group_id),
        )
        if node_id not in self.metadata.snapshot.brokers:
            self.refresh()
            if node_id not in self.metadata.snapshot.brokers:
                raise CoordinatorError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"the coordinator of group {group_id!r}, broker {node_id}, is not in the "
                    "cluster metadata",
                )
        self._coordinators[group_id] = node_id
        return node_id

    def forget_coordinator(self, group_id: str) -> None:
        self._coordinators.pop(group_id, None)

    def call_coordinator(
        self,
        group_id: str,
        api_key: int,
        body: Body,
        handle: Handler[T],
        *,
        retry_codes: frozenset[ErrorCode] = frozenset(),
    ) -> T:
        """Send to ``group_id``'s coordinator; ``handle`` raises the typed error for the
        response's error code. Retried (with a new coordinator lookup) on connection failures
        and ``COORDINATOR_RETRY_CODES``, and on ``retry_codes``."""

        def attempt() -> T:
            node_id = self.coordinator_for(group_id)
            try:
                return self.send_once(node_id, api_key, body, handle)
            except KafkaError as error:
                if error.code in COORDINATOR_RETRY_CODES:
                    self.forget_coordinator(group_id)
                raise
            except (FluxConnectionError, FluxTimeoutError):
                self.forget_coordinator(group_id)
                raise

        return self.retrying(
            attempt,
            retry_codes=retry_codes | COORDINATOR_RETRY_CODES,
            what=f"{_api_label(api_key)} to the coordinator of group {group_id!r}",
        )

    def call_metadata(self, topics: Iterable[str] | None, handle: Handler[T]) -> T:
        """A Metadata request for ``topics`` (None: all) without touching the tracked set; the
        response also updates the cache. Retried on connection failures."""
        requested = None if topics is None else sorted(set(topics))
        body = ClusterMetadata.request_body(requested, allow_auto_topic_creation=False)

        def read(response: dict[str, Any], version: int) -> T:
            if requested is None:
                self.metadata.update(response, requested=None)
            return handle(response, version)

        return self.call_any(ApiKey.METADATA, body, read)

    def _call(
        self,
        resolve: Callable[[], int],
        api_key: int,
        body: Body,
        handle: Handler[T],
        *,
        retry_codes: frozenset[ErrorCode],
        what: str,
        expect_response: bool = True,
    ) -> T:
        def attempt() -> T:
            return self.send_once(resolve(), api_key, body, handle, expect_response=expect_response)

        return self.retrying(attempt, retry_codes=retry_codes, what=what)

    def send_once(
        self,
        node_id: int,
        api_key: int,
        body: Body,
        handle: Handler[T],
        *,
        expect_response: bool = True,
    ) -> T:
        """One request to broker ``node_id``, no retries (compose with ``retrying``)."""
        try:
            connection = self._connection(node_id)
            if expect_response:
                version, response = connection.request(api_key, body)
            else:
                version, response = connection.send_without_response(api_key, body), {}
        except (FluxConnectionError, FluxTimeoutError):
            self._note_failure(node_id)
            raise
        self._failed_at.pop(node_id, None)
        return handle(response, version)

    def retrying(
        self, attempt: Callable[[], T], *, retry_codes: frozenset[ErrorCode], what: str
    ) -> T:
        """Run ``attempt`` until it returns, retrying connection failures and the Kafka errors
        in ``retry_codes`` with backoff and a metadata refresh in between, within the
        ``RetryPolicy``. Then the last error is raised (connection and timeout errors say
        how many attempts were made)."""
        budget = RetryBudget(self.retry)
        while True:
            try:
                return attempt()
            except KafkaError as error:
                if error.code not in retry_codes:
                    raise
                unknown_topic = error.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                delay_s = budget.next_delay_s(unknown_topic=unknown_topic)
                if delay_s is None:
                    raise
            except (FluxConnectionError, FluxTimeoutError) as error:
                delay_s = budget.next_delay_s()
                if delay_s is None:
                    raise type(error)(
                        f"{what}: gave up after {budget.failed_attempts} attempts in "
                        f"{budget.elapsed_s:.1f} s: {error}",
                        **_addresses_of(error),
                    ) from error
            self._sleep(delay_s)
            try:
                self.refresh()
            except FluxConnectionError:
                pass  # the next attempt fails the same way and is counted


def _find_coordinator_body(group_id: str, version: int) -> dict[str, Any]:
    if version >= 4:
        return {"key_type": 0, "coordinator_keys": [group_id]}
    return {"key": group_id, "key_type": 0}


def _read_coordinator(response: dict[str, Any], version: int, group_id: str) -> int:
    if version >= 4:
        answers = [c for c in response["coordinators"] if c["key"] == group_id]
        if not answers:
            raise CoordinatorError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no coordinator answer for {group_id!r}"
            )
        answer = answers[0]
    else:
        answer = response
    code = ErrorCode.from_code(answer["error_code"])
    if code is not ErrorCode.NONE:
        raise error_for(
            code,
            f"finding the coordinator of group {group_id!r}: "
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
