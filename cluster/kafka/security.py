"""Handlers of the security admin APIs: DescribeUserScramCredentials (50),
AlterUserScramCredentials (51), and the ACL APIs DescribeAcls (29), CreateAcls (30) and
DeleteAcls (31).

ACLs: CreateAcls validates each binding (``flux.auth.acl.validate_binding``: Kafka's checks)
and sends the valid ones to the active controller as one change; DeleteAcls matches each
filter against this broker's image, removes the union of the matches in one change, and
answers each filter with the bindings it matched. Both answer once this broker's image shows
the change; every broker applies it when its image does (within a metadata round trip).

Describe answers from this broker's image: per user, each mechanism and its iteration count
(never a salt or key). Alter turns each upsertion's salted password into the stored and
server keys here (RFC 5802: what a server keeps), so the metadata log never holds anything a
client could log in with, and forwards the change to the active controller, which applies a
user's alterations all together or not at all (``flux.controller.security``).
"""

from __future__ import annotations

import base64
from typing import Any

from flux.auth.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    validate_binding,
    validate_filter,
)
from flux.auth.errors import InvalidAclError, UnacceptableCredentialError
from flux.auth.scram import MECHANISM_TYPES, ScramCredential
from flux.protocol.api import RequestHeader
from flux.protocol.errors import ErrorCode

from .authorization import binding_of
from .common import KafkaApisBase, log

__all__ = ["SecurityApis"]

