"""The registry's state: a view built by applying the records of the ``_schemas`` topic in
offset order, and the pure planning of every change as the records that make it.

Records (key and value are JSON; keys are written with sorted keys, so the compacted topic
keeps the newest record per key, and a null value, a tombstone, removes the key)::

    {"keytype": "SCHEMA", "subject": s, "version": v}  ->  {"subject", "version", "id",
        "schemaType", "schema", "references", "deleted"}
    {"keytype": "CONFIG", "subject": s | null}         ->  {"compatibilityLevel": level}
    {"keytype": "MODE", "subject": s | null}           ->  {"mode": mode}
    {"keytype": "ID"}                                  ->  {"id": the highest id handed out}

A schema id names one schema (type, canonical text and references): registering the same
schema under another subject reuses its id, as Confluent's registry does. The ``ID`` record
keeps the highest id ever handed out, so ids are never reused even after every version that
used the highest one was deleted permanently and compacted away.

Thread-safety: none; the registry's one writer (the leader of ``_schemas``) and every
broker's reader use it from the event loop.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from . import compatibility
from .errors import (
    IncompatibleSchemaError,
    InvalidCompatibilityLevelError,
    InvalidModeError,
    InvalidSchemaError,
    InvalidVersionError,
    OperationNotPermittedError,
    ReferenceExistsError,
    SchemaNotFoundError,
    SubjectNotFoundError,
    SubjectNotSoftDeletedError,
    SubjectSoftDeletedError,
    VersionNotFoundError,
    VersionNotSoftDeletedError,
)
from .schemas import ParsedSchema, Reference, avro_inlined, parse_schema

__all__ = [
    "COMPATIBILITY_LEVELS",
    "DEFAULT_COMPATIBILITY",
    "MODES",
    "Record",
    "RegistryState",
    "SchemaVersion",
    "compatibility_problems",
    "encode_key",
]

COMPATIBILITY_LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
DEFAULT_COMPATIBILITY = "BACKWARD"
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
DEFAULT_MODE = "READWRITE"

#: (key, value) as stored: JSON objects, value None for a tombstone.
Record = tuple[dict[str, Any], dict[str, Any] | None]


def encode_key(key: dict[str, Any]) -> bytes:
    return json.dumps(key, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class SchemaVersion:
    subject: str
    version: int
    schema_id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...]
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        """As Confluent answers a version: ``schemaType`` only when it is not AVRO."""
        document: dict[str, Any] = {
            "subject": self.subject,
            "version": self.version,
            "id": self.schema_id,
            "schema": self.schema,
        }
        if self.schema_type != "AVRO":
            document["schemaType"] = self.schema_type
        if self.references:
            document["references"] = [reference.to_json() for reference in self.references]
        return document

    def record(self) -> Record:
        key = {"keytype": "SCHEMA", "subject": self.subject, "version": self.version}
        value = {
            "subject": self.subject,
            "version": self.version,
            "id": self.schema_id,
            "schemaType": self.schema_type,
            "schema": self.schema,
            "references": [reference.to_json() for reference in self.references],
            "deleted": self.deleted,
        }
        return key, value


class RegistryState:
    """Subjects, versions, ids, compatibility levels and modes, as of ``applied_offset``."""

    def __init__(self) -> None:
        #: The offset of the next record to apply.
        self.applied_offset = 0
        self.max_id = 0
        self._versions: dict[str, dict[int, SchemaVersion]] = {}
        self._users: dict[int, set[tuple[str, int]]] = {}
        self._configs: dict[str | None, str] = {}
        self._modes: dict[str | None, str] = {}
        self._parsed: dict[tuple[str, int], ParsedSchema] = {}

    # -- applying records ---------------------------------------------------------------------

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        """Apply the record at ``offset`` (records below ``applied_offset`` are skipped, so
        catching up twice over the same range is harmless). A record this version does not
        understand is skipped: the topic is ours, but a newer broker may write kinds an older
        one does not know."""
        if offset < self.applied_offset:
            return
        self.applied_offset = offset + 1
        if key is None:
            return
        try:
            decoded_key = json.loads(key)
            decoded_value = None if value is None else json.loads(value)
        except (ValueError, UnicodeDecodeError):
            return
        if isinstance(decoded_key, dict):
            self.apply_record((decoded_key, decoded_value))

    def apply_record(self, record: Record) -> None:
        key, value = record
        kind = key.get("keytype")
        subject = key.get("subject")
        if kind == "SCHEMA" and isinstance(subject, str):
            self._apply_schema(subject, int(key.get("version", 0)), value)
        elif kind == "CONFIG":
            level = None if value is None else value.get("compatibilityLevel")
            _set_or_delete(self._configs, subject, level)
        elif kind == "MODE":
            _set_or_delete(self._modes, subject, None if value is None else value.get("mode"))
        elif kind == "ID" and value is not None:
            self.max_id = max(self.max_id, int(value.get("id", 0)))

    def _apply_schema(self, subject: str, version: int, value: dict[str, Any] | None) -> None:
        versions = self._versions.setdefault(subject, {})
        old = versions.pop(version, None)
        self._parsed.pop((subject, version), None)
        if old is not None:
            users = self._users.get(old.schema_id, set())
            users.discard((subject, version))
            if not users:
                self._users.pop(old.schema_id, None)
        if value is not None:
            entry = SchemaVersion(
                subject=subject,
                version=version,
                schema_id=int(value["id"]),
                schema_type=str(value.get("schemaType") or "AVRO"),
                schema=str(value["schema"]),
                references=tuple(
                    Reference(r["name"], r["subject"], int(r["version"]))
                    for r in value.get("references") or ()
                ),
                deleted=bool(value.get("deleted", False)),
            )
            versions[version] = entry
            self._users.setdefault(entry.schema_id, set()).add((subject, version))
            self.max_id = max(self.max_id, entry.schema_id)
        if not versions:
            del self._versions[subject]

    # -- reading ------------------------------------------------------------------------------

    def subjects(self, *, deleted: bool = False, prefix: str = "") -> list[str]:
        return sorted(
            subject
            for subject, versions in self._versions.items()
            if subject.startswith(prefix)
            and any(deleted or not v.deleted for v in versions.values())
        )

    def versions(self, subject: str, *, deleted: bool = False) -> list[SchemaVersion]:
        """The subject's versions, oldest first (soft-deleted ones with ``deleted``)."""
        found = self._versions.get(subject)
        if not found:
            raise SubjectNotFoundError(f"Subject '{subject}' not found.")
        live = [found[v] for v in sorted(found) if deleted or not found[v].deleted]
        if not live:
            raise SubjectNotFoundError(f"Subject '{subject}' not found.")
        return live

    def version(self, subject: str, version: int | str, *, deleted: bool = False) -> SchemaVersion:
        """``version`` is a number, ``latest`` or ``-1`` (the newest not deleted)."""
        versions = self.versions(subject, deleted=deleted)
        if version in ("latest", -1, "-1"):
            return versions[-1]
        number = _version_number(version)
        for entry in versions:
            if entry.version == number:
                return entry
        raise VersionNotFoundError(f"Version {version} not found.")

    def schema(self, schema_id: int) -> SchemaVersion:
        """A version that uses ``schema_id`` (any: they share type, text and references)."""
        users = self._users.get(schema_id)
        if not users:
            raise SchemaNotFoundError(f"Schema {schema_id} not found")
        subject, version = min(users)
        return self._versions[subject][version]

    def schema_users(self, schema_id: int, *, deleted: bool = False) -> list[SchemaVersion]:
        self.schema(schema_id)
        return sorted(
            (
                self._versions[subject][version]
                for subject, version in self._users[schema_id]
                if deleted or not self._versions[subject][version].deleted
            ),
            key=lambda entry: (entry.subject, entry.version),
        )

    def known_ids(self) -> Iterable[int]:
        return self._users.keys()

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of the live schemas that reference ``subject`` version ``version``."""
        return sorted(
            {
                entry.schema_id
                for versions in self._versions.values()
                for entry in versions.values()
                if not entry.deleted
                and any(r.subject == subject and r.version == version for r in entry.references)
            }
        )

    def compatibility(self, subject: str | None) -> str:
        if subject is not None and subject in self._configs:
            return self._configs[subject]
        return self._configs.get(None, DEFAULT_COMPATIBILITY)

    def subject_config(self, subject: str | None) -> str | None:
        return self._configs.get(subject)

    def mode(self, subject: str | None) -> str:
        if subject is not None and subject in self._modes:
            return self._modes[subject]
        return self._modes.get(None, DEFAULT_MODE)

    def subject_mode(self, subject: str | None) -> str | None:
        return self._modes.get(subject)

    def parsed(self, entry: SchemaVersion) -> ParsedSchema:
        """The version's schema, parsed (cached: versions never change their schema)."""
        cache_key = (entry.subject, entry.version)
        found = self._parsed.get(cache_key)
        if found is None:
            found = parse_schema(entry.schema_type, entry.schema, entry.references, self.resolve)
            self._parsed[cache_key] = found
        return found

    def resolve(self, reference: Reference) -> ParsedSchema:
        try:
            return self.parsed(self.version(reference.subject, reference.version, deleted=True))
        except (SubjectNotFoundError, VersionNotFoundError):
            raise InvalidSchemaError(
                f"reference {reference.name!r}: subject {reference.subject!r} has no version "
                f"{reference.version}"
            ) from None

    def lookup(self, subject: str, schema: ParsedSchema, *, deleted: bool = False) -> SchemaVersion:
        """The subject's version holding ``schema``."""
        for entry in self.versions(subject, deleted=True):
            if (deleted or not entry.deleted) and self.parsed(entry).identity == schema.identity:
                return entry
        raise SchemaNotFoundError("Schema not found")

    def find_id(self, schema: ParsedSchema) -> int | None:
        for schema_id, users in self._users.items():
            subject, version = next(iter(users))
            if self.parsed(self._versions[subject][version]).identity == schema.identity:
                return schema_id
        return None

    # -- planning changes (pure: records and the answer) ---------------------------------------

    def plan_register(
        self, subject: str, schema: ParsedSchema, *, schema_id: int | None = None
    ) -> tuple[list[Record], SchemaVersion]:
        """Records that register ``schema`` under ``subject`` (none when it already is its
        live version), and the version it gets. ``schema_id`` is honoured in IMPORT mode."""
        mode = self.mode(subject)
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise OperationNotPermittedError(f"Subject {subject} is in read-only mode")
        try:
            return [], self.lookup(subject, schema)
        except (SchemaNotFoundError, SubjectNotFoundError):
            pass
        try:
            previous = self.versions(subject)
        except SubjectNotFoundError:
            previous = []
        if mode != "IMPORT":
            problems = compatibility_problems(
                self.compatibility(subject), schema, [self.parsed(entry) for entry in previous]
            )
            if problems:
                raise IncompatibleSchemaError(
                    "Schema being registered is incompatible with an earlier schema for "
                    f'subject "{subject}", details: {problems}'
                )
        records: list[Record] = []
        if mode == "IMPORT" and schema_id is not None:
            existing = self._users.get(schema_id)
            if existing:
                holder = self.parsed(self.schema(schema_id))
                if holder.identity != schema.identity:
                    raise OperationNotPermittedError(
                        f"Overwrite new schema with id {schema_id} is not permitted."
                    )
            new_id = schema_id
        else:
            found = self.find_id(schema)
            new_id = found if found is not None else self.max_id + 1
        if new_id > self.max_id:
            records.append(({"keytype": "ID"}, {"id": new_id}))
        try:
            last = max(entry.version for entry in self.versions(subject, deleted=True))
        except SubjectNotFoundError:
            last = 0
        entry = SchemaVersion(
            subject=subject,
            version=last + 1,
            schema_id=new_id,
            schema_type=schema.schema_type,
            schema=schema.text,
            references=schema.references,
        )
        records.append(entry.record())
        return records, entry

    def plan_delete_subject(
        self, subject: str, *, permanent: bool
    ) -> tuple[list[Record], list[int]]:
        self._writable(subject)
        everything = self.versions(subject, deleted=True)
        live = [entry for entry in everything if not entry.deleted]
        for entry in everything:
            if self.referenced_by(subject, entry.version):
                raise ReferenceExistsError(
                    f"One or more references exist to the schema {{subject={subject}, "
                    f"version={entry.version}}}"
                )
        if permanent:
            if live:
                raise SubjectNotSoftDeletedError(
                    f"Subject '{subject}' was not deleted first before being permanently deleted"
                )
            return [
                ({"keytype": "SCHEMA", "subject": subject, "version": e.version}, None)
                for e in everything
            ], [e.version for e in everything]
        if not live:
            raise SubjectSoftDeletedError(f"Subject '{subject}' was soft deleted.")
        return [replace(entry, deleted=True).record() for entry in live], [
            entry.version for entry in live
        ]

    def plan_delete_version(
        self, subject: str, version: int | str, *, permanent: bool
    ) -> tuple[list[Record], int]:
        self._writable(subject)
        entry = self.version(subject, version, deleted=permanent)
        if self.referenced_by(subject, entry.version):
            raise ReferenceExistsError(
                f"One or more references exist to the schema {{subject={subject}, "
                f"version={entry.version}}}"
            )
        if permanent:
            if not entry.deleted:
                raise VersionNotSoftDeletedError(
                    f"Subject '{subject}' Version {entry.version} was not deleted first before "
                    "being permanently deleted"
                )
            key = {"keytype": "SCHEMA", "subject": subject, "version": entry.version}
            return [(key, None)], entry.version
        return [replace(entry, deleted=True).record()], entry.version

    def plan_config(self, subject: str | None, level: Any) -> list[Record]:
        """Set (``level``) or delete (None) the compatibility level of ``subject`` or, for
        None, the registry's default."""
        if level is not None and (
            not isinstance(level, str) or level.upper() not in COMPATIBILITY_LEVELS
        ):
            raise InvalidCompatibilityLevelError(
                f"Invalid compatibility level. Valid values are {', '.join(COMPATIBILITY_LEVELS)}"
            )
        value = None if level is None else {"compatibilityLevel": level.upper()}
        return [({"keytype": "CONFIG", "subject": subject}, value)]

    def plan_mode(self, subject: str | None, mode: Any) -> list[Record]:
        if mode is not None and (not isinstance(mode, str) or mode.upper() not in MODES):
            raise InvalidModeError(f"Invalid mode. Valid values are {', '.join(MODES)}")
        value = None if mode is None else {"mode": mode.upper()}
        return [({"keytype": "MODE", "subject": subject}, value)]

    def _writable(self, subject: str) -> None:
        if self.mode(subject) in ("READONLY", "READONLY_OVERRIDE"):
            raise OperationNotPermittedError(f"Subject {subject} is in read-only mode")


