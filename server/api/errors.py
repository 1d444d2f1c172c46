"""How failures become HTTP answers: one mapping for the whole service.

- A refusal of :mod:`normwatch.server.errors` (unauthenticated, forbidden, not found,
  conflict, too large, invalid, a bad metric batch...): its status and
  ``{"detail": "<why>", ...its fields}`` (a metric name the run never logged:
  ``"unknown"`` and ``"suggestions"``); a 401 with ``WWW-Authenticate: Bearer``. Routes raise these,
  never a ``HTTPException`` of their own.
- A request body or query that fails validation: 422 in FastAPI's shape
  ``{"detail": [{"type", "loc", "msg", "ctx"?}]}``, without the offending input (a 40 MiB
  field is not sent back) and with context values shortened.
- The database away or overloaded (a refused or dropped connection, the pool exhausted,
  a statement cancelled by its timeout, SQLite's write lock held too long): 503 with
  ``Retry-After``; the same request works a moment later.
- A value the database refused that validation let through (a number past its column's
  range, text it cannot encode): 422, logged as a warning, since validation should have
  caught it.
- Anything else: 500 ``{"detail": "internal error", "error_id": ...}``, with the
  traceback logged under that id, on a connection kept open (`Unexpected`). A 500 is
  always a bug.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..db import is_unavailable
from ..errors import ServiceError, Unauthenticated
from ..schemas import ErrorOut

__all__ = [
    "RETRY_AFTER_S",
    "Unexpected",
    "documented",
    "install",
    "is_unavailable",
    "refusal",
    "unavailable",
    "validation_details",
]

log = logging.getLogger("normwatch.server")

RETRY_AFTER_S = 2
"""What a 503 for an unavailable database tells clients to wait, in seconds."""

_CONTEXT_CHARS = 200

_MEANINGS = {
    400: "Malformed: a body that is not JSON (or not valid gzip), a NUL in the URL.",
    401: "No bearer token, or one that is unknown, revoked or expired.",
    403: "The token's scope is too narrow, or the object belongs to another project.",
    404: "No such object; or metric names, globs or a prefix that the run never logged "
    "(`unknown` lists them as written, `suggestions` the closest names the run has).",
    409: "Conflicts with what is stored, or a bound on what it may hold is reached.",
    413: "The body, what it carries or what it would read is over a size limit; the "
    "message names it.",
    415: "A Content-Encoding other than gzip.",
    422: "A field is invalid; the message names it (a list of failed checks for a body "
    "or query that fails validation).",
    503: "At capacity, or the database is unavailable: retry after Retry-After seconds.",
}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "schema": {"type": "integer"},
    }
}

API = (400, 401, 403, 413, 422, 503)
"""What any /api/v1 call may answer besides its success."""


def documented(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for error statuses, all of them `ErrorOut` bodies."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        entry: dict[str, Any] = {"model": ErrorOut, "description": _MEANINGS[code]}
        if code == 503:
            entry["headers"] = _RETRY_AFTER
        out[code] = entry
    return out


def unavailable(reason: str, retry_after_s: float = RETRY_AFTER_S) -> JSONResponse:
    """503 with ``Retry-After`` (whole seconds, at least 1)."""
    return JSONResponse(
        {"detail": f"{reason}; retry shortly"},
        status_code=503,
        headers={"Retry-After": str(max(1, round(retry_after_s)))},
    )


def refusal(exc: ServiceError) -> JSONResponse:
    """The answer to a refusal: its status, its message and fields, and for a 401 the scheme
    to use."""
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthenticated) else None
    body = {"detail": str(exc), **exc.fields()}
    return JSONResponse(body, status_code=exc.status_code, headers=headers)


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    @app.exception_handler(ServiceError)
    async def service_error(_request: Request, exc: ServiceError) -> JSONResponse:
        return refusal(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_details(exc.errors())}, status_code=422)

    @app.exception_handler(PoolTimeout)
    async def pool_exhausted(_request: Request, exc: PoolTimeout) -> JSONResponse:
        log.warning("database pool exhausted: %s", exc)
        return unavailable("the service is busy (no database connection free)")

    @app.exception_handler(DBAPIError)
    async def database_error(request: Request, exc: DBAPIError) -> JSONResponse:
        if is_unavailable(exc):
            log.warning("database unavailable: %s", exc.orig)
            return unavailable("database unavailable")
        if isinstance(exc, DataError):
            log.warning(
                "%s %s: value the database refused: %s", request.method, request.url.path, exc.orig
            )
            return JSONResponse(
                {"detail": f"a value cannot be stored: {_first_line(exc.orig)}"},
                status_code=422,
            )
        return internal_error(request, exc)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        return internal_error(request, exc)


class Unexpected:
    """Pure ASGI middleware: an exception no handler took is answered here, the logged 500
    of `internal_error`, and goes no further.

    Starlette's outermost middleware sends that same answer through the app's ``Exception``
    handler, then raises the exception again for the server to see, and uvicorn closes a
    connection whose app raised: a client's keep-alive connection, and the requests it had
    pipelined on it, were lost with the one that failed. An exception after the answer has
    started still goes up: half an answer is ended only by closing the connection.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            if started:
                raise
            await internal_error(Request(scope), exc)(scope, receive, send)


def internal_error(request: Request, exc: BaseException) -> JSONResponse:
    error_id = uuid.uuid4().hex[:12]
    log.error(
        "internal error %s on %s %s", error_id, request.method, request.url.path, exc_info=exc
    )
    return JSONResponse({"detail": "internal error", "error_id": error_id}, status_code=500)


def validation_details(errors: Any) -> list[dict[str, Any]]:
    """FastAPI's validation errors without the offending input, context values shortened."""
    details: list[dict[str, Any]] = []
    for error in errors:
        item: dict[str, Any] = {
            "type": str(error.get("type", "value_error")),
            "loc": [p if isinstance(p, int) else str(p) for p in error.get("loc", ())],
            "msg": _shorten(str(error.get("msg", ""))),
        }
        ctx = error.get("ctx")
        if isinstance(ctx, dict) and ctx:
            item["ctx"] = {str(k): _context_value(v) for k, v in ctx.items()}
        details.append(item)
    return details


def _context_value(value: object) -> object:
    if isinstance(value, bool | int | float) or value is None:
        return value
    return _shorten(str(value))


def _shorten(text: str) -> str:
    return text if len(text) <= _CONTEXT_CHARS else text[: _CONTEXT_CHARS - 1] + "…"


def _first_line(exc: BaseException | None) -> str:
    return _shorten(str(exc).strip().splitlines()[0] if exc is not None and str(exc) else "")
