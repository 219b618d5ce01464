"""Who calls the HTTP API, and what they may do (``[security] http_auth``).

With ``http_auth = "required"`` every client endpoint of the HTTP API wants HTTP Basic
credentials, checked against the user's SCRAM credential in the metadata (the same users and
passwords as the Kafka listeners: ``fluxctl user create``). A request without valid ones gets
``401`` with ``WWW-Authenticate: Basic realm="flux"``, and nothing happens. ``/health``,
``/ping`` and ``/metrics`` stay open (they hold no secrets); node-only endpoints use the node
credential instead (``cluster.internal_security``).

The principal is then ``User:<name>``, and with the authorizer on
(``security.authorizer_enable``) each endpoint needs what its Kafka counterpart needs:

| endpoint | needs |
|---|---|
| ``POST /publish``, ``POST /topics/{t}/messages`` | WRITE on the topic (and CREATE on the cluster or topic when it does not exist yet) |
| ``GET /topics/{t}/partitions/{p}/messages`` | READ on the topic |
| ``POST /subscribe`` | READ on every topic named (and CREATE as above) |
| ``POST /unsubscribe``, ``DELETE /subscriptions/{id}`` | READ on every topic of the subscription |
| ``GET /topics/{t}`` | DESCRIBE on the topic |
| ``POST /topics`` / ``DELETE /topics/{t}`` | CREATE (cluster or topic) / DELETE on the topic |
| ``PATCH /topics/{t}/configs`` | ALTER_CONFIGS on the topic |
| ``GET /groups/{g}`` | DESCRIBE on the group |
| ``POST /groups/{g}/offsets`` (reset) | READ on the group and on the topic |
| ``/ui/`` and ``/ui/static/...`` (the console's page) | nothing beyond valid credentials |
| ``GET /ui/events?topic=T&group=G`` | DESCRIBE on the cluster, each topic and each group |
| ``GET /topics``, ``/groups``, ``/subscriptions``, ``/subscriptions/{id}``, ``/cluster`` | DESCRIBE on the cluster |
| ``/schemas/...`` of a subject ``<topic>-value``/``-key`` (any other subject: a topic of its name) | reads: READ on the topic or DESCRIBE on the cluster; writes (register, delete, its config and mode): WRITE on the topic or ALTER on the cluster |
| ``GET /schemas/schemas/ids/{id}``, ``/schemas/schemas/types`` | nothing beyond valid credentials |
| other ``/schemas`` endpoints | reads: DESCRIBE on the cluster; the global config and mode: ALTER_CONFIGS on the cluster |

A refused request gets ``403`` naming the operation and resource, and changes nothing.

Checking a password costs one PBKDF2 of the credential's iterations (milliseconds), so a
verified ``(user, password)`` is remembered (keyed by an HMAC of the password under a
per-process random key, never the password) for as long as that user's credential record
is unchanged; at most ``VERIFIED_CACHE_SIZE`` entries.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import logging
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from flux.auth.acl import AclOperation, ResourceType

from ..kafka.sasl import strongest_credential
from .common import HttpError, answer_closing, normalize_address, read_body

__all__ = ["VERIFIED_CACHE_SIZE", "HttpAuthenticator"]

log = logging.getLogger("flux.cluster.http.auth")

VERIFIED_CACHE_SIZE = 10_000
#: Paths open to anyone even with ``http_auth = "required"``.
OPEN_PATHS = frozenset({"/health", "/ping", "/metrics"})
#: Node-only paths: ``cluster.internal_security`` guards them.
NODE_PREFIXES = ("/internal/", "/replication/")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: ``(operation, resource type, name)``.
Permission = tuple[AclOperation, ResourceType, str]
#: Permissions of which any one suffices; a request needs every ``Need`` of its list.
Need = tuple[Permission, ...]
_CLUSTER_CREATE: Permission = (AclOperation.CREATE, ResourceType.CLUSTER, "kafka-cluster")


class HttpAuthenticator:
    """Builds the aiohttp middleware. ``credentials(user, mechanism)`` is the broker's
    credential lookup (``cluster.kafka.sasl.ImageCredentials``), ``authorization`` its
    ``RequestAuthorizer``, ``image()`` its metadata image. ``body_timeout_s`` bounds the wait
    for a body the authorization check reads (``broker.request_timeout_ms``, as the routes')."""

    def __init__(
        self,
        *,
        required: bool,
        credentials: Callable[[str, str], Any],
        authorization: Any,
        image: Callable[[], Any],
        body_timeout_s: float = 30.0,
    ) -> None:
        self.required = required
        self._body_timeout_s = body_timeout_s
        self._credentials = credentials
        self._authorization = authorization
        self._image = image
        self._key = secrets.token_bytes(32)
        self._verified: OrderedDict[tuple[str, bytes], Any] = OrderedDict()

    def middlewares(self) -> list[Any]:
        """The aiohttp middleware, or none when credentials are not required."""
        if not self.required:
            return []

        @web.middleware
        async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
            path = request.path
            if path in OPEN_PATHS or path.startswith(NODE_PREFIXES):
                return await handler(request)
            user = await self._authenticate(request.headers.get("Authorization"))
            if user is None:
                return web.json_response(
                    {"error": "unauthorized", "message": "valid credentials are required"},
                    status=401,
                    headers={"WWW-Authenticate": 'Basic realm="flux", charset="UTF-8"'},
                )
            principal = f"User:{user}"
            request["principal"] = principal
            if self._authorization.enabled:
                host = request.remote or ""
                try:
                    needs = await self._needs(request)
                except HttpError as error:  # a body that did not arrive, or arrived broken
                    return answer_closing(error.response())
                for need in needs:
                    if any(self._authorization.allows(principal, host, *p) for p in need):
                        continue
                    operation, kind, name = need[-1]
                    log.info(
                        "refused %s %s to %s: no %s on %s %r",
                        request.method,
                        path,
                        principal,
                        operation.name,
                        kind.name,
                        name,
                    )
                    return web.json_response(
                        {
                            "error": "forbidden",
                            "message": f"{principal} may not {operation.name} "
                            f"{kind.name.lower()} {name!r}",
                        },
                        status=403,
                    )
            return await handler(request)

        return [authenticate]

    # -- authentication -------------------------------------------------------------------

    async def _authenticate(self, header: str | None) -> str | None:
        if not header:
            return None
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, colon, password = decoded.partition(":")
        if not colon or not user or not password:
            return None
        credential = strongest_credential(self._credentials, user)
        if credential is None:
            return None
        fingerprint = hmac.new(self._key, password.encode(), hashlib.sha256).digest()
        key = (user, fingerprint)
        if self._verified.get(key) is credential:
            self._verified.move_to_end(key)
            return user
        if not await asyncio.to_thread(credential.verify_password, password):
            return None
        self._verified[key] = credential
        while len(self._verified) > VERIFIED_CACHE_SIZE:
            self._verified.popitem(last=False)
        return user

    # -- what each endpoint needs ---------------------------------------------------------

    async def _needs(self, request: web.Request) -> list[Need]:
        method, path = request.method, request.path
        info = request.match_info
        topic = info.get("topic")
        cluster: Need = ((AclOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster"),)
        if path in ("/ui", "/ui/") or path.startswith("/ui/static/"):
            return []  # the console's page and assets hold no data: credentials suffice
        if path == "/schemas" or path.startswith("/schemas/"):
            return _registry_needs(method, path, info.get("subject"))
        if path == "/ui/events":
            return [
                cluster,
                *(((AclOperation.DESCRIBE, ResourceType.TOPIC, t),) for t in
                  request.query.getall("topic", [])),
                *(((AclOperation.DESCRIBE, ResourceType.GROUP, g),) for g in
                  request.query.getall("group", [])),
            ]  # fmt: skip
        if method == "POST" and path == "/publish":
            name = (await self._body(request)).get("topic")
            return self._writing(name) if isinstance(name, str) else []
        if method == "POST" and topic is not None and path.endswith("/messages"):
            return self._writing(topic)
        if method == "GET" and topic is not None and path.endswith("/messages"):
            return [((AclOperation.READ, ResourceType.TOPIC, topic),)]
        if method == "POST" and path in ("/subscribe", "/subscrine"):
            names = (await self._body(request)).get("topics")
            names = [names] if isinstance(names, str) else names
            if not isinstance(names, list):
                return []
            needs: list[Need] = []
            for name in names:
                if isinstance(name, str):
                    needs.append(((AclOperation.READ, ResourceType.TOPIC, name),))
                    needs += self._creating(name)
            return needs
        if (method == "POST" and path in ("/unsubscribe", "/unsubscrine")) or (
            method == "DELETE" and path.startswith("/subscriptions/")
        ):
            return [
                ((AclOperation.READ, ResourceType.TOPIC, name),)
                for name in await self._subscription_topics(request)
            ]
        if topic is not None and method == "PATCH":
            return [((AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, topic),)]
        if topic is not None and method == "GET":
            return [((AclOperation.DESCRIBE, ResourceType.TOPIC, topic),)]
        if topic is not None and method == "DELETE":
            return [((AclOperation.DELETE, ResourceType.TOPIC, topic),)]
        if method == "POST" and path == "/topics":
            name = (await self._body(request)).get("name")
            return self._creating(name, always=True) if isinstance(name, str) else []
        group = info.get("group")
        if group is not None and method == "POST" and path.endswith("/offsets"):
            # A reset commits the group's offsets: what Kafka's OffsetCommit needs.
            name = (await self._body(request)).get("topic")
            needs = [((AclOperation.READ, ResourceType.GROUP, group),)]
            if isinstance(name, str):
                needs.append(((AclOperation.READ, ResourceType.TOPIC, name),))
            return needs
        if group is not None:
            return [((AclOperation.DESCRIBE, ResourceType.GROUP, group),)]
        return [cluster]

    async def _body(self, request: web.Request) -> dict[str, Any]:
        """The JSON object of the body, ``{}`` when there is none or it is not one (the route
        then answers that itself); the route reads the same bytes again (``read_body``)."""
        if not request.body_exists:
            return {}
        raw = await read_body(request, self._body_timeout_s)
        try:
            body = json.loads(raw.decode(request.charset or "utf-8"))
        except (ValueError, LookupError, RecursionError):
            return {}
        return body if isinstance(body, dict) else {}

    def _writing(self, name: str) -> list[Need]:
        return [((AclOperation.WRITE, ResourceType.TOPIC, name),), *self._creating(name)]

    def _creating(self, name: str, *, always: bool = False) -> list[Need]:
        """CREATE on the cluster or the topic, when the topic does not exist yet."""
        if not always and name in self._image().topics:
            return []
        return [(_CLUSTER_CREATE, (AclOperation.CREATE, ResourceType.TOPIC, name))]

    async def _subscription_topics(self, request: web.Request) -> list[str]:
        subscriptions = self._image().subscriptions
        if request.method == "DELETE":
            found = subscriptions.get(request.match_info.get("id", ""))
            return list(found.topics) if found is not None else []
        body = await self._body(request)
        topics = body.get("topics")
        if isinstance(topics, str):
            return [topics]
        if isinstance(topics, list):
            return [t for t in topics if isinstance(t, str)]
        address = body.get("address")
        if isinstance(address, str):
            address = normalize_address(address)
        return sorted({t for s in subscriptions.values() if s.address == address for t in s.topics})


def _registry_needs(method: str, path: str, subject: str | None) -> list[Need]:
    """The schema registry's endpoints: a subject's are guarded by its topic's ACLs (the
    subject ``<topic>-value`` or ``<topic>-key``, Confluent's default naming; any other
    subject by a topic of its own name), everything else by the cluster's."""
    writing = method in ("PUT", "DELETE") or (
        method == "POST" and path.endswith("/versions") and "/compatibility/" not in path
    )
    if subject is not None:
        topic = subject
        for suffix in ("-value", "-key"):
            if subject.endswith(suffix) and len(subject) > len(suffix):
                topic = subject.removesuffix(suffix)
        if writing:
            return [
                (
                    (AclOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster"),
                    (AclOperation.WRITE, ResourceType.TOPIC, topic),
                )
            ]
        return [
            (
                (AclOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster"),
                (AclOperation.READ, ResourceType.TOPIC, topic),
            )
        ]
    if method == "GET" and path.startswith("/schemas/schemas/"):
        return []  # a schema by id (what every deserializer asks), the types: credentials
    if writing:
        return [((AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, "kafka-cluster"),)]
    return [((AclOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster"),)]
