"""A client of Flux's schema registry (Confluent's REST API, docs/schema-registry.md) and
serializers for Confluent's wire format: a magic byte 0, the 4-byte big-endian schema id,
then the encoded value. Records written with them are read by confluent-kafka's
deserializers and the other way round.

    registry = SchemaRegistryClient("http://127.0.0.1:8080/schemas")
    serialize = AvroSerializer(registry, "users-value", schema_text)
    producer.send("users", [{"value": serialize({"name": "ann", "age": 3})}])
    user = AvroDeserializer(registry)(message.value)

``url`` may name several brokers (a list or comma-separated): a call that cannot reach one
tries the next. Schemas by id are cached (an id never changes its schema); so are the ids of
schemas a serializer registered. Blocking (``urllib``); call from a thread in async code.
"""

from __future__ import annotations

import base64
import io
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from flux.sdk.errors import FluxError

__all__ = [
    "MAGIC_BYTE",
    "AvroDeserializer",
    "AvroSerializer",
    "RegisteredSchema",
    "SchemaRegistryClient",
    "SchemaRegistryError",
    "pack",
    "unpack",
]

MAGIC_BYTE = 0
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
#: Schemas kept by id per client.
MAX_CACHED_SCHEMAS = 10_000


class SchemaRegistryError(FluxError):
    """An error answer of the registry (``status``, Confluent's ``error_code``) or none at
    all (``status`` 0: no broker reachable)."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(f"{message} (HTTP {status}, error code {error_code})")
        self.status = status
        self.error_code = error_code
        self.message = message


@dataclass(frozen=True)
class RegisteredSchema:
    schema_id: int
    schema: str
    schema_type: str = "AVRO"
    references: list[dict[str, Any]] = field(default_factory=list)
    subject: str | None = None
    version: int | None = None

    @classmethod
    def from_json(cls, document: dict[str, Any], schema_id: int | None = None) -> RegisteredSchema:
        return cls(
            schema_id=int(document.get("id", schema_id if schema_id is not None else -1)),
            schema=str(document["schema"]),
            schema_type=str(document.get("schemaType") or "AVRO"),
            references=list(document.get("references") or []),
            subject=document.get("subject"),
            version=document.get("version"),
        )


class SchemaRegistryClient:
    """Calls of the registry's REST API; ``url`` is ``http://broker:port/schemas`` (or
    several)."""

    def __init__(
        self,
        url: str | list[str],
        *,
        timeout_s: float = 10.0,
        basic_auth: tuple[str, str] | None = None,
    ) -> None:
        urls = url.split(",") if isinstance(url, str) else list(url)
        self._urls = [u.strip().rstrip("/") for u in urls if u.strip()]
        if not self._urls:
            raise ValueError("the schema registry needs at least one URL")
        self._timeout_s = timeout_s
        self._headers = {"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE}
        if basic_auth is not None:
            # A secured cluster's HTTP credentials (a SCRAM user, docs/security.md).
            token = base64.b64encode(f"{basic_auth[0]}:{basic_auth[1]}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        self._by_id: dict[int, RegisteredSchema] = {}
        self._ids: dict[tuple[str, str, str], int] = {}

    # -- subjects and versions ----------------------------------------------------------------

    def register(
        self,
        subject: str,
        schema: str,
        schema_type: str = "AVRO",
        references: list[dict[str, Any]] | None = None,
    ) -> int:
        """Register ``schema`` under ``subject`` (the same schema again: its id, unchanged)."""
        cache_key = (subject, schema_type, schema)
        if cache_key in self._ids:
            return self._ids[cache_key]
        answer = self._call(
            "POST",
            f"/subjects/{_quote(subject)}/versions",
            _schema_body(schema, schema_type, references),
        )
        schema_id = int(answer["id"])
        self._ids[cache_key] = schema_id
        return schema_id

    def lookup(self, subject: str, schema: str, schema_type: str = "AVRO") -> RegisteredSchema:
        answer = self._call(
            "POST", f"/subjects/{_quote(subject)}", _schema_body(schema, schema_type, None)
        )
        return RegisteredSchema.from_json(answer)

    def subjects(self, *, deleted: bool = False) -> list[str]:
        return list(self._call("GET", "/subjects" + ("?deleted=true" if deleted else "")))

    def versions(self, subject: str) -> list[int]:
        return [int(v) for v in self._call("GET", f"/subjects/{_quote(subject)}/versions")]

    def version(self, subject: str, version: int | str = "latest") -> RegisteredSchema:
        answer = self._call("GET", f"/subjects/{_quote(subject)}/versions/{version}")
        return RegisteredSchema.from_json(answer)

    def check(
        self, subject: str, schema: str, schema_type: str = "AVRO", *, version: int | str = "latest"
    ) -> tuple[bool, list[str]]:
        """Whether ``schema`` may follow ``version`` of ``subject`` under its compatibility
        level, and why not."""
        answer = self._call(
            "POST",
            f"/compatibility/subjects/{_quote(subject)}/versions/{version}?verbose=true",
            _schema_body(schema, schema_type, None),
        )
        return bool(answer["is_compatible"]), list(answer.get("messages") or [])

    def delete_subject(self, subject: str, *, permanent: bool = False) -> list[int]:
        query = "?permanent=true" if permanent else ""
        return [int(v) for v in self._call("DELETE", f"/subjects/{_quote(subject)}{query}")]

    def delete_version(self, subject: str, version: int | str, *, permanent: bool = False) -> int:
        query = "?permanent=true" if permanent else ""
        return int(self._call("DELETE", f"/subjects/{_quote(subject)}/versions/{version}{query}"))

    # -- schemas by id ------------------------------------------------------------------------

    def schema(self, schema_id: int) -> RegisteredSchema:
        found = self._by_id.get(schema_id)
        if found is None:
            found = RegisteredSchema.from_json(
                self._call("GET", f"/schemas/ids/{schema_id}"), schema_id
            )
            if len(self._by_id) >= MAX_CACHED_SCHEMAS:
                self._by_id.clear()
            self._by_id[schema_id] = found
        return found

    # -- compatibility levels -----------------------------------------------------------------

    def compatibility(self, subject: str | None = None) -> str:
        path = "/config" if subject is None else f"/config/{_quote(subject)}?defaultToGlobal=true"
        return str(self._call("GET", path)["compatibilityLevel"])

    def set_compatibility(self, level: str, subject: str | None = None) -> str:
        path = "/config" if subject is None else f"/config/{_quote(subject)}"
        return str(self._call("PUT", path, {"compatibility": level})["compatibility"])

    # -- transport ----------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        last: Exception | None = None
        for base in self._urls:
            request = urllib.request.Request(
                base + path,
                data=data,
                method=method,
                headers=self._headers,
            )
            try:
                with urllib.request.urlopen(request, timeout=self._timeout_s) as reply:
                    return json.loads(reply.read() or b"null")
            except urllib.error.HTTPError as error:
                try:
                    document = json.loads(error.read())
                except ValueError:
                    document = {}
                if error.code >= 500 and base != self._urls[-1]:
                    last = error
                    continue
                raise SchemaRegistryError(
                    error.code,
                    int(document.get("error_code", error.code)),
                    str(document.get("message", error.reason)),
                ) from None
            except (urllib.error.URLError, OSError) as error:
                last = error
        raise SchemaRegistryError(0, 0, f"no schema registry reachable at {self._urls}: {last}")


def pack(schema_id: int, payload: bytes) -> bytes:
    """Confluent's wire format: magic byte, schema id, payload."""
    return bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big") + payload


