"""In-band protocol errors: a handler raises ApiError, the response carries its code and message."""

from __future__ import annotations

from connect.coordinator.v1.common_pb2 import ErrorCode


class ApiError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"ApiError({ErrorCode.Name(self.code)}, {self.message!r})"


def invalid(message: str) -> ApiError:
    return ApiError(ErrorCode.INVALID_REQUEST, message)


ECHO_LIMIT = 64


def clip(value: str, limit: int = ECHO_LIMIT) -> str:
    """What of a client's string an error message may echo: at most `limit` characters."""
    if len(value) <= limit:
        return value
    return f"{value[:limit]}...({len(value)} characters)"