#: Kafka's mechanism type codes in the SCRAM credential APIs.
MECHANISM_CODES = {code: name for name, code in MECHANISM_TYPES.items()}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class SecurityApis(KafkaApisBase):
    async def _describe_user_scram_credentials(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        credentials = self._image.scram_credentials
        by_user: dict[str, list[dict[str, int]]] = {}
        for (user, mechanism), record in credentials.items():
            by_user.setdefault(user, []).append(
                {"mechanism": MECHANISM_TYPES.get(mechanism, 0), "iterations": record.iterations}
            )
        requested = [item["name"] for item in body.get("users") or []]
        results = []
        if not requested:
            for user, infos in by_user.items():
                results.append(_described(user, ErrorCode.NONE, None, infos))
        else:
            counts: dict[str, int] = {}
            for name in requested:
                counts[name] = counts.get(name, 0) + 1
            for name in dict.fromkeys(requested):
                if counts[name] > 1:
                    results.append(
                        _described(name, ErrorCode.DUPLICATE_RESOURCE, "user named twice", [])
                    )
                elif name not in by_user:
                    results.append(
                        _described(
                            name, ErrorCode.RESOURCE_NOT_FOUND, "no credentials for the user", []
                        )
                    )
                else:
                    results.append(_described(name, ErrorCode.NONE, None, by_user[name]))
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "results": results,
        }

    async def _alter_user_scram_credentials(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        failed: dict[str, tuple[int, str]] = {}
        deletions = []
        for item in body.get("deletions") or []:
            mechanism = MECHANISM_CODES.get(item["mechanism"])
            if mechanism is None:
                failed.setdefault(
                    item["name"],
                    (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "unknown SCRAM mechanism"),
                )
                continue
            deletions.append({"name": item["name"], "mechanism": mechanism})
        upsertions = []
        for item in body.get("upsertions") or []:
            mechanism = MECHANISM_CODES.get(item["mechanism"])
            if mechanism is None:
                failed.setdefault(
                    item["name"],
                    (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "unknown SCRAM mechanism"),
                )
                continue
            try:
                credential = ScramCredential.from_salted_password(
                    mechanism,
                    bytes(item["salt"]),
                    bytes(item["salted_password"]),
                    item["iterations"],
                )
            except UnacceptableCredentialError as error:
                failed.setdefault(item["name"], (ErrorCode.UNACCEPTABLE_CREDENTIAL, str(error)))
                continue
            upsertions.append(
                {
                    "name": item["name"],
                    "mechanism": mechanism,
                    "iterations": credential.iterations,
                    "salt": _b64(credential.salt),
                    "stored_key": _b64(credential.stored_key),
                    "server_key": _b64(credential.server_key),
                }
            )
        names = [item["name"] for item in body.get("deletions") or []] + [
            item["name"] for item in body.get("upsertions") or []
        ]
        # A user with a refused alteration gets none of its alterations.
        deletions = [item for item in deletions if item["name"] not in failed]
        upsertions = [item for item in upsertions if item["name"] not in failed]
        results: dict[str, dict[str, Any]] = {}
        if deletions or upsertions:
            answer = await self._forward(
                "POST",
                "/controller/scram-credentials",
                {"deletions": deletions, "upsertions": upsertions},
            )
            if answer["error_code"] != ErrorCode.NONE:
                for name in names:
                    if name not in failed:
                        failed[name] = (answer["error_code"], answer["error_message"])
            for result in answer.get("results", []):
                results[result["user"]] = result
        out = []
        for name in dict.fromkeys(names):
            if name in failed:
                code, message = failed[name]
            else:
                result = results.get(name, {})
                code = result.get("error_code", ErrorCode.NONE)
                message = result.get("error_message")
            if code == ErrorCode.NONE:
                log.info("altered SCRAM credentials of user %r", name)
            out.append({"user": name, "error_code": code, "error_message": message})
        return {"throttle_time_ms": 0, "results": out}

    # -- ACLs ---------------------------------------------------------------------------------

    def _bindings(self) -> list[AclBinding]:
        return [binding_of(record) for record in self._image.acls.values()]

    async def _describe_acls(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        try:
            acl_filter = _filter_of(body, header.api_version)
            validate_filter(acl_filter)
        except InvalidAclError as error:
            return {
                "throttle_time_ms": 0,
                "error_code": ErrorCode.INVALID_REQUEST,
                "error_message": str(error),
                "resources": [],
            }
        resources: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
        for binding in self._bindings():
            if acl_filter.matches(binding):
                key = (int(binding.resource_type), binding.resource_name, int(binding.pattern_type))
                resources.setdefault(key, []).append(
                    {
                        "principal": binding.principal,
                        "host": binding.host,
                        "operation": int(binding.operation),
                        "permission_type": int(binding.permission),
                    }
                )
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "resources": [
                {
                    "resource_type": kind,
                    "resource_name": name,
                    "pattern_type": pattern,
                    "acls": acls,
                }
                for (kind, name, pattern), acls in resources.items()
            ],
        }

    async def _create_acls(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        results: list[dict[str, Any]] = []
        valid: list[tuple[int, AclBinding]] = []
        for position, item in enumerate(body.get("creations") or []):
            pattern = item.get("resource_pattern_type", 3) if header.api_version >= 1 else 3
            try:
                binding = AclBinding(
                    resource_type=ResourceType(item["resource_type"]),
                    resource_name=item["resource_name"],
                    pattern_type=PatternType(pattern),
                    principal=item["principal"],
                    host=item["host"],
                    operation=AclOperation(item["operation"]),
                    permission=AclPermissionType(item["permission_type"]),
                )
                validate_binding(binding)
            except InvalidAclError as error:
                results.append(
                    {"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(error)}
                )
                continue
            results.append({"error_code": ErrorCode.NONE, "error_message": None})
            valid.append((position, binding))
        if valid:
            answer = await self._forward(
                "POST", "/controller/acls", {"create": [_binding_fields(b) for _, b in valid]}
            )
            if answer["error_code"] != ErrorCode.NONE:
                for position, _ in valid:
                    results[position] = {
                        "error_code": answer["error_code"],
                        "error_message": answer["error_message"],
                    }
            else:
                log.info("created %d ACL bindings", len(valid))
        return {"throttle_time_ms": 0, "results": results}

    async def _delete_acls(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        bindings = self._bindings()
        outcomes: list[tuple[str | None, list[AclBinding]]] = []
        doomed: dict[AclBinding, None] = {}
        for item in body.get("filters") or []:
            try:
                acl_filter = _filter_of(item, header.api_version)
                validate_filter(acl_filter)
            except InvalidAclError as error:
                outcomes.append((str(error), []))
                continue
            matched = [binding for binding in bindings if acl_filter.matches(binding)]
            doomed.update(dict.fromkeys(matched))
            outcomes.append((None, matched))
        failure: tuple[int, str | None] | None = None
        if doomed:
            answer = await self._forward(
                "POST", "/controller/acls", {"delete": [_binding_fields(b) for b in doomed]}
            )
            if answer["error_code"] != ErrorCode.NONE:
                failure = (answer["error_code"], answer["error_message"])
            else:
                log.info("deleted %d ACL bindings", len(doomed))
        results = []
        for problem, matched in outcomes:
            if problem is not None:
                results.append(
                    {
                        "error_code": ErrorCode.INVALID_REQUEST,
                        "error_message": problem,
                        "matching_acls": [],
                    }
                )
                continue
            if failure is not None:
                results.append(
                    {"error_code": failure[0], "error_message": failure[1], "matching_acls": []}
                )
                continue
            results.append(
                {
                    "error_code": ErrorCode.NONE,
                    "error_message": None,
                    "matching_acls": [
                        {
                            "error_code": ErrorCode.NONE,
                            "error_message": None,
                            "resource_type": int(b.resource_type),
                            "resource_name": b.resource_name,
                            "pattern_type": int(b.pattern_type),
                            "principal": b.principal,
                            "host": b.host,
                            "operation": int(b.operation),
                            "permission_type": int(b.permission),
                        }
                        for b in matched
                    ],
                }
            )
        return {"throttle_time_ms": 0, "filter_results": results}


def _binding_fields(binding: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": int(binding.resource_type),
        "resource_name": binding.resource_name,
        "pattern_type": int(binding.pattern_type),
        "principal": binding.principal,
        "host": binding.host,
        "operation": int(binding.operation),
        "permission": int(binding.permission),
    }


def _filter_of(item: dict[str, Any], version: int) -> AclBindingFilter:
    pattern = item.get("pattern_type_filter", PatternType.LITERAL) if version >= 1 else 3
    return AclBindingFilter(
        resource_type=ResourceType(item["resource_type_filter"]),
        resource_name=item.get("resource_name_filter"),
        pattern_type=PatternType(pattern),
        principal=item.get("principal_filter"),
        host=item.get("host_filter"),
        operation=AclOperation(item["operation"]),
        permission=AclPermissionType(item["permission_type"]),
    )


def _described(
    user: str, code: int, message: str | None, infos: list[dict[str, int]]
) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": infos}