def unpack(data: bytes) -> tuple[int, bytes]:
    """``(schema id, payload)`` of a value in Confluent's wire format."""
    if data is None or len(data) < 5 or data[0] != MAGIC_BYTE:
        raise SchemaRegistryError(0, 0, "the value is not in the schema registry's wire format")
    return int.from_bytes(data[1:5], "big"), bytes(data[5:])


class AvroSerializer:
    """``serialize(obj) -> bytes`` with ``schema`` (registered under ``subject`` on first use
    unless ``auto_register`` is false, then looked up)."""

    def __init__(
        self,
        registry: SchemaRegistryClient,
        subject: str,
        schema: str,
        *,
        auto_register: bool = True,
    ) -> None:
        import fastavro

        self._registry = registry
        self._subject = subject
        self._text = schema
        self._parsed = fastavro.parse_schema(json.loads(schema))
        self._auto_register = auto_register
        self._schema_id: int | None = None

    @property
    def schema_id(self) -> int:
        if self._schema_id is None:
            if self._auto_register:
                self._schema_id = self._registry.register(self._subject, self._text)
            else:
                self._schema_id = self._registry.lookup(self._subject, self._text).schema_id
        return self._schema_id

    def __call__(self, value: Any) -> bytes:
        import fastavro

        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, self._parsed, value)
        return pack(self.schema_id, buffer.getvalue())


class AvroDeserializer:
    """``deserialize(bytes) -> obj``: the writer's schema comes from the registry by the id in
    the value; with ``reader_schema`` the value is resolved to it (Avro's schema
    resolution)."""

    def __init__(self, registry: SchemaRegistryClient, reader_schema: str | None = None) -> None:
        import fastavro

        self._registry = registry
        self._reader = (
            None if reader_schema is None else fastavro.parse_schema(json.loads(reader_schema))
        )
        self._writers: dict[int, Any] = {}

    def __call__(self, data: bytes) -> Any:
        import fastavro

        schema_id, payload = unpack(data)
        writer = self._writers.get(schema_id)
        if writer is None:
            registered = self._registry.schema(schema_id)
            if registered.schema_type != "AVRO":
                raise SchemaRegistryError(
                    0, 0, f"schema {schema_id} is {registered.schema_type}, not AVRO"
                )
            writer = self._writers[schema_id] = fastavro.parse_schema(json.loads(registered.schema))
        return fastavro.schemaless_reader(io.BytesIO(payload), writer, self._reader)


def _schema_body(
    schema: str, schema_type: str, references: list[dict[str, Any]] | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"schema": schema}
    if schema_type != "AVRO":
        body["schemaType"] = schema_type
    if references:
        body["references"] = references
    return body


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")
