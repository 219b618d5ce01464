"""Handlers of the security admin APIs: DescribeUserScramCredentials (50) and
AlterUserScramCredentials (51).

Describe answers from this broker's image: per user, each mechanism and its iteration count
(never a salt or key). Alter turns each upsertion's salted password into the stored and
server keys here (RFC 5802: what a server keeps), so the metadata log never holds anything a
client could log in with, and forwards the change to the active controller, which applies a
user's alterations all together or not at all (``flux.controller.security``).
"""

from __future__ import annotations

import base64
from typing import Any

from flux.auth.errors import UnacceptableCredentialError
from flux.auth.scram import MECHANISMS, ScramCredential
from flux.protocol.api import RequestHeader
from flux.protocol.errors import ErrorCode

from .common import KafkaApisBase, log

__all__ = ["SecurityApis"]

#: Kafka's mechanism type codes in the SCRAM credential APIs.
MECHANISM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_NAMES = {name: code for code, name in MECHANISM_CODES.items()}


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
                {"mechanism": MECHANISM_NAMES.get(mechanism, 0), "iterations": record.iterations}
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
            if mechanism is None or mechanism not in MECHANISMS:
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


def _described(
    user: str, code: int, message: str | None, infos: list[dict[str, int]]
) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": infos}
