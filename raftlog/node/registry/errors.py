"""The Schema Registry's errors: one class per Confluent REST error, each a
`SchemaRegistryError` of the one registry (raftlog/base/errors.py) whose details carry the HTTP
status and Confluent's `error_code`, so the listener answers any of them as Confluent does:

    {"error_code": 40401, "message": "Subject 'x' not found."}   with HTTP 404

    SchemaRegistryError (raftlog.base.errors)
     ├── SubjectNotFoundError             404 40401
     ├── VersionNotFoundError             404 40402
     ├── SchemaNotFoundError              404 40403
     ├── SubjectSoftDeletedError          404 40404
     ├── SubjectNotSoftDeletedError       404 40405
     ├── VersionSoftDeletedError          404 40406
     ├── VersionNotSoftDeletedError       404 40407
     ├── SubjectCompatibilityNotSetError  404 40408
     ├── SubjectModeNotSetError           404 40409
     ├── IncompatibleSchemaError          409 409
     ├── InvalidSchemaError               422 42201
     ├── InvalidVersionError              422 42202
     ├── InvalidCompatibilityError        422 42203
     ├── InvalidModeError                 422 42204
     ├── OperationNotPermittedError       422 42205
     ├── ReferenceExistsError             422 42206
     ├── InvalidSubjectError              422 42208
     ├── BadRequestError                  400 400     (a body that is not a JSON object, ...)
     ├── UnauthorizedError                401 40101
     ├── ForbiddenError                   403 40301
     ├── NotFoundError                    404 404     (no such endpoint)
     ├── MethodNotAllowedError            405 405
     ├── BodyTooLargeError                413 413
     ├── StoreError                       500 50001
     ├── StoreTimeoutError                500 50002
     └── ForwardingError                  500 50003   (the writer is unknown or unreachable; retry)
"""

from __future__ import annotations

from typing import Any, ClassVar

from raftlog.base.errors import SchemaRegistryError

__all__ = [
    "RegistryError", "SubjectNotFoundError", "VersionNotFoundError", "SchemaNotFoundError",
    "SubjectSoftDeletedError", "SubjectNotSoftDeletedError", "VersionSoftDeletedError",
    "VersionNotSoftDeletedError", "SubjectCompatibilityNotSetError", "SubjectModeNotSetError",
    "IncompatibleSchemaError", "InvalidSchemaError", "InvalidVersionError", "InvalidCompatibilityError",
    "InvalidModeError", "OperationNotPermittedError", "ReferenceExistsError", "InvalidSubjectError",
    "BadRequestError", "UnauthorizedError", "ForbiddenError", "NotFoundError", "MethodNotAllowedError",
    "BodyTooLargeError", "StoreError", "StoreTimeoutError", "ForwardingError", "error_body",
]


class RegistryError(SchemaRegistryError):
    """Base of this package's errors; `http_status` and `error_code` are class constants."""

    http_status: ClassVar[int] = 500
    error_code: ClassVar[int] = 50001

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message, http_status=self.http_status, error_code=self.error_code, **details)


def _error(name: str, status: int, code: int) -> type[RegistryError]:
    return type(name, (RegistryError,), {"http_status": status, "error_code": code, "__module__": __name__})


SubjectNotFoundError = _error("SubjectNotFoundError", 404, 40401)
VersionNotFoundError = _error("VersionNotFoundError", 404, 40402)
SchemaNotFoundError = _error("SchemaNotFoundError", 404, 40403)
SubjectSoftDeletedError = _error("SubjectSoftDeletedError", 404, 40404)
SubjectNotSoftDeletedError = _error("SubjectNotSoftDeletedError", 404, 40405)
VersionSoftDeletedError = _error("VersionSoftDeletedError", 404, 40406)
VersionNotSoftDeletedError = _error("VersionNotSoftDeletedError", 404, 40407)
SubjectCompatibilityNotSetError = _error("SubjectCompatibilityNotSetError", 404, 40408)
SubjectModeNotSetError = _error("SubjectModeNotSetError", 404, 40409)
IncompatibleSchemaError = _error("IncompatibleSchemaError", 409, 409)
InvalidSchemaError = _error("InvalidSchemaError", 422, 42201)
InvalidVersionError = _error("InvalidVersionError", 422, 42202)
InvalidCompatibilityError = _error("InvalidCompatibilityError", 422, 42203)
InvalidModeError = _error("InvalidModeError", 422, 42204)
OperationNotPermittedError = _error("OperationNotPermittedError", 422, 42205)
ReferenceExistsError = _error("ReferenceExistsError", 422, 42206)
InvalidSubjectError = _error("InvalidSubjectError", 422, 42208)
BadRequestError = _error("BadRequestError", 400, 400)
UnauthorizedError = _error("UnauthorizedError", 401, 40101)
ForbiddenError = _error("ForbiddenError", 403, 40301)
NotFoundError = _error("NotFoundError", 404, 404)
MethodNotAllowedError = _error("MethodNotAllowedError", 405, 405)
BodyTooLargeError = _error("BodyTooLargeError", 413, 413)
StoreError = _error("StoreError", 500, 50001)
StoreTimeoutError = _error("StoreTimeoutError", 500, 50002)
ForwardingError = _error("ForwardingError", 500, 50003)


def error_body(exc: SchemaRegistryError) -> tuple[int, dict[str, Any]]:
    """(HTTP status, Confluent's error body) for any SchemaRegistryError, also one rebuilt from
    the wire (whose status and code are in its details)."""
    details = exc.details
    status = details.get("http_status", 500)
    code = details.get("error_code", 50001)
    if type(status) is not int or not 400 <= status <= 599:
        status = 500
    if type(code) is not int:
        code = 50001
    return status, {"error_code": code, "message": exc.message}
