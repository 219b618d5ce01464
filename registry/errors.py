"""The registry's errors, each with Confluent's HTTP status and ``error_code`` (the body
``{"error_code": 40401, "message": ...}`` that confluent-kafka's ``SchemaRegistryError``
reads)::

    RegistryError                       (500, 50001 store error)
    ├── SubjectNotFoundError            (404, 40401)
    ├── VersionNotFoundError            (404, 40402)
    ├── SchemaNotFoundError             (404, 40403)
    ├── SubjectSoftDeletedError         (404, 40404)
    ├── SubjectNotSoftDeletedError      (404, 40405)
    ├── VersionNotSoftDeletedError      (404, 40407)
    ├── SubjectConfigNotFoundError      (404, 40408)
    ├── SubjectModeNotFoundError        (404, 40409)
    ├── ReferenceExistsError            (422, 42206)
    ├── IncompatibleSchemaError         (409, 409)
    ├── InvalidSchemaError              (422, 42201)
    ├── InvalidVersionError             (422, 42202)
    ├── InvalidCompatibilityLevelError  (422, 42203)
    ├── InvalidModeError                (422, 42204)
    ├── OperationNotPermittedError      (422, 42205: the subject or registry is READONLY)
    ├── BadRequestError                 (400, 400)
    ├── RequestTimeoutError             (408, 408: the body did not arrive in time)
    ├── StoreTimeoutError               (500, 50002)
    └── ForwardingError                 (500, 50003: the writer could not be reached)
"""

from __future__ import annotations

__all__ = [
    "BadRequestError",
    "ForwardingError",
    "IncompatibleSchemaError",
    "InvalidCompatibilityLevelError",
    "InvalidModeError",
    "InvalidSchemaError",
    "InvalidVersionError",
    "OperationNotPermittedError",
    "ReferenceExistsError",
    "RegistryError",
    "RequestTimeoutError",
    "SchemaNotFoundError",
    "StoreTimeoutError",
    "SubjectConfigNotFoundError",
    "SubjectModeNotFoundError",
    "SubjectNotFoundError",
    "SubjectNotSoftDeletedError",
    "SubjectSoftDeletedError",
    "VersionNotFoundError",
    "VersionNotSoftDeletedError",
]


class RegistryError(Exception):
    status = 500
    error_code = 50001

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def body(self) -> dict[str, object]:
        return {"error_code": self.error_code, "message": self.message}


class SubjectNotFoundError(RegistryError):
    status, error_code = 404, 40401


class VersionNotFoundError(RegistryError):
    status, error_code = 404, 40402


class SchemaNotFoundError(RegistryError):
    status, error_code = 404, 40403


class SubjectSoftDeletedError(RegistryError):
    status, error_code = 404, 40404


class SubjectNotSoftDeletedError(RegistryError):
    status, error_code = 404, 40405


class VersionNotSoftDeletedError(RegistryError):
    status, error_code = 404, 40407


class SubjectConfigNotFoundError(RegistryError):
    status, error_code = 404, 40408


class SubjectModeNotFoundError(RegistryError):
    status, error_code = 404, 40409


class ReferenceExistsError(RegistryError):
    status, error_code = 422, 42206


class IncompatibleSchemaError(RegistryError):
    status, error_code = 409, 409


class InvalidSchemaError(RegistryError):
    status, error_code = 422, 42201


class InvalidVersionError(RegistryError):
    status, error_code = 422, 42202


class InvalidCompatibilityLevelError(RegistryError):
    status, error_code = 422, 42203


class InvalidModeError(RegistryError):
    status, error_code = 422, 42204


class OperationNotPermittedError(RegistryError):
    status, error_code = 422, 42205


class BadRequestError(RegistryError):
    status, error_code = 400, 400


class RequestTimeoutError(RegistryError):
    status, error_code = 408, 408


class StoreTimeoutError(RegistryError):
    status, error_code = 500, 50002


class ForwardingError(RegistryError):
    status, error_code = 500, 50003
