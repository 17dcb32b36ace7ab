"""Exceptions named after the API's error codes, all subclasses of Error."""
from __future__ import annotations

from typing import Any, Dict, Optional, Type


class Error(Exception):
    """An error answer of the SPACE API (or a failed operation).

    ``code`` is the API's snake_case code (e.g. ``"not_found"``), ``message``
    its text for humans, ``details`` its details object (for a conflict, the
    sandbox's current ``state``), ``request_id`` the server's X-Request-Id and
    ``status`` the HTTP status (0 when the error did not come as an answer).
    """

    code = "unknown"

    def __init__(self, message: str, *, code: Optional[str] = None, details: Optional[Dict[str, Any]] = None,
                 request_id: Optional[str] = None, status: int = 0) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.details: Dict[str, Any] = details or {}
        self.request_id = request_id
        self.status = status

    def __str__(self) -> str:
        s = f"{self.code}: {self.message}"
        if self.request_id:
            s += f" (request {self.request_id})"
        return s


class InvalidArgument(Error):
    code = "invalid_argument"


class Unauthenticated(Error):
    code = "unauthenticated"


class PermissionDenied(Error):
    code = "permission_denied"


class NotFound(Error):
    code = "not_found"


class Conflict(Error):
    """Wrong state (``details["state"]`` says the current one) or a reused idempotency key."""
    code = "conflict"


class FailedPrecondition(Error):
    code = "failed_precondition"


class PayloadTooLarge(Error):
    code = "payload_too_large"


class ResourceExhausted(Error):
    """Quota or capacity; also HTTP 429 once the retries honouring Retry-After ran out."""
    code = "resource_exhausted"


class Internal(Error):
    code = "internal"


class Unavailable(Error):
    """The server could not be reached or answered 503 (after retries)."""
    code = "unavailable"


class DataLoss(Error):
    code = "data_loss"


class DeadlineExceeded(Error):
    """A wait or request ran out of time."""
    code = "deadline_exceeded"


class Aborted(Error):
    """An operation interrupted by a server restart."""
    code = "aborted"


class Cancelled(Error):
    code = "cancelled"


_BY_CODE: Dict[str, Type[Error]] = {c.code: c for c in (
    InvalidArgument, Unauthenticated, PermissionDenied, NotFound, Conflict, FailedPrecondition, PayloadTooLarge,
    ResourceExhausted, Internal, Unavailable, DataLoss, DeadlineExceeded, Aborted, Cancelled)}

_BY_STATUS = {400: InvalidArgument, 401: Unauthenticated, 403: PermissionDenied, 404: NotFound, 408: DeadlineExceeded,
              409: Conflict, 412: FailedPrecondition, 413: PayloadTooLarge, 429: ResourceExhausted, 500: Internal,
              502: Unavailable, 503: Unavailable, 504: DeadlineExceeded}


def error_for(code: Optional[str], message: str, *, status: int = 0, details: Optional[Dict[str, Any]] = None,
              request_id: Optional[str] = None) -> Error:
    """Returns the exception for an API code (by HTTP status when the code is unknown)."""
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status) or Error
    return cls(message, code=code or cls.code, details=details, request_id=request_id, status=status)