def compatibility_problems(
    level: str, schema: ParsedSchema, previous: list[ParsedSchema]
) -> list[str]:
    """Why ``schema`` may not follow ``previous`` (oldest first) under ``level``: BACKWARD
    means the new schema reads data written with the previous one, FORWARD that the previous
    reads data written with the new, FULL both; ``_TRANSITIVE`` checks every previous version
    instead of only the latest."""
    if level == "NONE" or not previous:
        return []
    checked = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    base = level.removesuffix("_TRANSITIVE")
    problems: list[str] = []
    for old in reversed(checked):
        if old.schema_type != schema.schema_type:
            problems.append(f"schema type changed from {old.schema_type} to {schema.schema_type}")
            continue
        if base in ("BACKWARD", "FULL"):
            problems.extend(_reader_problems(schema, old))
        if base in ("FORWARD", "FULL"):
            problems.extend(_reader_problems(old, schema))
    return problems


def _reader_problems(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    if reader.schema_type == "AVRO":
        return compatibility.avro_problems(avro_inlined(reader), avro_inlined(writer))
    if reader.schema_type == "JSON":
        return compatibility.json_schema_problems(reader.parsed, writer.parsed)
    return compatibility.protobuf_problems(reader.parsed, writer.parsed)


def _set_or_delete(target: dict[str | None, str], key: Any, value: Any) -> None:
    if not (key is None or isinstance(key, str)):
        return
    if value is None:
        target.pop(key, None)
    else:
        target[key] = str(value)


def _version_number(version: int | str) -> int:
    try:
        number = int(version)
    except (TypeError, ValueError):
        number = 0
    if number < 1:
        raise InvalidVersionError(
            f"The specified version '{version}' is not a valid version id. Allowed values are "
            'between [1, 2^31-1] and the string "latest"'
        )
    return number
