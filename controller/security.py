"""Security metadata decisions (pure): SCRAM credentials and ACL bindings, as records.

``alter_scram_credentials`` follows Kafka's AlterUserScramCredentials: results are per user,
and a user's alterations take effect all together or not at all (one bad alteration of a user
fails every alteration of that user, and changes nothing of it). The broker that received the
request already turned each salted password into the stored and server keys (RFC 5802), so
neither a password nor a salted password reaches the metadata log.

ACL bindings arrive as their wire codes (``flux.auth.acl`` validates them on the broker);
``create_acls`` adds the ones not present, ``delete_acls`` removes the bindings the broker
matched against the image it answered from.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from flux.auth.errors import UnacceptableCredentialError
from flux.auth.scram import MECHANISMS, ScramCredential
from flux.controller.handlers import ControllerResult
from flux.controller.image import MetadataImage, acl_key
from flux.controller.records import (
    CreateAcl,
    DeleteAcl,
    Record,
    RemoveUserScramCredential,
    UserScramCredential,
)
from flux.protocol.errors import ErrorCode

__all__ = [
    "MAX_ACL_CHANGES",
    "MAX_CREDENTIAL_CHANGES",
    "alter_scram_credentials",
    "change_acls",
]

MAX_CREDENTIAL_CHANGES = 1000
MAX_ACL_CHANGES = 10_000
#: A user name: printable, no control characters (Kafka accepts any non-empty string).
_USER_NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,256}$")


def _upsertion_error(item: Mapping[str, Any]) -> tuple[ErrorCode, str] | None:
    """What is wrong with one upsertion: the mechanism, or the credential's bounds (Kafka's
    iteration counts, salt and key sizes, checked by ``flux.auth.scram.ScramCredential``)."""
    if item.get("mechanism") not in MECHANISMS:
        return (
            ErrorCode.UNSUPPORTED_SASL_MECHANISM,
            f"unknown SCRAM mechanism {item.get('mechanism')!r}",
        )
    try:
        ScramCredential.from_dict(item)
    except UnacceptableCredentialError as error:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, str(error)
    return None


def alter_scram_credentials(
    image: MetadataImage,
    *,
    deletions: Sequence[Mapping[str, Any]],
    upsertions: Sequence[Mapping[str, Any]],
) -> ControllerResult:
    """Delete (``{"name", "mechanism"}``) and set (``{"name", "mechanism", "iterations",
    "salt", "stored_key", "server_key"}``, base64) credentials. The response's ``results``
    holds one ``{"user", "error_code", "error_message"}`` per user named, in first-seen order."""
    if len(deletions) + len(upsertions) > MAX_CREDENTIAL_CHANGES:
        return ControllerResult(
            response={
                "error_code": int(ErrorCode.INVALID_REQUEST),
                "error_message": f"more than {MAX_CREDENTIAL_CHANGES} credential changes",
                "results": [],
            }
        )
    changes = [("delete", item) for item in deletions] + [("set", item) for item in upsertions]
    users = list(dict.fromkeys(str(item.get("name")) for _, item in changes))
    named = Counter((str(item.get("name")), item.get("mechanism")) for _, item in changes)
    errors: dict[str, tuple[ErrorCode, str]] = {}
    for kind, item in changes:
        name = item.get("name")
        user = str(name)
        if user in errors:
            continue
        if not isinstance(name, str) or not _USER_NAME.match(name):
            errors[user] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "the user name is empty or invalid")
        elif named[(user, item.get("mechanism"))] > 1:
            errors[user] = (
                ErrorCode.DUPLICATE_RESOURCE,
                f"more than one alteration of {item.get('mechanism')} for one user",
            )
        elif kind == "delete":
            if item.get("mechanism") not in MECHANISMS:
                errors[user] = (
                    ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                    f"unknown SCRAM mechanism {item.get('mechanism')!r}",
                )
            elif (name, item["mechanism"]) not in image.scram_credentials:
                errors[user] = (
                    ErrorCode.RESOURCE_NOT_FOUND,
                    f"no {item['mechanism']} credential to delete",
                )
        else:
            problem = _upsertion_error(item)
            if problem is not None:
                errors[user] = problem
    records: list[Record] = []
    for kind, item in changes:
        if str(item.get("name")) in errors:
            continue
        if kind == "delete":
            records.append(
                RemoveUserScramCredential(name=item["name"], mechanism=item["mechanism"])
            )
        else:
            records.append(
                UserScramCredential(
                    name=item["name"],
                    mechanism=item["mechanism"],
                    salt=item["salt"],
                    stored_key=item["stored_key"],
                    server_key=item["server_key"],
                    iterations=item["iterations"],
                )
            )
    results = []
    for user in users:
        code, message = errors.get(user, (ErrorCode.NONE, None))
        results.append({"user": user, "error_code": int(code), "error_message": message})
    return ControllerResult(
        records=records,
        response={"error_code": int(ErrorCode.NONE), "error_message": None, "results": results},
    )


_ACL_FIELDS = (
    ("resource_type", int),
    ("resource_name", str),
    ("pattern_type", int),
    ("principal", str),
    ("host", str),
    ("operation", int),
    ("permission", int),
)


def _acl_fields(item: Any) -> dict[str, Any] | None:
    if not isinstance(item, Mapping):
        return None
    values = {}
    for name, kind in _ACL_FIELDS:
        value = item.get(name)
        if isinstance(value, bool) or not isinstance(value, kind):
            return None
        values[name] = value
    return values


def change_acls(
    image: MetadataImage,
    *,
    create: Sequence[Mapping[str, Any]] = (),
    delete: Sequence[Mapping[str, Any]] = (),
) -> ControllerResult:
    """Add the bindings ``create`` and remove the bindings ``delete`` (each a dict of the
    ``CreateAcl`` fields, already validated by the broker). Bindings already present (or
    already absent) make no record. ``created``/``deleted`` count the records made."""
    if len(create) + len(delete) > MAX_ACL_CHANGES:
        return ControllerResult(
            response={
                "error_code": int(ErrorCode.INVALID_REQUEST),
                "error_message": f"more than {MAX_ACL_CHANGES} ACL changes",
            }
        )
    records: list[Record] = []
    present = set(image.acls)
    for item in delete:
        values = _acl_fields(item)
        if values is None:
            return _malformed()
        record = DeleteAcl(**values)
        if acl_key(record) in present:
            present.discard(acl_key(record))
            records.append(record)
    deleted = len(records)
    for item in create:
        values = _acl_fields(item)
        if values is None:
            return _malformed()
        created = CreateAcl(**values)
        if acl_key(created) not in present:
            present.add(acl_key(created))
            records.append(created)
    return ControllerResult(
        records=records,
        response={
            "error_code": int(ErrorCode.NONE),
            "error_message": None,
            "created": len(records) - deleted,
            "deleted": deleted,
        },
    )


def _malformed() -> ControllerResult:
    return ControllerResult(
        response={
            "error_code": int(ErrorCode.INVALID_REQUEST),
            "error_message": "an ACL binding must carry resource_type, resource_name, "
            "pattern_type, principal, host, operation and permission",
        }
    )
